#!/usr/bin/env bash
# agent_mirrors: tkm-agent pulls through registry mirrors configured as containerd has them, a
# hosts.toml directory (issue 26, docs/mirrors.md). Real components: Debian's docker-registry as
# the upstream, more docker-registry processes in proxy mode (proxy.remoteurl) as pull-through
# mirrors, the real apiserver, one real tkm-agent. Each step declares a cache of its own (a layer
# no step pulled before) and checks the registries' own access logs (the user agent tells
# tkm-agent's requests from a mirror's), the agent's metrics, log and Events:
#   1. a mirror: the layer comes through it (?ns= names the upstream), the agent never GETs the
#      layer from the upstream;
#   2. the mirror down: the pull falls back to the upstream, Event MirrorFallback, no failure;
#   3. a mirror serving a wrong blob (its stored copy altered): refused by digest, fallback, Event;
#   4. a mirror on https with a CA of its own (ca = "ca.crt", relative to the hosts.toml);
#   5. a broken hosts.toml: the last good configuration stays (the TLS mirror still serves),
#      tkm_agent_mirror_config_errors_total counts it.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/agent.inc"
e2e_crds
agent_ns
cd "$E2E_TMP"

step "an upstream registry and three pull-through mirrors of it, each with an access log"
REG=$("$TKM_SOURCE_DIR/hack/registry.sh" start "$E2E_TMP/up" --access-log)
e2e_on_exit "'$TKM_SOURCE_DIR/hack/registry.sh' stop '$E2E_TMP/up'"
M1=$("$TKM_SOURCE_DIR/hack/registry.sh" start "$E2E_TMP/m1" --access-log --proxy "http://$REG")
e2e_on_exit "'$TKM_SOURCE_DIR/hack/registry.sh' stop '$E2E_TMP/m1'"
M2=$("$TKM_SOURCE_DIR/hack/registry.sh" start "$E2E_TMP/m2" --access-log --proxy "http://$REG")
e2e_on_exit "'$TKM_SOURCE_DIR/hack/registry.sh' stop '$E2E_TMP/m2'"
M3=$("$TKM_SOURCE_DIR/hack/registry.sh" start "$E2E_TMP/m3" --access-log --tls --proxy "http://$REG")
e2e_on_exit "'$TKM_SOURCE_DIR/hack/registry.sh' stop '$E2E_TMP/m3'"

mkdir -p fx && tar -xzf "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" -C fx
# image NAME: a 1M cache of its own pushed as $REG/e2e/NAME:v1; sets DIG (manifest), LAYER, LSIZE
image() {
  rm -rf src && python3 "$TKM_SOURCE_DIR/bench/gen_cache.py" "fx/$(ls fx)" src 1M "e2e-mir-$1-$RANDOM" >/dev/null
  "$TKMCTL" build src --push "$REG/e2e/$1:v1" -o json >push.json 2>push.err || fail "tkmctl build --push: $(cat push.err)"
  read -r DIG LAYER LSIZE < <(jq -r '"\(.manifest) \(.layer) \(.layer_size)"' push.json)
  [[ $DIG == sha256:* && $LAYER == sha256:* && $LSIZE =~ ^[0-9]+$ ]] || fail "image $1: digest '$DIG', layer '$LAYER', size '$LSIZE'"
}
# layer_gets LOG LAYER UA: GETs of LAYER in a registry's access log whose user agent holds UA
layer_gets() {
  grep 'msg="response completed"' "$1" | grep 'http.request.method=GET' | grep -F "/blobs/$2" |
    grep -cE "http.request.useragent=\"?$3" || true
}
# hosts [TOML...]: writes $HOSTS/$REG/hosts.toml (a new file, renamed into place, as an admin's
# tooling would)
HOSTS=$E2E_TMP/certs.d
mkdir -p "$HOSTS/$REG"
hosts() {
  printf '%s\n' "$@" >"$HOSTS/$REG/hosts.toml.new"
  mv "$HOSTS/$REG/hosts.toml.new" "$HOSTS/$REG/hosts.toml"
}
hosts "server = \"http://$REG\"" "" "[host.\"http://$M1\"]" '  capabilities = ["pull"]'

step "tkm-config prefetch=true; one agent reading the hosts.toml directory"
kubectl -n "$NS" create configmap tkm-config --from-literal=signatureMode=Disabled \
  --from-literal=prefetch=true >/dev/null
