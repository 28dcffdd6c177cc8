#!/usr/bin/env bash
# The informer behind a fault-injecting proxy (tests/e2e/progs/faultproxy.c:
# plain HTTP from the client, TLS with the admin certificate to the
# apiserver). The proxy cuts the live watch stream in the middle of an event,
# then answers the next two watch requests with 429 and Retry-After: 3. The
# informer must:
#   - drop the half event, back off, re-watch from the same resourceVersion;
#   - wait at least Retry-After between the throttled attempts;
#   - never relist (the resourceVersion stayed valid);
#   - end with the object whose event was cut, and a store equal to a LIST.
source "$(dirname "$0")/lib.sh"

ns=$(e2e_namespace)
prog=$TKM_BUILD_DIR/tests/e2e_k8s_watch
proxy=$TKM_BUILD_DIR/tests/e2e_faultproxy
[[ -x $prog && -x $proxy ]] || fail "missing $prog or $proxy (build first)"
source "$(dirname "$0")/progs/k8s_watch_lib.sh"

step "start the fault proxy"
pki=$TKM_CLUSTER_DIR/pki
"$proxy" --upstream "$TKM_APISERVER" --cacert "$pki/ca.crt" --cert "$pki/admin.crt" \
  --key "$pki/admin.key" --port-file "$E2E_TMP/proxy.port" --log "$E2E_TMP/proxy.log" \
  2>"$E2E_TMP/proxy.err" &
proxy_pid=$!
e2e_on_exit "kill $proxy_pid 2>/dev/null"
wait_for 10 "proxy listening" test -s "$E2E_TMP/proxy.port"
port=$(cat "$E2E_TMP/proxy.port")
P=http://127.0.0.1:$port
kc=$E2E_TMP/proxy.kubeconfig
kubectl config --kubeconfig="$kc" set-cluster proxy --server="$P" >/dev/null
kubectl config --kubeconfig="$kc" set-credentials anonymous >/dev/null
kubectl config --kubeconfig="$kc" set-context proxy --cluster=proxy --user=anonymous >/dev/null
kubectl config --kubeconfig="$kc" use-context proxy >/dev/null
assert_contains "$(kubectl --kubeconfig="$kc" get --raw /version)" gitVersion "kubectl works through the proxy"

step "informer through the proxy"
for i in 1 2 3; do kubectl -n "$ns" create configmap "pre-$i" --from-literal=i=$i >/dev/null; done
watcher_start configmaps "$ns" --kubeconfig "$kc"
wait_for 60 "informer synced with 3 objects" grep -q "^SYNCED 3$" "$W_OUT"
wait_for 10 "the watch is open" grep -q "watch=1" "$E2E_TMP/proxy.log"

step "cut the stream mid-event, then throttle the re-watch twice (Retry-After: 3)"
curl -sf "$P/__fault/throttle?count=2&retry_after=3&watch_only=1" >/dev/null
curl -sf "$P/__fault/cut?count=1&after_bytes=40" >/dev/null
kubectl -n "$ns" create configmap victim --from-literal=payload="$(head -c 300 /dev/zero | tr '\0' x)" >/dev/null
wait_for 10 "the proxy cut the watch stream" grep -q " CUT@40$" "$E2E_TMP/proxy.log"
wait_for 40 "the object whose event was cut arrives after the re-watch" grep -q "^ADD $ns/victim " "$W_OUT"

step "what the client did"
awk '/watch=1/ { print $1, $4 }' "$E2E_TMP/proxy.log" >"$E2E_TMP/watches"
cat "$E2E_TMP/watches"
mapfile -t t429 < <(awk '$2 == "429" { print $1 }' "$E2E_TMP/watches")
((${#t429[@]} == 2)) || fail "expected two throttled watch requests, saw ${#t429[@]}"
t_ok=$(awk -v t="${t429[1]}" '$1 >= t && $2 == "START" { print $1; exit }' "$E2E_TMP/watches")
[[ -n $t_ok ]] || fail "no successful watch after the second 429"
gap1=$((t429[1] - t429[0])) gap2=$((t_ok - t429[1]))
((gap1 >= 3000 && gap2 >= 3000)) || fail "Retry-After not honoured: gaps $gap1 ms and $gap2 ms"
pass "waited at least Retry-After between throttled attempts ($gap1 ms, $gap2 ms)"
resource_versions=$(grep -o 'watch=1&resourceVersion=[0-9]*' "$E2E_TMP/proxy.log" | sort -u | wc -l)
lists=$(grep -c ' GET /api/v1/namespaces/[^ ]*/configmaps?resourceVersion=[^ ]* START$' "$E2E_TMP/proxy.log" || true)
assert_eq 1 "$lists" "listed once only: no relist after the cut or the 429s"
((resource_versions == 1)) || fail "re-watched from another resourceVersion: $(grep -o 'resourceVersion=[0-9]*' "$E2E_TMP/proxy.log" | sort -u | tr '\n' ' ')"
pass "every re-watch resumed from the same resourceVersion"
converged=0
for _ in $(seq 1 20); do
  if store_equals_list configmaps "$ns"; then converged=1; break; fi
  sleep 0.5
done
((converged)) || { diff "$E2E_TMP/list" "$E2E_TMP/dump" >&2; fail "store != LIST"; }
pass "store equals LIST"
stats=$(grep '^STATS' "$W_OUT" | tail -1)
assert_contains "$stats" "lists=1 " "one LIST in the client's stats"
assert_contains "$stats" "throttled=2 " "two 429s counted"
assert_contains "$stats" "retry_after_ms=3000 " "Retry-After of 3 s taken from the answer"
assert_eq 0 "$(grep -c '^DUP ' "$W_OUT" || true)" "no event applied twice"

step "clean exit"
watcher_stop
e2e_done
