# tests/e2e/progs/k8s_watch_lib.sh - helpers for the k8s_watch* and k8s_lease*
# scenarios, sourced after lib.sh (kept under progs/ so ctest does not take it
# for a scenario).
#   watcher_start RESOURCE NS [ARGS...]  e2e_k8s_watch in the background (under
#                                valgrind when installed); output in $W_OUT
#   watcher_stop                 SIGTERM, wait, check exit 0 and valgrind clean
#   store_equals_list RES NS     dump the store (SIGUSR1) and compare with LIST
#   churn_start NS / churn_stop  creates, patches and deletes ConfigMaps
W_OUT=$E2E_TMP/watch.out
W_PID=
watcher_start() {
  local res=$1 ns=$2
  shift 2
  local vg=()
  if command -v valgrind >/dev/null && [[ ${TKM_E2E_VALGRIND:-1} == 1 ]]; then
    vg=(valgrind -q --leak-check=full '--show-leak-kinds=definite,indirect'
      '--errors-for-leak-kinds=definite,indirect' --error-exitcode=9
      --suppressions="$TKM_SOURCE_DIR/tests/valgrind.supp" --log-file="$E2E_TMP/valgrind.log")
  fi
  "${vg[@]}" "${prog:?the scenario sets prog}" --resource "$res" --namespace "$ns" --dump "$E2E_TMP/dump" "$@" \
    >"$W_OUT" 2>"$E2E_TMP/watch.err" &
  W_PID=$!
  e2e_on_exit "kill -9 $W_PID 2>/dev/null"
  e2e_on_exit watcher_logs_on_failure
}

# Shows what the watcher printed when the scenario did not get to the end.
watcher_logs_on_failure() {
  [[ -e $E2E_TMP/watcher.ok ]] && return 0
  echo "--- watcher stdout (last 40 lines)" >&2
  tail -40 "$W_OUT" >&2 2>/dev/null || true
  echo "--- watcher stderr (last 20 lines)" >&2
  tail -20 "$E2E_TMP/watch.err" >&2 2>/dev/null || true
}

watcher_stop() {
  kill -TERM "$W_PID"
  local rc=0
  wait "$W_PID" || rc=$?
  if ((rc != 0)); then
    cat "$E2E_TMP/valgrind.log" >&2 2>/dev/null || true
    tail -20 "$E2E_TMP/watch.err" >&2
    fail "watcher exited with $rc"
  fi
  touch "$E2E_TMP/watcher.ok"
  pass "watcher exited 0 (valgrind clean when enabled)"
}

store_equals_list() {
  local res=$1 ns=$2 before
  before=$(grep -c '^DUMPED' "$W_OUT" || true)
  rm -f "$E2E_TMP/dump"
  kill -USR1 "$W_PID"
  for _ in $(seq 1 40); do
    (($(grep -c '^DUMPED' "$W_OUT" || true) > before)) && break
    sleep 0.25
  done
  kubectl -n "$ns" get "$res" -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name} {.metadata.resourceVersion}{"\n"}{end}' |
    LC_ALL=C sort >"$E2E_TMP/list"
  [[ -f $E2E_TMP/dump ]] && cmp -s "$E2E_TMP/list" "$E2E_TMP/dump"
}

CHURN_PID=
churn_start() {
  local ns=$1
  rm -f "$E2E_TMP/churn.stop"
  echo 0 >"$E2E_TMP/churn.count"
  (
    i=0 n=0
    while [[ ! -e $E2E_TMP/churn.stop ]]; do
      i=$((i + 1))
      kubectl --request-timeout=3s -n "$ns" create configmap "churn-$i" --from-literal=i="$i" \
        >/dev/null 2>&1 && n=$((n + 1))
      if ((i % 3 == 0)); then
        kubectl --request-timeout=3s -n "$ns" patch configmap "churn-$((i - 1))" --type merge \
          -p "{\"data\":{\"p\":\"$i\"}}" >/dev/null 2>&1 && n=$((n + 1))
      fi
      if ((i % 4 == 0)); then
        kubectl --request-timeout=3s -n "$ns" delete configmap "churn-$((i - 2))" \
          --wait=false >/dev/null 2>&1 && n=$((n + 1))
      fi
      echo "$n" >"$E2E_TMP/churn.count"
    done
  ) &
  CHURN_PID=$!
  e2e_on_exit "touch $E2E_TMP/churn.stop; kill $CHURN_PID 2>/dev/null"
}

churn_stop() {
  touch "$E2E_TMP/churn.stop"
  wait "$CHURN_PID" || true
}