NODE=e2e-mir-$RANDOM
agent_node "$NODE"
MPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
agent_start a h200 "$NODE" "$NS" --mirrors-hosts-dir "$HOSTS" --registries-conf "" \
  --metrics-bind-address "127.0.0.1:$MPORT"
metric() { curl -s "http://127.0.0.1:$MPORT/metrics" | awk -v k="$1" '$1 == k {print $2}'; }
# extracted NAME: the node status says NAME's layer is in the store
extracted() { [[ $(jp tkcns "$NODE" "$NS" "{.status.caches.$1.extracted}") == true ]]; }
declare_cache() { cache_create tkc "$NS" "$1" "$REG/e2e/$1:v1" "$DIG"; }
events_of() {
  kubectl -n "$NS" get events --field-selector "involvedObject.name=$1,reason=MirrorFallback" \
    -o jsonpath='{range .items[*]}{.message}{"\n"}{end}' 2>/dev/null
}

step "1. the layer comes through the mirror"
image c1
declare_cache c1
wait_for 120 "c1 extracted on $NODE" extracted c1
assert_eq 0 "$(layer_gets "$E2E_TMP/up/registry.log" "$LAYER" tkm/)" "tkm-agent never GET the layer from the upstream"
n=$(layer_gets "$E2E_TMP/m1/registry.log" "$LAYER" tkm/)
assert_eq 1 "$n" "tkm-agent GET the layer from mirror 1 once"
grep -F "/blobs/$LAYER" "$E2E_TMP/m1/registry.log" | grep -q "ns=127.0.0.1" ||
  fail "mirror 1's log has no ?ns=$REG on the layer GET: $(grep -F "/blobs/$LAYER" "$E2E_TMP/m1/registry.log" | head -2)"
pass "the mirror request carries ?ns=<upstream>"
assert_eq "$LSIZE" "$(metric 'tkm_agent_pulled_bytes_total{source="mirror"}')" "pulled_bytes_total{source=mirror} is the layer's size"
assert_eq 0 "$(metric 'tkm_agent_pulled_bytes_total{source="upstream"}')" "nothing pulled from the upstream"
wait_for 10 "the agent's log names the mirror" grep -q "from mirror $M1" "$E2E_TMP/a.log"
assert_eq "mirror $M1" "$(jp tkcns "$NODE" "$NS" '{.status.caches.c1.pulledFrom}')" "the node status: pulledFrom the mirror"

step "2. mirror 1 down: fallback to the upstream, an Event, no failure"
"$TKM_SOURCE_DIR/hack/registry.sh" stop "$E2E_TMP/m1"
image c2
declare_cache c2
wait_for 120 "c2 extracted on $NODE" extracted c2
assert_eq 1 "$(layer_gets "$E2E_TMP/up/registry.log" "$LAYER" tkm/)" "tkm-agent GET c2's layer from the upstream"
wait_for 30 "Event MirrorFallback on c2" bash -c "kubectl -n '$NS' get events --field-selector involvedObject.name=c2,reason=MirrorFallback -o name | grep -q ."
assert_contains "$(events_of c2)" "mirror $M1" "the Event names the mirror"
assert_contains "$(events_of c2)" "trying upstream $REG" "... and what was tried next"
assert_eq "" "$(jp tkcns "$NODE" "$NS" '{.status.caches.c2.lastFailure.reason}')" "no lastFailure in the node status"
assert_eq 1 "$(metric tkm_agent_mirror_fallbacks_total)" "tkm_agent_mirror_fallbacks_total 1"
assert_eq "upstream $REG" "$(jp tkcns "$NODE" "$NS" '{.status.caches.c2.pulledFrom}')" "the node status: pulledFrom the upstream"

