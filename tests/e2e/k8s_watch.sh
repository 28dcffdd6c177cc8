#!/usr/bin/env bash
# The informer survives kube-apiserver being SIGKILLed and restarted mid-stream
# under churn, TKM_E2E_KILLS times (default 3): afterwards its store equals a fresh LIST (same keys, same
# resourceVersions), no event was applied twice, and it reconnected without
# a hot loop. The watcher runs under valgrind (leaks are errors) when
# valgrind is installed.
source "$(dirname "$0")/lib.sh"

ns=$(e2e_namespace)
prog=$TKM_BUILD_DIR/tests/e2e_k8s_watch
[[ -x $prog ]] || fail "missing $prog (build first)"
source "$(dirname "$0")/progs/k8s_watch_lib.sh"

step "20 ConfigMaps, then the informer"
for i in $(seq 1 20); do echo "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"pre-$i\"},\"data\":{\"i\":\"$i\"}}"; done |
  kubectl -n "$ns" apply -f - >/dev/null
watcher_start configmaps "$ns"
wait_for 60 "informer synced with 20 objects" grep -q "^SYNCED 20$" "$W_OUT"

kills=${TKM_E2E_KILLS:-3}
step "churn; $kills x (SIGKILL kube-apiserver mid-stream, restart it, churn more)"
churn_start "$ns"
sleep 3
for k in $(seq 1 "$kills"); do
  apid=$(cat "$TKM_CLUSTER_DIR/kube-apiserver.pid")
  kill -9 "$apid"
  pass "kill $k: kube-apiserver (pid $apid) SIGKILLed"
  sleep 2
  "$TKM_SOURCE_DIR/hack/cluster.sh" restart-apiserver >/dev/null 2>&1 || fail "restart-apiserver failed"
  pass "kill $k: kube-apiserver restarted"
  sleep 4
done
churn_stop
n_churn=$(cat "$E2E_TMP/churn.count")
((n_churn > 10)) || fail "churn made only $n_churn changes"
pass "churn made $n_churn changes"

step "the store converges to a fresh LIST"
converged=0
for _ in $(seq 1 60); do
  if store_equals_list configmaps "$ns"; then converged=1; break; fi
  sleep 1
done
((converged)) || { diff "$E2E_TMP/list" "$E2E_TMP/dump" | head -20 >&2 || true; fail "store != LIST after 60 s"; }
pass "store equals LIST ($(wc -l <"$E2E_TMP/list") objects, keys and resourceVersions)"
assert_eq 0 "$(grep -c '^DUP ' "$W_OUT" || true)" "no event applied twice"
stats=$(grep '^STATS' "$W_OUT" | tail -1)
watches=$(sed -n 's/.* watches=\([0-9]*\).*/\1/p' <<<"$stats")
((watches > kills)) || fail "expected a re-watch after each restart: $stats"
pass "re-watched after the restarts ($stats)"
lists=$(sed -n 's/.* lists=\([0-9]*\).*/\1/p' <<<"$stats")
events=$(sed -n 's/.* events=\([0-9]*\).*/\1/p' <<<"$stats")
if ((lists == 1)); then
  # No relist: every change must have arrived as an event (none lost).
  ((events >= n_churn)) || fail "only $events events for $n_churn changes without a relist"
  pass "all $n_churn changes arrived as events ($events), no relist needed"
fi
errs=$(grep -c '^WATCHERR' "$W_OUT" || true)
((errs <= 8 * kills)) || fail "$errs watch errors in a few seconds: a hot loop? $(grep '^WATCHERR' "$W_OUT" | head -5)"
pass "no hot loop while the apiserver was down ($errs backoffs)"

step "clean exit"
watcher_stop
e2e_done
