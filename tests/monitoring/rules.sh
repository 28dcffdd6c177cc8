#!/usr/bin/env bash
# monitoring.rules (ctest, no cluster): manifests/monitoring's alert rules and dashboard.
#   - prometheusrule.yaml is what hack/gen-monitoring.sh makes of tkm-rules.yaml (and a changed
#     copy is caught);
#   - `promtool check rules` on the plain rules file and on the rules extracted from the
#     PrometheusRule;
#   - `promtool test rules` on tests/monitoring/*.yaml, where every alert fires on one series
#     set and stays silent on another (checked here too: each alert has both cases);
#   - the Grafana dashboard: valid JSON, a recent schemaVersion, a Prometheus datasource
#     variable every panel and target uses, the panels the issue lists, one expr per target;
#   - every tkm_*/process_* name in the rules and the dashboard is listed in docs/metrics.md
#     (tests/e2e/monitoring_prometheus.sh checks them against the daemons' real /metrics).
# promtool is built from Go modules by hack/testbin/build.sh (once, cached).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mon=$root/manifests/monitoring
rules=$mon/tkm-rules.yaml
dash=$mon/tkm-dashboard.json
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tkm-monitoring-rules-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
checks=0
fail() { echo "FAIL [monitoring.rules]: $*" >&2; exit 1; }
pass() { checks=$((checks + 1)); echo "ok: $*"; }

for f in "$rules" "$mon/prometheusrule.yaml" "$dash" "$mon/podmonitors.yaml" "$mon/kustomization.yaml"; do
  [[ -s $f ]] || fail "missing $f"
done
promtool=$("$root/hack/testbin/build.sh" --path promtool) || fail "cannot build promtool"
[[ -x $promtool ]] || fail "no promtool at $promtool"
command -v jq >/dev/null || fail "jq is needed (hack/deps.sh installs it)"

echo "--- the PrometheusRule is generated from the plain rules file"
out=$("$root/hack/gen-monitoring.sh" --check 2>&1) || fail "hack/gen-monitoring.sh --check: $out"
pass "prometheusrule.yaml is up to date with tkm-rules.yaml"
cp -r "$mon" "$tmp/copy"
sed -i 's/> 0.9$/> 0.8/' "$tmp/copy/prometheusrule.yaml"
cmp -s "$tmp/copy/prometheusrule.yaml" "$mon/prometheusrule.yaml" && fail "the negative check changed nothing"
if out=$(TKM_MONITORING_DIR=$tmp/copy "$root/hack/gen-monitoring.sh" --check 2>&1); then
  fail "gen-monitoring.sh --check accepted a PrometheusRule whose threshold differs"
fi
[[ $out == *"> 0.8"* ]] || fail "the --check diff does not show the changed line: $out"
pass "a PrometheusRule that differs from the rules file is refused (diff shown)"

echo "--- promtool check rules"
out=$("$promtool" check rules "$rules" 2>&1) || fail "promtool check rules $rules: $out"
echo "$out"
"$root/hack/gen-monitoring.sh" --extract "$mon/prometheusrule.yaml" >"$tmp/extracted.yaml" ||
  fail "cannot extract the rules from prometheusrule.yaml"
out=$("$promtool" check rules "$tmp/extracted.yaml" 2>&1) || fail "promtool check rules (extracted from the PrometheusRule): $out"
echo "$out"
n_plain=$("$promtool" check rules "$rules" 2>&1 | sed -n 's/.*SUCCESS: \([0-9]*\) rules found.*/\1/p')
n_ext=$("$promtool" check rules "$tmp/extracted.yaml" 2>&1 | sed -n 's/.*SUCCESS: \([0-9]*\) rules found.*/\1/p')
[[ -n $n_plain && $n_plain == "$n_ext" ]] || fail "rule counts differ: plain '$n_plain', PrometheusRule '$n_ext'"
diff <(sed -n '/^groups:/,$p' "$rules") "$tmp/extracted.yaml" >/dev/null ||
  fail "the PrometheusRule's groups differ from tkm-rules.yaml"
pass "promtool accepts both: $n_plain rules each, the same text"
sed 's/tkm_controller_leader == 1)/tkm_controller_leader == 1/' "$rules" >"$tmp/broken.yaml"
if out=$("$promtool" check rules "$tmp/broken.yaml" 2>&1); then
  fail "promtool accepted a rules file with an unbalanced expression"
fi
pass "promtool refuses a broken copy (so the checks above can fail)"

