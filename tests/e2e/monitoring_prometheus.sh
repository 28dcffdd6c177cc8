#!/usr/bin/env bash
# monitoring_prometheus: a real Prometheus (built from Go modules; loopback, free port, scrape
# and rule evaluation every second) scrapes a real tkm-controller and two real tkm-agents (fake
# GPU roots: an H200 that can use the cache, an A100 that cannot) while they reconcile a real
# cache against the real apiserver and registry, with manifests/monitoring/tkm-rules.yaml loaded.
#   - every tkm_*/process_* name in the dashboard and the rules is in the daemons' real /metrics;
#   - every target expression of every dashboard panel returns data from Prometheus's HTTP API,
#     and the fleet matrix, store and extraction panels show what really happened;
#   - every rule evaluates without error and no alert is pending or firing on the healthy
#     fleet (a cache with signature checks disabled is not a verification failure);
#   - a cache signed with another key makes TKMCacheVerificationFailed and TKMCacheNotReady
#     pending; a stopped agent makes TKMAgentDown pending, a stopped controller
#     TKMControllerNoLeader (their `for:` durations are proven by tests/monitoring/*.yaml).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/agent.inc"
source "$(dirname "$0")/ctrl_helpers.bash"

# shellcheck source=tests/e2e/prom.inc
source "$(dirname "$0")/prom.inc"
MON=$TKM_SOURCE_DIR/manifests/monitoring
DASH=$MON/tkm-dashboard.json
RULES=$PROM_RULES
[[ -s $DASH ]] || fail "missing $DASH"

ctrl_crds
agent_ns
CTRL_NS=$NS
e2e_on_exit "kubectl -n $NS delete tkc --all --wait=false >/dev/null 2>&1; sleep 3; ctrl_kill_all"

step "a signed cache image, a second key"
ctrl_keys
REPO=$TKM_REGISTRY/e2e-monitoring-$RANDOM/vadd
agent_image "$REPO" "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" >/dev/null
D=$("$CRANE" digest "$REPO:v1")
ctrl_sign "$REPO@$D"
# prefetch: an agent extracts a usable cache on its compatible GPUs at once (no pod needed)
# the caches here switch signature checks off for themselves: the admin allows it (issue 23)
kubectl -n "$NS" create configmap tkm-config --from-literal=signatureFloor=Disabled --from-literal=prefetch=true >/dev/null
cache_create tkc "$NS" a "$REPO:v1" "" "  signaturePolicy: {mode: Disabled}"
H=e2e-mon-h200-$RANDOM A=e2e-mon-a100-$RANDOM
agent_node "$H"
agent_node "$A"

# metrics_url LOG PATTERN: the http://host:port of the "metrics on" line a daemon logged.
metrics_url() {
  grep -o "$2[0-9.]*:[0-9]*" "$1" | head -1 | sed "s|$2|http://|"
}

step "tkm-controller and two tkm-agents, metrics on ephemeral loopback ports"
ctrl_start c1 --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0
agent_start h200 h200 "$H" "$NS" --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0
agent_start a100 a100 "$A" "$NS" --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0
wait_for 60 "the controller logs its metrics address" grep -q "/metrics on 127.0.0.1:" "$E2E_TMP/c1.log"
for n in h200 a100; do
  wait_for 60 "agent $n logs its metrics address" grep -q "metrics on http://127.0.0.1:" "$E2E_TMP/$n.log"
