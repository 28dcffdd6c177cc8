#!/usr/bin/env bash
# examples/tkc_watch against the real apiserver: it prints TritonKernelCache
# additions, changes and deletions, reconciles each key through the work
# queue, and exits cleanly on Ctrl-C (under valgrind when installed).
source "$(dirname "$0")/lib.sh"

ns=$(e2e_namespace)
ex=$TKM_BUILD_DIR/examples/tkc_watch
[[ -x $ex ]] || fail "missing $ex (build first)"
kubectl apply -f "$TKM_SOURCE_DIR/crds/" >/dev/null
tkc() { # NAME IMAGE
  printf 'apiVersion: tkm.io/v1alpha1\nkind: TritonKernelCache\nmetadata: {name: %s}\nspec: {cacheImage: "%s"}\n' "$1" "$2"
}
tkc llama quay.io/org/llama-cache:v3 | kubectl -n "$ns" apply -f - >/dev/null
vg=()
if command -v valgrind >/dev/null && [[ ${TKM_E2E_VALGRIND:-1} == 1 ]]; then
  vg=(valgrind -q --leak-check=full '--show-leak-kinds=definite,indirect'
    '--errors-for-leak-kinds=definite,indirect' --error-exitcode=9
    --suppressions="$TKM_SOURCE_DIR/tests/valgrind.supp")
fi
"${vg[@]}" "$ex" -n "$ns" >"$E2E_TMP/out" 2>"$E2E_TMP/err" &
pid=$!
e2e_on_exit "kill -9 $pid 2>/dev/null"
wait_for 60 "synced with the existing cache" grep -q "^synced: 1 caches" "$E2E_TMP/out"
assert_contains "$(cat "$E2E_TMP/out")" "ADDED     $ns/llama  image=quay.io/org/llama-cache:v3" "the existing cache is printed"
tkc mistral quay.io/org/mistral-cache:v1 | kubectl -n "$ns" apply -f - >/dev/null
kubectl -n "$ns" patch tkc llama --type merge -p '{"spec":{"cacheImage":"quay.io/org/llama-cache:v4"}}' >/dev/null
kubectl -n "$ns" delete tkc mistral >/dev/null
wait_for 30 "the deletion is printed" grep -q "^DELETED   $ns/mistral " "$E2E_TMP/out"
out=$(cat "$E2E_TMP/out")
assert_contains "$out" "ADDED     $ns/mistral  image=quay.io/org/mistral-cache:v1" "the new cache is printed"
assert_contains "$out" "MODIFIED  $ns/llama  image=quay.io/org/llama-cache:v4" "the change is printed"
assert_contains "$out" "reconcile $ns/mistral (gone)" "the queue reconciles the deleted key"
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
((rc == 0)) || { cat "$E2E_TMP/err" >&2; fail "tkc_watch exited $rc"; }
pass "tkc_watch exited 0 on Ctrl-C (valgrind clean when enabled)"
e2e_done
