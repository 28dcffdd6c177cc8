#!/usr/bin/env bash
# csi_agent: tkm-csi with the REAL tkm-agent (agent/, fixture H200 GPU root), the real
# kube-apiserver and registry, and a cosign-signed image of the sm90 fixture cache, in a
# private mount namespace (unshare -m), driven through the CSI socket by e2e_csi_client
# as kubelet would (csi_publish.sh runs the same driver against a protocol-level stand-in
# agent; this is the issue's list with the real one):
#   two pods' publishes share one store copy (extracted once); a pod's writes reach
#   neither the store (sha256 list before/after) nor the other pod; strict read-only is
#   EROFS and leaves the store unchanged; N clients publishing one volume at once -> all
#   OK, one overlay at the target, one Materialize; kill -9 of the agent -> Unavailable,
#   restart with the same store dir -> publish OK without re-extraction (extraction
#   counter 0, store entry's mtime and inode unchanged); errors: not declared for the
#   namespace -> PermissionDenied, signature not verified / incompatible GPU / a tenant's
#   signature mode below the floor (PolicyBelowFloor) -> FailedPrecondition with the agent's
#   reason, bad attributes -> InvalidArgument, the store on a too small tmpfs ->
#   ResourceExhausted with the agent's StoreFull;
#   unpublish leaves no mount, no dir, and no reference in the agent.
source "$(dirname "$0")/csi/env.sh"
csi_unshare "$0" "$@"
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/agent.inc"
COSIGN=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path cosign)
export COSIGN_PASSWORD='' COSIGN_YES=true
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.2f", b-a}'; }

e2e_crds >/dev/null
agent_ns
NSA=$NS
agent_ns
NSB=$NS
csi_setup "$E2E_TMP/csi"
# at exit after a failure ($rc is e2e_exit's): the end of tkm-csi's log
# shellcheck disable=SC2016 # e2e_on_exit evaluates the string at exit
e2e_on_exit '[[ ${rc:-0} == 0 ]] || { echo "--- last lines of the tkm-csi log:" >&2; tail -n 40 "$CSI_TMP/csi.log" >&2; }'
e2e_on_exit csi_teardown
: >"$CSI_TMP/agent.log" # csi_logs_clean reads it; the real agent logs to $E2E_TMP/h200.log
P=$CSI_TMP/pods
FX=$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz
mkdir -p "$E2E_TMP/fx" && tar -xzf "$FX" -C "$E2E_TMP/fx"

step "the cache image: the sm90 fixture built with tkmctl, pushed, signed with cosign"
REPO=$TKM_REGISTRY/e2e-csi-agent-$RANDOM/vadd
D=$(agent_image "$REPO" "$FX")
[[ $D == sha256:* ]] || fail "no digest from tkmctl push: $D"
mkdir -p "$E2E_TMP/keys/other"
(cd "$E2E_TMP/keys" && "$COSIGN" generate-key-pair >/dev/null 2>&1 &&
  "$COSIGN" sign --key cosign.key --tlog-upload=false -y "$REPO@$D" >/dev/null 2>&1) || fail "cosign sign"
(cd "$E2E_TMP/keys/other" && "$COSIGN" generate-key-pair >/dev/null 2>&1) || fail "cosign generate-key-pair"
pass "image $REPO@$D signed"
kubectl -n "$NSA" create secret generic signing-key --from-file=cosign.pub="$E2E_TMP/keys/cosign.pub" >/dev/null
kubectl -n "$NSA" create secret generic other-key --from-file=cosign.pub="$E2E_TMP/keys/other/cosign.pub" >/dev/null
MP=/home/ml/.triton/cache
cache_create tkc "$NSA" vadd "$REPO:v1" "$D" "  mountPath: $MP
  signaturePolicy: {mode: Enforce, publicKeySecretRef: {name: signing-key, key: cosign.pub}}"
# the same image, but trusting another key: verified never
cache_create tkc "$NSA" wrongkey "$REPO:v1" "$D" "  signaturePolicy: {mode: Enforce, publicKeySecretRef: {name: other-key, key: cosign.pub}}"
# the floor (issue 23): the cluster's default here is Audit, so Audit is the floor; a tenant may
# ask for more (wrongkey's Enforce is honoured: refused below), never for less
# whenIncompatible=Fail (issue 24: the built-in default is Empty): the A100 step below shows
# today's refusal through tkm-csi (csi_variants.sh covers tkm-csi's Empty volumes)
kubectl -n "$NSA" create configmap tkm-config --from-literal=signatureMode=Audit \
  --from-literal=whenIncompatible=Fail >/dev/null