done
CURL=$(metrics_url "$E2E_TMP/c1.log" "/metrics on ")
HURL=$(metrics_url "$E2E_TMP/h200.log" "metrics on http://")
AURL=$(metrics_url "$E2E_TMP/a100.log" "metrics on http://")
[[ $CURL == http://127.0.0.1:* && $HURL == http://127.0.0.1:* && $AURL == http://127.0.0.1:* ]] ||
  fail "metrics addresses: controller '$CURL', h200 '$HURL', a100 '$AURL'"

step "a real Prometheus scrapes them every second, with the alert rules"
prom_start "- job_name: tkm-controller
  static_configs:
  - targets: ['${CURL#http://}']
    labels: {node: e2e-control-plane}
- job_name: tkm-agent
  static_configs:
  - targets: ['${HURL#http://}']
    labels: {node: $H}
  - targets: ['${AURL#http://}']
    labels: {node: $A}"

up_all() { [[ $(promv 'sum(up{job=~"tkm-controller|tkm-agent"})') == 3 ]]; }
wait_for 60 "all three targets are up" up_all

step "the controller pins, the agents judge and extract"
pinned() { [[ $(kubectl -n "$NS" get tkc a -o jsonpath='{.status.resolvedDigest}') == "$D" ]]; }
wait_for 60 "the controller pins the digest" pinned
counts() { [[ $(kubectl -n "$NS" get tkc a -o jsonpath='{.status.counts.nodes}/{.status.counts.compatible}/{.status.counts.incompatible}') == 2/1/1 ]]; }
wait_for 120 "counts nodes/compatible/incompatible = 2/1/1" counts
extracted() { [[ $(promv 'sum(tkm_agent_extraction_seconds_count)') == 1 ]]; }
wait_for 60 "Prometheus sees the H200's extraction (prefetch)" extracted
wait_for 60 "cache a Ready" bash -c "[[ \$(kubectl -n $NS get tkc a -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}') == True ]]"

step "every metric name of the dashboard and the rules is in the daemons' real /metrics"
for u in "$CURL" "$HURL" "$AURL"; do
  curl -sf --max-time 10 "$u/metrics" >>"$E2E_TMP/scraped.txt" || fail "GET $u/metrics"
done
# Exported names: every sample's name and every declared family (# TYPE, also before its first series).
{ grep -v '^#' "$E2E_TMP/scraped.txt" | sed -E 's/[{ ].*//'; awk '$1 == "#" && $2 == "TYPE" { print $3 }' "$E2E_TMP/scraped.txt"; } |
  sort -u >"$E2E_TMP/exported"
(($(wc -l <"$E2E_TMP/exported") > 40)) || fail "only $(wc -l <"$E2E_TMP/exported") names scraped"
names() { grep -oE '(^|[^A-Za-z0-9_:])(tkm|process)_[a-z0-9_]+' | sed -E 's/^[^a-z]//' | sort -u; }
{ jq -r '.panels[].targets[].expr' "$DASH"; "$TKM_SOURCE_DIR/hack/gen-monitoring.sh" --extract "$MON/prometheusrule.yaml"; } |
  names >"$E2E_TMP/used"
(($(wc -l <"$E2E_TMP/used") >= 15)) || fail "only $(wc -l <"$E2E_TMP/used") names found in the dashboard and rules"
missing=$(comm -23 "$E2E_TMP/used" "$E2E_TMP/exported")
[[ -z $missing ]] || fail "named by the dashboard or the rules but not exported by the daemons: $missing"
pass "$(wc -l <"$E2E_TMP/used") names used, all among the $(wc -l <"$E2E_TMP/exported") the daemons export"

step "every dashboard panel's queries return data"
# Grafana's $__rate_interval is 4 scrape intervals at least; a minute covers the 1 s scrapes here.
npanels=0 nq=0
while IFS=$'\t' read -r title expr; do
  q=${expr//\$__rate_interval/1m}
  has_data() { [[ $(promq "$q" | jq '.data.result | length') -gt 0 ]]; }
  wait_for 90 "panel '$title': $q" has_data
  nq=$((nq + 1))
done < <(jq -r '.panels[] | .title as $t | .targets[] | [$t, .expr] | @tsv' "$DASH")
npanels=$(jq '.panels | length' "$DASH")
((nq >= npanels && npanels >= 6)) || fail "only $nq queries in $npanels panels"
pass "all $nq queries of the $npanels panels return data"
fleet=$(promq "$(jq -r '.panels[] | select(.title | startswith("Fleet")) | .targets[0].expr' "$DASH")" |
  jq -r '.data.result[] | "\(.metric.node)/\(.metric.state)=\(.value[1])"' | sort | tr '\n' ' ')
# "usable": inspected without a failure reason on both; only the H200 extracts it (the A100's
# GPU is incompatible: counts and failedNodes say so, the store stays empty).
assert_eq "$A/failed=0 $A/pending=0 $A/usable=1 $H/failed=0 $H/pending=0 $H/usable=1 " "$fleet" \
  "fleet matrix: one row per node, the cache usable on both"
assert_eq 1 "$(promv 'sum(tkm_agent_extraction_seconds_count)')" "one extraction in all, the H200's"
sb=$(promv "sum(tkm_agent_store_bytes{node=\"$H\"})")
{ [[ $sb =~ ^[0-9]+$ ]] && ((sb > 0)); } || fail "the H200's store bytes: '$sb'"
pass "the H200's store holds $sb bytes"
assert_eq 0 "$(promv "sum(tkm_agent_store_bytes{node=\"$A\"})")" "the A100's store holds nothing"
assert_eq 10737418240 "$(promv "tkm_agent_store_budget_bytes{node=\"$H\"}")" "the store budget is --store-budget's default, 10Gi"
# Both agents wrote their node status (change, then heartbeats) within the last two minutes.
age=$(promv 'max(time() - tkm_agent_last_status_write_timestamp_seconds)')
awk -v a="$age" 'BEGIN { exit !(a != "" && a >= 0 && a < 120) }' ||
  fail "the agents' last status writes are '$age' s old (expected 0 to 120)"
pass "the agents' last node status writes are at most ${age%.*} s old"

step "the rules evaluate on real data, and the healthy fleet raises no alert"
nrules=$(grep -c '^  - alert: ' "$RULES")
rules_ok() {
  local r
  r=$(curl -sf --max-time 10 "$PROM/api/v1/rules") || return 1
  [[ $(jq '[.data.groups[].rules[] | select(.type == "alerting" and .health == "ok" and .lastEvaluation != "0001-01-01T00:00:00Z")] | length' <<<"$r") == "$nrules" ]]
}
wait_for 60 "all $nrules alert rules evaluated, health ok" rules_ok
quiet() { [[ -z $(alerts) ]]; }
wait_for 60 "no alert pending or firing on the healthy fleet" quiet
assert_eq 0 "$(promv 'sum(tkm_controller_verification_failed_caches)')" "a cache with verification Disabled is no verification failure"
assert_eq 1 "$(promv 'max(tkm_controller_leader)')" "the controller leads"

step "a cache signed with another key: TKMCacheVerificationFailed and TKMCacheNotReady go pending"
PUB=$(sed 's/^/      /' "$E2E_TMP/other/cosign.pub")
kubectl -n "$NS" apply -f - >/dev/null <<EOF2
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: badsig}
spec:
  cacheImage: $REPO:v1
  signaturePolicy:
    mode: Enforce
    publicKey: |
$PUB
EOF2
vf() { [[ $(promv 'sum(tkm_controller_verification_failed_caches)') == 1 ]]; }
wait_for 90 "Prometheus sees one cache failing verification" vf
wait_for 60 "TKMCacheVerificationFailed pending" alert_pending TKMCacheVerificationFailed
wait_for 60 "TKMCacheNotReady pending" alert_pending TKMCacheNotReady
assert_eq "" "$(alerts | grep -v -e '^TKMCacheVerificationFailed=' -e '^TKMCacheNotReady=' || true)" "no other alert"

step "a stopped agent: TKMAgentDown; a stopped controller: TKMControllerNoLeader"
agent_stop a100
wait_for 60 "TKMAgentDown pending" alert_pending TKMAgentDown
assert_eq "$A" "$(curl -sf "$PROM/api/v1/alerts" | jq -r '.data.alerts[] | select(.labels.alertname == "TKMAgentDown") | .labels.node')" "TKMAgentDown names the A100's node"
ctrl_kill c1
wait_for 60 "TKMControllerNoLeader pending" alert_pending TKMControllerNoLeader
e2e_done
