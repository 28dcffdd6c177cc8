#!/usr/bin/env bash
# ctrl_reach: registry reach is the admin's decision (issue 23; docs/registry-reach.md).
# tkm-controller with the default policy (no --registry-* flags, no registry keys in
# tkm-config) refuses a tenant's reference to a loopback registry, however it is spelled:
# an IP literal, its decimal spelling, localhost, [::1], and a name that resolves to
# 127.0.0.1 (through /etc/hosts, in the controller's own mount namespace). Each cache gets
# Verified=False with reason RegistryNotAllowed, and the registry, which logs every
# connection, never sees one. Once tkm-config lists the same registries, the same caches
# reach it, at the addresses that were checked: localhost is 127.0.0.2 in that hosts file,
# and only a registry on 127.0.0.2 (none on 127.0.0.1 or ::1 at its port) answers, so curl
# took the pinned address, not its own idea of localhost. Loopback only.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/ctrl_helpers.bash"

command -v unshare >/dev/null || fail "unshare (util-linux) is needed for the /etc/hosts case"
ctrl_crds
NS=$(e2e_namespace)
CTRL_NS=$NS
e2e_on_exit ctrl_drain_and_kill

step "a registry on 127.0.0.1:P and [::1]:P that logs every connection; a name for it in a hosts file"
e2e_logging_registry reg
P=$(cat "$E2E_TMP/reg.port")
e2e_logging_registry lhreg 127.0.0.2 -
P2=$(cat "$E2E_TMP/lhreg.port")
NAME=registry.reach-e2e.test
printf '127.0.0.2 localhost\n127.0.0.1 %s\n' "$NAME" >"$E2E_TMP/hosts"
: >"$E2E_TMP/reg.requests"
: >"$E2E_TMP/lhreg.requests"

step "tkm-controller with the default policy, /etc/hosts bind-mounted in its own mount namespace"
# unshare execs sh, which execs the controller: CTRL_PID is the controller's pid
CTRL_REACH_FLAGS=()
# shellcheck disable=SC2016 # $0 and $@ are the inner sh's
CTRL_WRAP=(unshare -m sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$E2E_TMP/hosts")
ctrl_start c1
CTRL_WRAP=()

declare -A REF=([lit]="127.0.0.1:$P" [dec]="2130706433:$P" [lh]="localhost:$P2" [v6]="[::1]:$P"
  [name]="$NAME:$P")
ZERO=sha256:$(printf 'ctrl reach %s' "$RANDOM" | sha256sum | cut -d' ' -f1)
# by digest: nothing to resolve, the signature search is the first registry step
openssl ecparam -genkey -name prime256v1 2>/dev/null | openssl ec -pubout >"$E2E_TMP/k.pub" 2>/dev/null
printf 'apiVersion: tkm.io/v1alpha1\nkind: TritonKernelCache\nmetadata: {name: dig}\nspec:\n  cacheImage: "127.0.0.1:%s/x@%s"\n  signaturePolicy:\n    mode: Enforce\n    publicKey: |\n%s\n' \
  "$P" "$ZERO" "$(sed 's/^/      /' "$E2E_TMP/k.pub")" | kubectl -n "$NS" apply -f - >/dev/null
for c in "${!REF[@]}"; do
  printf 'apiVersion: tkm.io/v1alpha1\nkind: TritonKernelCache\nmetadata: {name: %s}\nspec:\n  cacheImage: "%s/x:v1"\n  signaturePolicy: {mode: Disabled}\n' \
    "$c" "${REF[$c]}" | kubectl -n "$NS" apply -f - >/dev/null
done

step "each is refused before any request: RegistryNotAllowed, the rule in the message"
reason_is() { [[ $(ctrl_reason "$NS" "tkc/$1" Verified) == "$2" ]]; }
msg() { kubectl -n "$NS" get tkc "$1" -o jsonpath='{.status.conditions[?(@.type=="Verified")].message}'; }
for c in lit dec lh v6 name; do
  wait_for 30 "$c (${REF[$c]}): RegistryNotAllowed" reason_is "$c" RegistryNotAllowed
  assert_eq "False" "$(ctrl_cond "$NS" "tkc/$c" Ready)" "$c: Ready=False"
done
wait_for 30 "dig (by digest): RegistryNotAllowed" reason_is dig RegistryNotAllowed
assert_contains "$(msg lit)" "registry \"127.0.0.1:$P\" is not allowed: an IP address must be listed in registryAllow" "IP literal: the rule"
assert_contains "$(msg dec)" "registry \"127.0.0.1:$P\" is not allowed: an IP address must be listed in registryAllow" "decimal spelling: the rule, the address it spells"
assert_contains "$(msg lh)" "registry \"localhost:$P2\" is not allowed: it is a loopback name and not in registryPrivate" "localhost: the rule"
assert_contains "$(msg v6)" "is not allowed: an IP address must be listed in registryAllow" "[::1]: the rule"
assert_contains "$(msg name)" "registry \"$NAME:$P\" is not allowed: it resolves to a loopback address" "a name resolving to 127.0.0.1: the rule"
assert_not_contains "$(msg name)" "127.0.0.1" "the message does not say what the name resolved to"

step "no hot loop: each refusal is decided once, and nothing reached the registry"
sleep 3 # a retry loop would show as more decisions in the log meanwhile
for c in lit dec lh v6 name; do
  n=$(grep -cF "/$c: resolving ${REF[$c]}/x:v1: registry " "$E2E_TMP/c1.log" || true)
  assert_eq 1 "$n" "$c: refused once"
done
assert_eq "" "$(cat "$E2E_TMP/reg.accepts" 2>/dev/null)" "the registry accepted no connection"
assert_eq "" "$(cat "$E2E_TMP/reg.requests" "$E2E_TMP/lhreg.requests")" "the registries logged no request"
assert_eq "" "$(cat "$E2E_TMP/lhreg.accepts" 2>/dev/null)" "the registry on 127.0.0.2 accepted no connection"
kill -0 "${CTRL_PID[c1]}" || fail "the controller died"

step "the same references once tkm-config lists the registries: they reach it"
L="127.0.0.1:$P localhost:$P2 [::1]:$P $NAME:$P"
kubectl -n "$NS" create configmap tkm-config --from-literal=registryAllow="* $L" \
  --from-literal=registryPrivate="$L" --from-literal=registryPlainHTTP="$L" >/dev/null
for c in lit dec lh v6 name; do
  wait_for 30 "$c: past the policy (the registry's 403)" reason_is "$c" RegistryForbidden
done
wait_for 30 "dig: past the policy (the registry's 403 to the signature search)" reason_is dig RegistryUnauthorized
assert_contains "$(cat "$E2E_TMP/reg.requests")" "${ZERO#sha256:}" "the signature search asked the registry about the digest"
for h in "127.0.0.1:$P" "[::1]:$P" "$NAME:$P"; do
  assert_contains "$(cat "$E2E_TMP/reg.requests")" "GET /v2/x/manifests/v1 $h" "a request with Host $h"
done
assert_contains "$(cat "$E2E_TMP/lhreg.requests")" "GET /v2/x/manifests/v1 localhost:$P2" \
  "localhost reached at 127.0.0.2, the address that was checked (the pin, not curl's own localhost)"

step "a bad registryAllow keeps the policy before, and says so"
kubectl -n "$NS" patch configmap tkm-config --type=merge -p '{"data":{"registryAllow":"*foo.com"}}' >/dev/null
wait_for 30 "the controller says it keeps the previous settings" \
  grep -q 'registryAllow: entry 1 "\*foo.com" may use .*keeping the previous settings' "$E2E_TMP/c1.log"
e2e_done