step "3. a mirror serving a wrong blob: refused by digest, fallback, an Event"
image c3
# mirror 2 caches c3's layer (a GET through it), then its stored copy is altered, same size
curl -sf -o /dev/null "http://$M2/v2/e2e/c3/blobs/$LAYER?ns=$REG" || fail "GET through mirror 2"
# the proxy stores its copy on its own after answering: wait for the whole file
f=$E2E_TMP/m2/data/docker/registry/v2/blobs/sha256/${LAYER:7:2}/${LAYER#sha256:}/data
stored() { [[ -f $f && $(stat -c %s "$f") == "$LSIZE" ]]; }
wait_for 60 "mirror 2 stored the layer" stored
python3 -c 'import sys; p=sys.argv[1]; b=bytearray(open(p,"rb").read()); b[len(b)//2]^=0xff; open(p,"wb").write(b)' "$f"
hosts "server = \"http://$REG\"" "" "[host.\"http://$M2\"]" '  capabilities = ["pull"]'
declare_cache c3
wait_for 120 "c3 extracted on $NODE" extracted c3
assert_eq 1 "$(layer_gets "$E2E_TMP/m2/registry.log" "$LAYER" tkm/)" "tkm-agent GET c3's layer from mirror 2"
assert_eq 1 "$(layer_gets "$E2E_TMP/up/registry.log" "$LAYER" tkm/)" "... and then from the upstream"
wait_for 30 "Event MirrorFallback on c3" bash -c "kubectl -n '$NS' get events --field-selector involvedObject.name=c3,reason=MirrorFallback -o name | grep -q ."
assert_contains "$(events_of c3)" "mirror $M2" "the Event names mirror 2"
assert_contains "$(events_of c3)" "$LAYER" "... and the digest that did not match"
assert_eq 2 "$(metric tkm_agent_mirror_fallbacks_total)" "tkm_agent_mirror_fallbacks_total 2"

step "4. a mirror on https with a CA of its own (relative ca path)"
cp "$E2E_TMP/m3/tls/ca.crt" "$HOSTS/$REG/ca.crt"
hosts "server = \"http://$REG\"" "" "[host.\"https://$M3\"]" '  capabilities = ["pull"]' '  ca = "ca.crt"'
image c4
declare_cache c4
wait_for 120 "c4 extracted on $NODE" extracted c4
assert_eq 1 "$(layer_gets "$E2E_TMP/m3/registry.log" "$LAYER" tkm/)" "tkm-agent GET c4's layer from the TLS mirror"
assert_eq 0 "$(layer_gets "$E2E_TMP/up/registry.log" "$LAYER" tkm/)" "... not from the upstream"
assert_eq 2 "$(metric tkm_agent_mirror_fallbacks_total)" "no new fallback"

step "5. a broken hosts.toml: the last good configuration stays"
hosts "server = \"http://$REG\"" "[host.\"https://$M3\"" 'capabilities = 7'
image c5
declare_cache c5
wait_for 120 "c5 extracted on $NODE" extracted c5
assert_eq 1 "$(layer_gets "$E2E_TMP/m3/registry.log" "$LAYER" tkm/)" "c5's layer still came through the TLS mirror"
assert_eq 0 "$(layer_gets "$E2E_TMP/up/registry.log" "$LAYER" tkm/)" "... not from the upstream"
assert_eq 1 "$(metric tkm_agent_mirror_config_errors_total)" "tkm_agent_mirror_config_errors_total 1"
grep -q "keeping the last good configuration" "$E2E_TMP/a.log" || fail "the agent's log does not say it keeps the last good configuration"
pass "the agent's log says it keeps the last good configuration"

step "6. tkmctl pull --mirrors-hosts-dir: the same directory, the same mirror"
cp "$HOSTS/$REG/hosts.toml" broken.toml
hosts "server = \"http://$REG\"" "" "[host.\"https://$M3\"]" '  capabilities = ["pull"]' '  ca = "ca.crt"'
image c6
"$TKMCTL" pull --mirrors-hosts-dir "$HOSTS" "$REG/e2e/c6@$DIG" --output pulled-c6 >pull.out 2>pull.err ||
  fail "tkmctl pull through the mirror: $(cat pull.err)"
assert_contains "$(cat pull.err)" "from mirror $M3" "tkmctl says the mirror served it"
assert_eq 1 "$(layer_gets "$E2E_TMP/m3/registry.log" "$LAYER" tkm/)" "tkmctl GET c6's layer from the TLS mirror"
assert_eq 0 "$(layer_gets "$E2E_TMP/up/registry.log" "$LAYER" tkm/)" "... not from the upstream"
cp broken.toml "$HOSTS/$REG/hosts.toml"
expect_fail "tkmctl pull with a broken hosts.toml" "$TKMCTL" pull --mirrors-hosts-dir "$HOSTS" "$REG/e2e/c6@$DIG" --output pulled-c6b
assert_contains "$OUT" "hosts.toml" "the error names the file"
[[ ! -e pulled-c6b ]] || fail "a failed pull left pulled-c6b"
pass "nothing written"