cache_create tkc "$NSB" belowfloor "$REPO:v1" "$D" "  signaturePolicy: {mode: Disabled}"

step "tkm-agent (fixture H200) and tkm-csi"
N1=e2e-csi-h200-$RANDOM
agent_node "$N1"
agent_start h200 h200 "$N1" "$NSA" --metrics-bind-address 127.0.0.1:0 --gc-grace 1h
CSI_AGENT_SOCK=$E2E_TMP/h200/run/agent.sock
wait_jp 90 "vadd verified and compatible on $N1" "true nvidia-h200" tkcns "$N1" "$NSA" \
  '{.status.caches.vadd.verified} {.status.caches.vadd.compatibleGPUs[0].gpuType}'
wait_for 60 "wrongkey judged: not verified (KeyMismatch)" bash -c \
  "kubectl -n $NSA get tkcns $N1 -o jsonpath='{.status.caches.wrongkey.error}' | grep -q KeyMismatch"
wait_for 60 "belowfloor judged: PolicyBelowFloor" bash -c \
  "kubectl -n $NSB get tkcns $N1 -o jsonpath='{.status.caches.belowfloor.error}' | grep -q PolicyBelowFloor"
csi_driver_start
wait_for 30 "probe: the agent is ready" bash -c "$TKM_BUILD_DIR/tests/e2e_csi_client $CSI_SOCK probe | grep -q 'ready=true'"
metrics() { curl -s "$(grep -o 'metrics on http://[^ ]*' "$E2E_TMP/h200.log" | tail -1 | sed 's/metrics on //')"; }
extractions() { metrics | awk '$1 == "tkm_agent_extractions_total" {print $2}'; }
# pub VOL TARGET [ARGS...]: a publish of a pod in NSA (pod-VOL, uid from the volume id)
pub() { csi publish "$1" "$2" "csi.storage.k8s.io/pod.namespace=$NSA" "${@:3}"; }
# lower layers of the overlay at TARGET: "GROUPS STORE"
lowers() { findmnt -n -o OPTIONS "$1" | tr ',' '\n' | sed -n 's/^lowerdir=//p' | tr ':' ' '; }
sums() { (cd "$1" && find . -printf '%p %s %m\n' | sort && find . -type f -exec sha256sum {} + | sort); }
said() { echo "  tkm-csi said: $OUT"; }
mounts_at() { awk -v t="$1" '{ split($0, a, " - "); split(a[1], f, " "); if (f[5] == t) n++ } END {print n+0}' /proc/self/mountinfo; }

step "N clients publish one volume at once, the first publish of the cache (the agent pulls and extracts meanwhile)"
N=8
mkdir -p "$P/c"
pids=()
t0=$(now)
for i in $(seq "$N"); do
  pub vol-c "$P/c/mount" cacheName=vadd >"$CSI_TMP/c$i.out" 2>&1 &
  pids+=($!)
done
okn=0
for i in $(seq "$N"); do wait "${pids[$((i - 1))]}" && okn=$((okn + 1)); done
echo "timing: $N concurrent first publishes (pull + extract + mount): $(since "$t0") s"
assert_eq "$N" "$okn" "all $N publishes succeeded: $(cat "$CSI_TMP"/c*.out | sort | uniq -c | tr '\n' ' ')"
assert_eq 1 "$(mounts_at "$P/c/mount")" "one mount at the target"
assert_eq "$P/c/mount tkm-csi:vol-c" "$(csi_mounts | grep ' tkm-csi:vol-c$')" "an overlay of vol-c"
assert_eq 1 "$(grep -c "Materialize from pid .* volume vol-c " "$E2E_TMP/h200.log")" "one Materialize reached the agent"
assert_eq $((N - 1)) "$(grep -c "publish vol-c at $P/c/mount: already published" "$CSI_TMP/csi.log")" \
  "the other $((N - 1)) waited in the volume's queue and found it published"
expect_ok "and $N more in one client" pub vol-c "$P/c/mount" cacheName=vadd --repeat "$N"
assert_eq 1 "$(mounts_at "$P/c/mount")" "still one mount"

