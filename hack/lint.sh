#!/usr/bin/env bash
# Lint checks run by ctest (lint.*) and `make format-check`.
#   hack/lint.sh format   every C file in the repo is clang-formatted (.clang-format)
#   hack/lint.sh banned   no banned function (lib/banned.h) in any C file, even ones built without it
#   hack/lint.sh shell    shellcheck finds nothing in any shell script of hack/, bench/, tests/e2e/, tests/helm/
#                         and .ci/ (*.sh, *.bash, *.inc and files with a sh/bash #! line), with
#                         the settings of .shellcheckrc; every finding, style notes included, fails
set -euo pipefail
cd "$(dirname "$0")/.."
# tracked and new (not ignored) files that exist, of the given pathspecs
tree_files() { git ls-files --cached --others --exclude-standard -- "$@" | while read -r f; do [[ -e $f ]] && echo "$f"; done; }
mapfile -t files < <(tree_files '*.c' '*.h')
case ${1:-} in
  format)
    command -v clang-format >/dev/null || { echo "clang-format not installed (hack/deps.sh)" >&2; exit 1; }
    bad=0
    for f in "${files[@]}"; do
      if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
        echo "not clang-formatted: $f (run: clang-format -i $f, or make format)"
        bad=$((bad + 1))
      fi
    done
    echo "format: ${#files[@]} files checked, $bad not formatted"
    [[ $bad -eq 0 ]]
    ;;
  banned)
    # Comments and string literals may name them; calls may not.
    if grep -nE '(^|[^_a-zA-Z0-9.>])(strcpy|strcat|strncpy|strncat|sprintf|vsprintf|strtok|atoi|atol|atoll|gmtime|localtime)[[:space:]]*\(' \
      "${files[@]}" | grep -v 'lib/banned.h' | grep -vE '^\S+:[0-9]+:\s*(\*|//|/\*)'; then
      echo "banned functions used (see lib/banned.h for what to use instead)"
      exit 1
    fi
    echo "banned: ${#files[@]} files clean"
    ;;
  shell)
    command -v shellcheck >/dev/null || { echo "shellcheck not installed (hack/deps.sh)" >&2; exit 1; }
    scripts=()
    while read -r f; do
      case $f in
        *.sh | *.bash | *.inc) scripts+=("$f") ;;
        *) [[ $(head -n1 "$f") =~ ^#!.*[/\ ](ba)?sh$ ]] && scripts+=("$f") ;;
      esac
    done < <(tree_files hack bench tests/e2e tests/helm .ci)
    # From the repository root, where the "# shellcheck source=" directives' paths start.
    if ! shellcheck --format=gcc "${scripts[@]}"; then
      echo "shell: shellcheck found the above in ${#scripts[@]} scripts (fix them; a '# shellcheck disable=' needs a reason beside it)"
      exit 1
    fi
    echo "shell: ${#scripts[@]} scripts clean (shellcheck $(shellcheck --version | sed -n 's/^version: //p'))"
    ;;
  *) echo "usage: hack/lint.sh format|banned|shell" >&2; exit 2 ;;
esac
