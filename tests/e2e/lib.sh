# tests/e2e/lib.sh - sourced by every e2e scenario.
#
# Gives: the control plane's environment (KUBECONFIG, TKM_REGISTRY, TKM_APISERVER,
# TKM_CLUSTER_DIR) from the cluster the ctest fixture started, the build and source
# dirs, and assertions that print what they expected and what they got.
# A scenario runs top to bottom under `set -euo pipefail`; the first failed
# assertion ends it with exit 1. Call `e2e_done` at the end.
set -euo pipefail

TKM_SOURCE_DIR=${TKM_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
TKM_BUILD_DIR=${TKM_BUILD_DIR:-$TKM_SOURCE_DIR/build}
TKM_FIXTURES=${TKM_FIXTURES:-$TKM_SOURCE_DIR/tests/fixtures}
TKM_CLUSTER_DIR=${TKM_CLUSTER_DIR:-$TKM_SOURCE_DIR/.tkm/cluster}
if [[ -s $TKM_CLUSTER_DIR/env ]]; then
  # shellcheck source=/dev/null # written by hack/cluster.sh up
  source "$TKM_CLUSTER_DIR/env"
else
  echo "e2e: no control plane in $TKM_CLUSTER_DIR (run: hack/cluster.sh up)" >&2
  exit 1
fi
export TKM_SOURCE_DIR TKM_BUILD_DIR TKM_FIXTURES
# The registries the suite runs on loopback (the registry fixture, and the fault, token
# and silent registries scenarios start on free ports): allowed explicitly, as an admin
# would (docs/registry-reach.md), with flags on every tkm-controller and tkm-agent a
# scenario starts (ctrl_start, agent_start); a tkm-config key of the same name wins.
# Without them the daemons refuse loopback registries (RegistryNotAllowed) and speak
# https. ctrl_reach.sh and agent_reach.sh start daemons without them to show the refusals.
E2E_LOCAL_REGISTRIES="127.0.0.1 localhost [::1]"
# shellcheck disable=SC2034 # read by ctrl_helpers.bash, agent.inc and the scenarios
E2E_REACH_FLAGS=(--registry-allow "* $E2E_LOCAL_REGISTRIES" --registry-private "$E2E_LOCAL_REGISTRIES"
  --registry-plain-http "$E2E_LOCAL_REGISTRIES")
E2E_NAME=$(basename "${BASH_SOURCE[1]:-$0}" .sh)
E2E_TMP=$(mktemp -d "${TMPDIR:-/tmp}/tkm-e2e-$E2E_NAME-XXXXXX")
E2E_CHECKS=0
e2e_cleanup_hooks=()
# e2e_on_exit CMD: run CMD when the scenario exits. Helpers called as $(...)
# (e2e_namespace) run in a subshell, whose array the scenario never sees: there the
# hook goes to a file the exit handler reads too (subshell hooks run after the
# scenario's own, in the order they were added).
e2e_on_exit() {
  if [[ $BASHPID == "$$" ]]; then
    e2e_cleanup_hooks+=("$1")
  else
    printf '%s\0' "$1" >>"$E2E_TMP/exit-hooks"
  fi
}
# e2e_on_fail CMD: run CMD first if the scenario fails, before the exit hooks clean
# up: for what explains the failure (pod states, events, daemon logs). CI shows
# only this output. Main shell only.
e2e_fail_hooks=()
e2e_on_fail() { e2e_fail_hooks+=("$1"); }
e2e_exit() {
  local rc=$? h
  if ((rc != 0)) && ((${#e2e_fail_hooks[@]})); then
    echo "=== [$E2E_NAME] failed: what the scenario saw ===" >&2
    for h in "${e2e_fail_hooks[@]}"; do eval "$h" >&2 || true; done
    echo "=== [$E2E_NAME] end of what it saw ===" >&2
  fi
  for h in "${e2e_cleanup_hooks[@]}"; do eval "$h" || true; done
  if [[ -s $E2E_TMP/exit-hooks ]]; then
    while IFS= read -r -d '' h; do eval "$h" || true; done <"$E2E_TMP/exit-hooks"
  fi
  if [[ -d $E2E_TMP/valgrind ]] && [[ -n $(find "$E2E_TMP/valgrind" -type f -size +0 2>/dev/null) ]]; then
    echo "FAIL [$E2E_NAME]: valgrind reported errors or leaks:" >&2
    find "$E2E_TMP/valgrind" -type f -size +0 -exec cat {} + >&2
    rc=1
  fi
  rm -rf "$E2E_TMP"
  exit $rc
}
trap e2e_exit EXIT
# A command that fails outside an assertion ends the scenario under set -e; say which.
trap 'echo "FAIL [$E2E_NAME]: line $LINENO: \"$BASH_COMMAND\" exited $?" >&2' ERR

# e2e_valgrind CMD...: runs a C client program under valgrind memcheck (quiet,
# definite/indirect leaks count) unless TKM_E2E_VALGRIND=0 or valgrind is
# missing. Its exit status is the program's own, so expect_fail still works;
# any report fails the scenario when it exits.
e2e_valgrind() {
  if [[ ${TKM_E2E_VALGRIND:-1} != 0 ]] && command -v valgrind >/dev/null; then
    mkdir -p "$E2E_TMP/valgrind"
    valgrind -q --leak-check=full --show-leak-kinds=definite,indirect \
      --errors-for-leak-kinds=definite,indirect --track-fds=no \
      --suppressions="$TKM_SOURCE_DIR/tests/valgrind.supp" \
      --log-file="$E2E_TMP/valgrind/%p.log" "$@"
  else
    "$@"
  fi
}

fail() {
  echo "FAIL [$E2E_NAME]: $*" >&2
  exit 1
}
step() { echo "--- $*"; }
pass() { E2E_CHECKS=$((E2E_CHECKS + 1)); echo "ok: $*"; }

# assert_eq EXPECTED ACTUAL WHAT
assert_eq() {
  [[ "$1" == "$2" ]] || fail "$3: expected '$1', got '$2'"
  pass "$3"
}
# assert_contains HAYSTACK NEEDLE WHAT
assert_contains() {
  [[ "$1" == *"$2"* ]] || fail "$3: expected to find '$2' in: $1"
  pass "$3"
}
assert_not_contains() {
  [[ "$1" != *"$2"* ]] || fail "$3: did not expect '$2' in: $1"
  pass "$3"
}
# expect_fail WHAT CMD...: CMD must exit non-zero; its output is left in $OUT.
expect_fail() {
  local what=$1
  shift
  if OUT=$("$@" 2>&1); then
    fail "$what: expected failure, but succeeded: $OUT"
  fi
  pass "$what (fails as it should)"
}
# expect_ok WHAT CMD...: CMD must succeed; its output is left in $OUT.
expect_ok() {
  local what=$1
  shift
  if ! OUT=$("$@" 2>&1); then
    fail "$what: failed: $OUT"
  fi
  pass "$what"
}
# wait_for SECONDS WHAT CMD...: retries CMD every 0.5 s until it succeeds.
wait_for() {
  local secs=$1 what=$2 t0=$SECONDS
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS - t0 < secs)) || fail "$what: not true after ${secs}s"
    sleep 0.5
  done
  pass "$what"
}
# e2e_silent_registry NAME: a TCP server on 127.0.0.1 that accepts connections and never
# answers (a registry that stalls). Its port goes to $E2E_TMP/NAME.port (waited for), a line
# per accepted connection to $E2E_TMP/NAME.accepts; it is stopped when the scenario exits.
# Main shell only (not inside $(...)).
e2e_silent_registry() {
  python3 -c '
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(64)
print(s.getsockname()[1], flush=True)
conns = []
while True:
    c, _ = s.accept(); conns.append(c)   # accept, never answer
    with open(sys.argv[1], "a") as f: f.write("accepted\n")
' "$E2E_TMP/$1.accepts" >"$E2E_TMP/$1.port" &
  e2e_on_exit "kill $! 2>/dev/null"
  wait_for 10 "a registry that never answers listens ($1)" test -s "$E2E_TMP/$1.port"
}
# e2e_logging_registry NAME [ADDR4 [ADDR6]]: an HTTP server on ADDR4:P (default 127.0.0.1)
# and [ADDR6]:P (default ::1, "-" for none), the same port P (loopback addresses only), that logs every request ("METHOD PATH HOST", HOST the Host header) to
# $E2E_TMP/NAME.requests and every accepted connection to $E2E_TMP/NAME.accepts, and
# answers each with 403 and an OCI error body. P goes to $E2E_TMP/NAME.port (waited for);
# stopped when the scenario exits. Main shell only.
e2e_logging_registry() {
  python3 -c '
import http.server, socket, socketserver, sys, threading
log, acc, a4, a6 = sys.argv[1:5]
def note(path, line):
    with open(path, "a") as f: f.write(line + "\n")
class H(http.server.BaseHTTPRequestHandler):
    def setup(self):
        note(acc, "accepted"); super().setup()
    def answer(self):
        note(log, "%s %s %s" % (self.command, self.path, self.headers.get("Host", "")))
        b = b"{\"errors\":[{\"code\":\"DENIED\",\"message\":\"INTERNAL-SECRET\"}]}"
        self.send_response(403); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b))); self.end_headers()
        if self.command != "HEAD": self.wfile.write(b)
    do_GET = do_HEAD = do_POST = answer
    def log_message(self, *a): pass