step "two pods, one store copy"
t0=$(now)
expect_ok "publish pod a" pub vol-a "$P/a/mount" cacheName=vadd
echo "timing: a publish through the real agent (store hit): $(since "$t0") s"
expect_ok "publish pod b" pub vol-b "$P/b/mount" cacheName=vadd
read -r ga STORE <<<"$(lowers "$P/a/mount")"
read -r _ store_b <<<"$(lowers "$P/b/mount")"
assert_eq "$STORE" "$store_b" "both overlays' lower layer is the same store copy"
assert_eq "$STORE" "$(lowers "$P/c/mount" | cut -d' ' -f2)" "vol-c's too"
[[ $STORE == "$E2E_TMP/h200/store/"* && -d $STORE ]] || fail "lower layer '$STORE' is not in the agent's store"
pass "it is the agent's store entry $STORE"
assert_eq "$CSI_STATE/$NSA/pod-vol-a/vol-a/groups" "$ga" "pod a's group files are its own"
diff -r "$E2E_TMP/fx/tcache" "$STORE" >"$E2E_TMP/diff.out" 2>&1 || fail "the store differs from the fixture: $(head -5 "$E2E_TMP/diff.out")"
pass "the store copy holds exactly the fixture's files"
assert_eq 1 "$(extractions)" "extracted once for three pods (tkm_agent_extractions_total)"
grp=$(cd "$P/a/mount" && find . -name '__grp__*.json' | head -1)
kernel=$(cd "$STORE" && find . -name '*.cubin' | head -1)
assert_contains "$(cat "$P/a/mount/$grp")" "\"$MP/" "group files name the cache's mountPath $MP"
cmp "$STORE/$kernel" "$P/b/mount/$kernel" && pass "pod b sees the store's kernel binary"
wait_jp 30 "the agent holds a reference per pod" "pod-vol-a pod-vol-b pod-vol-c" tkcns "$N1" "$NSA" '{.status.caches.vadd.pods[*].name}'

step "writes in one pod reach neither the store nor the other pod"
sum0=$(sums "$STORE")
mkdir "$P/a/mount/NEWKERNEL" && echo new >"$P/a/mount/NEWKERNEL/k.json"
echo changed >>"$P/a/mount/$kernel"
rm "$P/a/mount/$grp"
[[ -f $P/a/mount/NEWKERNEL/k.json ]] && pass "pod a can add a kernel (a Triton miss)"
[[ ! -e $P/b/mount/NEWKERNEL ]] && pass "pod b does not see it"
cmp "$STORE/$kernel" "$P/b/mount/$kernel" && pass "pod b still sees the original kernel binary"
[[ -f $P/b/mount/$grp ]] && pass "pod b still has the group file pod a deleted"
assert_eq "$sum0" "$(sums "$STORE")" "the store's sha256 list is unchanged"

step "strict read-only"
expect_ok "publish readOnly=true" pub vol-ro "$P/ro/mount" cacheName=vadd readOnly=true
assert_contains "$(findmnt -n -o OPTIONS "$P/ro/mount")" "ro," "mounted ro, no upper layer"
expect_fail "creating a file" touch "$P/ro/mount/x"
assert_contains "$OUT" "Read-only file system" "EROFS"
expect_fail "appending to a kernel" bash -c "echo x >>'$P/ro/mount/$kernel'"
assert_contains "$OUT" "Read-only file system" "EROFS"
expect_fail "removing a group file" rm "$P/ro/mount/$grp"
assert_contains "$OUT" "Read-only file system" "EROFS"
assert_eq "$sum0" "$(sums "$STORE")" "the store's sha256 list is unchanged"

step "errors a person reads in kubectl describe pod"
expect_fail "a cache not declared for the pod's namespace" csi publish vol-e1 "$P/e1/mount" \
  "csi.storage.k8s.io/pod.namespace=$NSB" cacheName=vadd
