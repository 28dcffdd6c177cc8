#!/usr/bin/env bash
# k8s_token_rotation: a kubeconfig with tokenFile; the file is rewritten while
# one client keeps running, and the client uses the new token without a
# restart, both through the periodic re-read and through the re-read after a
# 401.
source "$(dirname "$0")/lib.sh"

PBIN=$TKM_BUILD_DIR/tests/e2e_k8s_rest
[[ -x $PBIN ]] || fail "missing $PBIN (build first)"
P() { e2e_valgrind "$PBIN" "$@"; } # every client run is checked by valgrind
T=$E2E_TMP
TOK_ADMIN=$(sed -n 2p "$TKM_CLUSTER_DIR/tokens.csv" | cut -d, -f1)
TOK_ALICE=$(grep ',alice,' "$TKM_CLUSTER_DIR/tokens.csv" | cut -d, -f1)
[[ -n $TOK_ADMIN && -n $TOK_ALICE ]] || fail "tokens.csv lacks the spare tokens"

# A kubeconfig whose user reads its token from a file next to it (relative path).
make_kubeconfig() { # FILE
  cp "$TKM_CLUSTER_DIR/token.kubeconfig" "$1"
  kubectl config --kubeconfig="$1" unset users.tkm-admin.token >/dev/null
  kubectl config --kubeconfig="$1" set users.tkm-admin.tokenFile token >/dev/null
}
make_kubeconfig "$T/kc"
assert_not_contains "$(cat "$T/kc")" "$TOK_ADMIN" "kubeconfig holds no token itself"

# Waits until FILE has a line matching PATTERN (the background client's progress).
wait_line() { # FILE PATTERN SECONDS
  local t0=$SECONDS
  until grep -q "$2" "$1" 2>/dev/null; do
    ((SECONDS - t0 < $3)) || fail "no line '$2' in $1 after $3 s: $(cat "$1")"
    sleep 0.2
  done
}

step "periodic re-read: token A (tkm-admin) replaced by token B (alice)"
printf '%s\n' "$TOK_ADMIN" >"$T/token"
E2E_TOKEN_RELOAD_MS=1000 P --kubeconfig "$T/kc" whoami-until alice 30 >"$T/out1" 2>&1 &
PID=$!
e2e_on_exit "kill $PID 2>/dev/null"
wait_line "$T/out1" "user=tkm-admin" 15
pass "the client authenticated with token A"
printf '%s\n' "$TOK_ALICE" >"$T/token.new" && mv "$T/token.new" "$T/token"
wait "$PID" || fail "the client did not switch to token B: $(cat "$T/out1")"
assert_eq "$(cat "$T/out1")" $'user=tkm-admin\nuser=alice' "same process moved from token A to token B"

step "re-read after 401: a revoked token replaced while the client runs"
make_kubeconfig "$T/kc2"
sed -i "s#tokenFile: token#tokenFile: token2#" "$T/kc2"
printf 'not-a-valid-token\n' >"$T/token2"
# Default re-read period (60 s): only the 401 makes the client look again.
P --kubeconfig "$T/kc2" whoami-until tkm-admin 30 >"$T/out2" 2>&1 &
PID2=$!
e2e_on_exit "kill $PID2 2>/dev/null"
wait_line "$T/out2" "ERROR code=401" 15
pass "the invalid token is refused with 401"
assert_contains "$(cat "$T/out2")" "Unauthorized" "401 reason shown"
printf '%s\n' "$TOK_ADMIN" >"$T/token2"
wait "$PID2" || fail "the client did not pick up the new token after a 401: $(cat "$T/out2")"
assert_contains "$(cat "$T/out2")" "user=tkm-admin" "new token used after the 401, no restart"

e2e_done
