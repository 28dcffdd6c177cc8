#!/usr/bin/env bash
# agent_reach: tkm-agent decides registry reach itself (it never trusts the controller's
# decision): with the default policy (no --registry-* flags, no registry keys in
# tkm-config) a cache pinned to a loopback registry gets RegistryNotAllowed in the node
# status, a Materialize for it is refused with the same reason, and the registry, which
# logs every connection, never sees one; not retried in a loop. Once tkm-config lists the
# registry, the agent reaches it. Loopback only.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/agent.inc"
e2e_crds
agent_ns
cd "$E2E_TMP"

step "a registry on 127.0.0.1:P that logs every connection; caches pinned to it"
e2e_logging_registry reg
P=$(cat "$E2E_TMP/reg.port")
: >"$E2E_TMP/reg.requests"
D=sha256:$(printf 'agent reach %s' "$RANDOM" | sha256sum | cut -d' ' -f1)
cache_create tkc "$NS" lit "127.0.0.1:$P/x:v1" "$D" "  signaturePolicy: {mode: Disabled}"
cache_create tkc "$NS" lh "localhost:$P/x:v1" "$D" "  signaturePolicy: {mode: Disabled}"
NODE=e2e-reach-$RANDOM
agent_node "$NODE"
AGENT_REACH_FLAGS=()
agent_start h200 h200 "$NODE" "$NS"

step "refused before any request: RegistryNotAllowed in the node status"
err() { jp tkcns "$NODE" "$NS" "{.status.caches.$1.error}"; }
wait_for 60 "lit: RegistryNotAllowed" bash -c "[[ \$(kubectl -n $NS get tkcns $NODE -o jsonpath='{.status.caches.lit.error}' 2>/dev/null) == RegistryNotAllowed:* ]]"
assert_contains "$(err lit)" "registry \"127.0.0.1:$P\" is not allowed: an IP address must be listed in registryAllow" "lit: the rule"
wait_for 60 "lh: RegistryNotAllowed" bash -c "[[ \$(kubectl -n $NS get tkcns $NODE -o jsonpath='{.status.caches.lh.error}' 2>/dev/null) == RegistryNotAllowed:* ]]"
assert_contains "$(err lh)" "it is a loopback name and not in registryPrivate" "lh: the rule"

step "Materialize for the refused cache: refused with the reason, nothing sent"
SOCK=$E2E_TMP/h200/run/agent.sock
agent_call "$SOCK" "{\"m\":\"Materialize\",\"ns\":\"$NS\",\"pod\":\"p\",\"uid\":\"u-reach\",\"vol\":\"v-reach\",\"attrs\":{\"cacheName\":\"lit\"},\"timeout\":10}"
assert_eq FAILED_PRECONDITION "$(agent_field .code)" "Materialize is refused: $R"
assert_contains "$(agent_field .details)" "RegistryNotAllowed: registry \"127.0.0.1:$P\" is not allowed" "with the reason and the rule"

step "no hot loop, and nothing reached the registry"
sleep 3
n=$(grep -c "registry reach: registry \"127.0.0.1:$P\" is not allowed" "$E2E_TMP/h200.log" || true)
assert_eq 1 "$n" "the IP literal was decided once (no retry with backoff)"
assert_eq "" "$(cat "$E2E_TMP/reg.accepts" 2>/dev/null)" "the registry accepted no connection"
assert_eq "" "$(cat "$E2E_TMP/reg.requests")" "the registry logged no request"

step "listed in tkm-config: the agent reaches the registry (its 403)"
L="127.0.0.1:$P localhost:$P"
kubectl -n "$NS" create configmap tkm-config --from-literal=registryAllow="* $L" \
  --from-literal=registryPrivate="$L" --from-literal=registryPlainHTTP="$L" >/dev/null
wait_for 60 "lit: RegistryForbidden" bash -c "[[ \$(kubectl -n $NS get tkcns $NODE -o jsonpath='{.status.caches.lit.error}' 2>/dev/null) == RegistryForbidden:* ]]"
wait_for 60 "lh: RegistryForbidden" bash -c "[[ \$(kubectl -n $NS get tkcns $NODE -o jsonpath='{.status.caches.lh.error}' 2>/dev/null) == RegistryForbidden:* ]]"
assert_contains "$(cat "$E2E_TMP/reg.requests")" "/v2/x/manifests/$D 127.0.0.1:$P" "a request to 127.0.0.1:$P"
assert_contains "$(cat "$E2E_TMP/reg.requests")" "/v2/x/manifests/$D localhost:$P" "a request to localhost:$P"
kill -0 "${AGENT_PID[h200]}" || fail "the agent died"
e2e_done