echo "--- promtool test rules"
mapfile -t alerts < <(sed -n 's/^  - alert: \([A-Za-z0-9]*\)$/\1/p' "$rules")
((${#alerts[@]} >= 6)) || fail "expected at least 6 alerts in $rules, found ${#alerts[@]}"
tests=("$root"/tests/monitoring/*.yaml)
[[ -f ${tests[0]} ]] || fail "no promtool test files in tests/monitoring/"
for a in "${alerts[@]}"; do
  fires=0 silent=0
  for t in "${tests[@]}"; do
    fires=$((fires + $(grep -A2 -x "    alertname: $a" "$t" | grep -cx '    exp_alerts:' || true)))
    silent=$((silent + $(grep -A2 -x "    alertname: $a" "$t" | grep -cx '    exp_alerts: \[\]' || true)))
  done
  ((fires > 0)) || fail "alert $a: no test where it fires"
  ((silent > 0)) || fail "alert $a: no test where it stays silent"
done
pass "each of the ${#alerts[@]} alerts has tests where it fires and where it stays silent"
(cd "$root/tests/monitoring" && "$promtool" test rules "${tests[@]##*/}") >"$tmp/test.log" 2>&1 ||
  { cat "$tmp/test.log" >&2; fail "promtool test rules failed"; }
cat "$tmp/test.log"
n_ok=$(grep -c SUCCESS "$tmp/test.log" || true)
((n_ok == ${#tests[@]})) || fail "promtool test rules: $n_ok of ${#tests[@]} files passed"
pass "promtool test rules: ${#tests[@]} files pass"
# A rule that changed (threshold 0.9 -> 0.99) must break its test: the tests really evaluate it.
mkdir -p "$tmp/neg/manifests/monitoring" "$tmp/neg/tests/monitoring"
sed 's/> 0.9$/> 0.99/' "$rules" >"$tmp/neg/manifests/monitoring/tkm-rules.yaml"
cp "$root/tests/monitoring/store_near_budget.yaml" "$tmp/neg/tests/monitoring/"
if (cd "$tmp/neg/tests/monitoring" && "$promtool" test rules store_near_budget.yaml) >"$tmp/neg.log" 2>&1; then
  fail "promtool test rules passed with a changed TKMStoreNearBudget threshold"
fi
pass "a changed threshold fails its promtool test"

echo "--- the Grafana dashboard"
jq -e . "$dash" >/dev/null || fail "$dash is not valid JSON"
jq -e '.schemaVersion >= 39' "$dash" >/dev/null || fail "schemaVersion $(jq .schemaVersion "$dash") < 39"
jq -e '[.templating.list[] | select(.type == "datasource" and .query == "prometheus" and .name == "datasource")] | length == 1' \
  "$dash" >/dev/null || fail "no Prometheus datasource variable named datasource"
bad=$(jq -r '.panels[] | select(.datasource.uid != "${datasource}") | .title' "$dash")
[[ -z $bad ]] || fail "panels not on the \${datasource} variable: $bad"
bad=$(jq -r '.panels[] | .title as $t | .targets[] | select(.datasource.uid != "${datasource}" or (.expr // "") == "") | $t' "$dash")
[[ -z $bad ]] || fail "targets without an expr or not on \${datasource}: $bad"
jq -e '[.panels[].id] | length == (unique | length)' "$dash" >/dev/null || fail "panel ids are not unique"
jq -e 'all(.panels[]; .gridPos.w > 0 and .gridPos.h > 0)' "$dash" >/dev/null || fail "a panel without gridPos"
for want in 'Fleet:table' 'readiness over time:timeseries' 'Extraction seconds:timeseries' \
  'Store bytes:timeseries' 'Reconcile latency:timeseries' 'queue depth:timeseries'; do
  title=${want%%:*} type=${want##*:}
  jq -e --arg t "$title" --arg y "$type" \
    '[.panels[] | select((.title | ascii_downcase | contains($t | ascii_downcase)) and .type == $y)] | length == 1' \
    "$dash" >/dev/null || fail "no $type panel titled '*$title*'"
done
jq -e '[.panels[] | select(.type == "table") | .transformations[]? | select(.id == "groupingToMatrix")] | length >= 1' \
  "$dash" >/dev/null || fail "the fleet matrix is not a groupingToMatrix table"
pass "dashboard: JSON, schemaVersion $(jq .schemaVersion "$dash"), datasource variable, $(jq '.panels | length' "$dash") panels with the listed ones"

echo "--- the kustomization"
kubectl=$("$root/hack/testbin/build.sh" --path kubectl) || fail "cannot build kubectl"
"$kubectl" kustomize "$mon" >"$tmp/rendered.yaml" 2>"$tmp/kustomize.err" ||
  fail "kubectl kustomize $mon: $(cat "$tmp/kustomize.err")"
kinds=$(grep -E '^kind: ' "$tmp/rendered.yaml" | sort | tr '\n' ' ')
[[ $kinds == "kind: ConfigMap kind: PodMonitor kind: PodMonitor kind: PrometheusRule " ]] ||
  fail "kubectl kustomize $mon renders: $kinds"
grep -q '^    grafana_dashboard: "1"$' "$tmp/rendered.yaml" || fail "the dashboard ConfigMap lacks its grafana_dashboard label"
grep -rq monitoring "$root/manifests/base/kustomization.yaml" && fail "manifests/base must not include manifests/monitoring"
pass "kubectl kustomize: the dashboard ConfigMap, two PodMonitors, the PrometheusRule; not in manifests/base"

echo "--- metric names are documented"
names() { grep -oE '(^|[^A-Za-z0-9_:])(tkm|process)_[a-z0-9_]+' | sed -E 's/^[^a-z]//; s/_(bucket|sum|count)$//' | sort -u; }
{ jq -r '.panels[].targets[].expr' "$dash"; grep -E '^ +expr:|^      ' "$rules"; } | names >"$tmp/names"
[[ -s $tmp/names ]] || fail "no metric names found in the rules and the dashboard"
while read -r n; do
  grep -q "\`$n\b" "$root/docs/metrics.md" || grep -qE "(\`|, )$n(\{|\`)" "$root/docs/metrics.md" ||
    fail "$n (used by the rules or the dashboard) is not in docs/metrics.md"
done <"$tmp/names"
pass "$(wc -l <"$tmp/names") metric names, each in docs/metrics.md"
echo "monitoring.rules: $checks checks passed"