assert_contains "$OUT" "PERMISSION_DENIED: tkm-agent: cache \"vadd\" is not declared for namespace \"$NSB\"" "PermissionDenied"
said
expect_fail "an image no cache declares" pub vol-e2 "$P/e2/mount" cacheImage="$TKM_REGISTRY/nobody/declared:v1"
assert_contains "$OUT" "PERMISSION_DENIED: tkm-agent: image " "PermissionDenied for an undeclared image"
expect_ok "the declared image" pub vol-img "$P/img/mount" cacheImage="$REPO:v1"
assert_eq "$STORE" "$(lowers "$P/img/mount" | cut -d' ' -f2)" "by image: the same store copy"
expect_fail "signature not verified" pub vol-e3 "$P/e3/mount" cacheName=wrongkey
assert_contains "$OUT" "FAILED_PRECONDITION: tkm-agent: " "FailedPrecondition"
assert_contains "$OUT" "KeyMismatch" "with the agent's reason"
said
expect_fail "a tenant's mode below the floor" csi publish vol-e5 "$P/e5/mount" \
  "csi.storage.k8s.io/pod.namespace=$NSB" cacheName=belowfloor
assert_contains "$OUT" "FAILED_PRECONDITION: tkm-agent: " "FailedPrecondition"
assert_contains "$OUT" "PolicyBelowFloor" "with the agent's reason"
[[ ! -e $P/e5/mount ]] || [[ -z $(ls -A "$P/e5/mount") ]] || fail "nothing is mounted below the floor"
said
expect_fail "a typo in an attribute" pub vol-e4 "$P/e4/mount" cachename=vadd
assert_contains "$OUT" 'INVALID_ARGUMENT: unknown volume attribute "cachename"' "InvalidArgument (tkm-csi)"
expect_fail "a bad readOnly" pub vol-e4 "$P/e4/mount" cacheName=vadd readOnly=yes
assert_contains "$OUT" 'INVALID_ARGUMENT: volume attribute readOnly is "yes"' "InvalidArgument"
expect_fail "a pod uid the agent refuses" pub vol-e4 "$P/e4/mount" cacheName=vadd csi.storage.k8s.io/pod.uid=no_underscores
assert_contains "$OUT" "INVALID_ARGUMENT: tkm-agent: " "InvalidArgument from the agent's validation"
said
for v in e1 e2 e3 e4; do
  [[ ! -e $P/$v/mount ]] || fail "a failed publish left its target $P/$v/mount"
  [[ -z $(find "$CSI_STATE" -maxdepth 3 -name "vol-$v") ]] || fail "a failed publish left a dir of vol-$v"
done
pass "failed publishes leave no target and no dir"
assert_eq "" "$(csi_mounts | grep -E 'vol-e[0-9]$' || true)" "and no mount"

step "agent killed: Unavailable; restarted with the same store: publish, no re-extraction"
entry_stat=$(stat -c '%Y %i' "$STORE")
kill -KILL "${AGENT_PID[h200]}"
wait "${AGENT_PID[h200]}" 2>/dev/null || true
AGENT_PID[h200]=
expect_fail "publish while the agent is down" pub vol-down "$P/down/mount" cacheName=vadd
assert_contains "$OUT" "UNAVAILABLE: tkm-agent is unavailable: " "Unavailable, naming the agent"
said
[[ ! -e $P/down/mount ]] && pass "no target left"
expect_ok "probe without the agent" csi probe
assert_eq "OK ready=false" "$OUT" "probe: not ready (the driver itself is alive)"
agent_start h200 h200 "$N1" "$NSA" --metrics-bind-address 127.0.0.1:0 --gc-grace 1h
wait_for 60 "probe: the restarted agent is ready" bash -c "$TKM_BUILD_DIR/tests/e2e_csi_client $CSI_SOCK probe | grep -q 'ready=true'"
t0=$(now)
expect_ok "publish after the restart" pub vol-after "$P/after/mount" cacheName=vadd
echo "timing: publish after the agent's restart: $(since "$t0") s"
assert_eq "$STORE" "$(lowers "$P/after/mount" | cut -d' ' -f2)" "the same store copy"
wait_for 30 "the restarted agent serves /metrics" bash -c "[[ \$(grep -c 'metrics on http://' '$E2E_TMP/h200.log') == 2 ]]"
assert_eq 0 "$(extractions)" "no extraction in the restarted agent (tkm_agent_extractions_total)"
assert_eq 1 "$(grep -c 'tkm-agent: extracted sha256:' "$E2E_TMP/h200.log")" "one extraction in both runs' log"
assert_eq "$entry_stat" "$(stat -c '%Y %i' "$STORE")" "the store entry's mtime and inode are unchanged"
expect_ok "a volume published before the kill is still published" pub vol-a "$P/a/mount" cacheName=vadd
assert_eq "$sum0" "$(sums "$STORE")" "the store's sha256 list is unchanged"