class S4(socketserver.ThreadingMixIn, http.server.HTTPServer): daemon_threads = True
class S6(S4): address_family = socket.AF_INET6
while True:  # a port free on both addresses
    s4 = S4((a4, 0), H)
    try: s6 = S6((a6, s4.server_address[1]), H) if a6 != "-" else None; break
    except OSError: s4.server_close()
print(s4.server_address[1], flush=True)
if s6: threading.Thread(target=s6.serve_forever, daemon=True).start()
s4.serve_forever()
' "$E2E_TMP/$1.requests" "$E2E_TMP/$1.accepts" "${2:-127.0.0.1}" "${3:-::1}" >"$E2E_TMP/$1.port" &
  e2e_on_exit "kill $! 2>/dev/null"
  wait_for 10 "a registry that logs every request listens ($1)" test -s "$E2E_TMP/$1.port"
}
e2e_done() { echo "$E2E_NAME: $E2E_CHECKS checks passed"; }

# A scratch namespace per scenario, deleted at exit.
# Installs the tkm CRDs and waits until the apiserver serves them. `kubectl wait`
# right after `apply` can fail with "conditions accessor error" before the CRD
# controller has written any condition, so wait for the condition in a loop.
e2e_crds() {
  kubectl apply --server-side --force-conflicts -f "$TKM_SOURCE_DIR/crds/" >/dev/null
  e2e_crds_established tritonkernelcaches tritonkernelcacheclusters tritonkernelcachenodestatuses \
    tritonkernelcachenodestatusclusters
}

