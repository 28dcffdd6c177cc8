#!/usr/bin/env bash
# Three candidates start at the same moment on a Lease that does not exist:
# the create and the updates race (optimistic lock: 409 for the losers), and
# exactly one of them leads and acts; the others observe it as the leader.
source "$(dirname "$0")/lib.sh"

ns=$(e2e_namespace)
prog=$TKM_BUILD_DIR/tests/e2e_k8s_lease
[[ -x $prog ]] || fail "missing $prog (build first)"
pids=()
for id in X Y Z; do
  "$prog" --name race --namespace "$ns" --identity "$id" --lease-ms 6000 --renew-ms 4000 \
    --retry-ms 500 >"$E2E_TMP/$id.out" 2>"$E2E_TMP/$id.err" &
  pids+=($!)
  e2e_on_exit "kill -9 $! 2>/dev/null"
done
step "three candidates race for a new Lease"
wait_for 30 "someone leads" bash -c "cat '$E2E_TMP'/[XYZ].out | grep -q ' LEADING '"
sleep 4
leaders=$(cat "$E2E_TMP"/[XYZ].out | awk '$2 == "LEADING" { print $3 }' | sort -u)
assert_eq 1 "$(wc -l <<<"$leaders")" "exactly one candidate ever led ($leaders)"
actors=$(cat "$E2E_TMP"/[XYZ].out | awk '$2 == "ACTING" { print $3 }' | sort -u)
assert_eq "$leaders" "$actors" "only the leader acted"
holder=$(kubectl -n "$ns" get lease race -o jsonpath='{.spec.holderIdentity}')
assert_eq "$leaders" "$holder" "the Lease names the leader"
for id in X Y Z; do
  [[ $id == "$leaders" ]] && continue
  grep -q " LEADER $leaders\$" "$E2E_TMP/$id.out" || fail "$id did not observe $leaders as the leader"
done
pass "the others observe $leaders as the leader"
for p in "${pids[@]}"; do kill -TERM "$p"; done
for p in "${pids[@]}"; do wait "$p" || fail "a candidate exited non-zero"; done
grep -h "conflicts=" "$E2E_TMP"/[XYZ].err
pass "all candidates exited 0"
e2e_done