step "unpublish: no mount, no dir, no reference"
for v in a b ro c img after; do expect_ok "unpublish vol-$v" csi unpublish "vol-$v" "$P/$v/mount"; done
expect_ok "unpublish again: idempotent" csi unpublish vol-a "$P/a/mount"
assert_eq "" "$(csi_mounts)" "no tkm-csi mount left"
for v in a b ro c img after; do [[ ! -e $P/$v/mount ]] || fail "target $P/$v/mount left"; done
pass "every target dir removed"
assert_eq "" "$(find "$CSI_STATE" -mindepth 1 -maxdepth 1 ! -name .release -printf '%f\n')" "no per-pod dir left"
assert_eq "" "$(ls -A "$CSI_STATE/.release" 2>/dev/null || true)" "no release pending"
wait_jp 30 "the agent holds no reference (node status pods[] empty)" "" tkcns "$N1" "$NSA" '{.status.caches.vadd.pods[*].name}'
assert_eq 0 "$(metrics | awk '$1 == "tkm_agent_store_references" {print $2}')" "tkm_agent_store_references 0"
[[ -d $STORE ]] && pass "the store entry stays for the grace period"
assert_eq "$sum0" "$(sums "$STORE")" "the store's sha256 list is unchanged after all of it"

step "an incompatible node: FailedPrecondition with the agent's reason"
agent_stop h200
csi_driver_stop
N2=e2e-csi-a100-$RANDOM
agent_node "$N2"
agent_start a100 a100 "$N2" "$NSA"
CSI_AGENT_SOCK=$E2E_TMP/a100/run/agent.sock
wait_jp 90 "vadd judged on the A100 node" ArchMismatch tkcns "$N2" "$NSA" '{.status.caches.vadd.incompatibleGPUs[0].reason}'
csi_driver_start
expect_fail "publish on an A100 node" pub vol-e5 "$P/e5/mount" cacheName=vadd
assert_contains "$OUT" "FAILED_PRECONDITION: tkm-agent: " "FailedPrecondition"
assert_contains "$OUT" "ArchMismatch" "with the agent's reason"
said
[[ ! -e $P/e5/mount ]] && pass "no target left"
[[ -z $(ls "$E2E_TMP/a100/store/sha256" 2>/dev/null) ]] && pass "nothing pulled on the incompatible node"

step "a full store (a 300 KiB tmpfs; vadd is 758 KB extracted): ResourceExhausted StoreFull through the publish"
agent_stop a100
csi_driver_stop
mkdir -p "$E2E_TMP/small"
mount -t tmpfs -o size=300k tmpfs "$E2E_TMP/small" || fail "mount tmpfs"
e2e_on_exit "umount '$E2E_TMP/small' 2>/dev/null || true"
N3=e2e-csi-full-$RANDOM
agent_node "$N3"
agent_start full h200 "$N3" "$NSA" --store-dir "$E2E_TMP/small/store"
CSI_AGENT_SOCK=$E2E_TMP/full/run/agent.sock
wait_jp 90 "vadd judged on the node with the small store" nvidia-h200 tkcns "$N3" "$NSA" '{.status.caches.vadd.compatibleGPUs[0].gpuType}'
csi_driver_start
expect_fail "publish with the store full" pub vol-e6 "$P/e6/mount" cacheName=vadd
assert_contains "$OUT" "RESOURCE_EXHAUSTED: tkm-agent: StoreFull: cache $NSA/vadd needs " "ResourceExhausted with the agent's StoreFull"
assert_contains "$OUT" "bytes free on node $N3" "naming the bytes free"
said
[[ ! -e $P/e6/mount ]] && pass "no target left"
assert_eq "" "$(ls -A "$E2E_TMP/small/store/sha256" 2>/dev/null)$(ls -A "$E2E_TMP/small/store/pulls" 2>/dev/null)" "nothing half-written in the store"

step "shutdown"
csi_driver_stop
assert_eq 0 "$CSI_DRIVER_RC" "SIGTERM: tkm-csi exits 0"
agent_stop full
umount "$E2E_TMP/small"
csi_logs_clean && pass "no sanitizer report in tkm-csi's log"
! grep -E 'Sanitizer|runtime error:' "$E2E_TMP/h200.log" "$E2E_TMP/a100.log" "$E2E_TMP/full.log" && pass "nor in the agents' logs"
e2e_done