# e2e_crds_established PLURAL...: waits (30 s) until each tkm.io CRD is Established. Not
# `kubectl wait --for=condition=Established`: on a CRD created a moment ago (the first scenario
# after cluster.up) kubectl 1.35 fails at once, "accessor error: <nil>", before any condition is set.
e2e_crds_established() {
  local crd
  for crd in "$@"; do
    wait_for 30 "CRD $crd.tkm.io Established" \
      bash -c "[[ \$(kubectl get crd $crd.tkm.io -o jsonpath='{.status.conditions[?(@.type==\"Established\")].status}' 2>/dev/null) == True ]]"
  done
}

e2e_namespace() {
  local ns="e2e-$E2E_NAME-$RANDOM"
  ns=${ns//_/-}
  kubectl create namespace "$ns" >/dev/null
  # No kube-controller-manager runs here, so a deleted namespace stays Terminating
  # with its objects: delete what tests put there first.
  e2e_on_exit "kubectl -n $ns delete tkc,tkcns,configmaps,secrets,leases,events --all --wait=false >/dev/null 2>&1; kubectl delete namespace $ns --wait=false >/dev/null 2>&1"
  echo "$ns"
}

# e2e_base_no_workloads DIR: writes DIR/kustomization.yaml, manifests/base without the
# tkm-controller Deployment and the tkm-node DaemonSet, for scenarios that apply the base
# for real: with a node running, the base's workloads would start pods that break the
# test node's rule (not hostNetwork, public image names). The workloads run on the test
# node only from manifests/overlays/local (node_tkm); the others dry-run them.
e2e_base_no_workloads() {
  mkdir -p "$1"
  cat >"$1/kustomization.yaml" <<EOK
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- $(realpath --relative-to="$1" "$TKM_SOURCE_DIR/manifests/base")
patches:
- patch: |-
    \$patch: delete
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: tkm-controller, namespace: tkm-system}
- patch: |-
    \$patch: delete
    apiVersion: apps/v1
    kind: DaemonSet
    metadata: {name: tkm-node, namespace: tkm-system}
EOK
}
