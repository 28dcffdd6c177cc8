#!/usr/bin/env bash
# csi_publish: tkm-csi's publish/unpublish as a pod sees it, in a private mount
# namespace, against e2e_csi_testagent (a protocol-level stand-in for tkm-agent that
# answers from the real Triton fixture cache, tests/e2e/csi/env.sh; the issue's list
# with the real tkm-agent and apiserver is csi_agent.sh).
#   two pods share one store copy; a pod's writes reach neither the store nor the
#   other pod; strict read-only is read-only; readOnly "false" is a private copy;
#   bytes written per pod = the rewritten group files only; unpublish leaves no
#   mount and no directory and releases in the agent; concurrent publishes of one
#   volume give one mount; publish after an agent restart; each CSI error code;
#   crash recovery (stale dirs removed and released, live mounts kept).
source "$(dirname "$0")/csi/env.sh"
csi_unshare "$0" "$@"
source "$(dirname "$0")/lib.sh"

csi_setup "$E2E_TMP/csi"
e2e_on_exit csi_teardown
csi_agent_start --fail unverified=9:"cache ml/unverified: signature not verified: no signature matches the policy's keys" \
  --fail nogpu=9:"cache ml/nogpu: incompatible with this node: built for sm_90 (cuda), node has sm_80 (NVIDIA A100)" \
  --image registry.example:5000/kernels/vadd@sha256:1111111111111111111111111111111111111111111111111111111111111111 \
  --cache nostore --store-for nostore="$CSI_TMP/no-such-store" \
  --cache badstore --store-for badstore="$CSI_TMP/store,upperdir=/etc"
csi_driver_start
P=$CSI_TMP/pods
store_sum() { (cd "$CSI_STORE" && find . -printf '%p %s %m\n' | sort && find . -type f -exec sha256sum {} + | sort) | sha256sum; }
sum0=$(store_sum)
n_groups=$(find "$CSI_STORE" -name '__grp__*.json' | wc -l)
n_store_files=$(find "$CSI_STORE" -type f | wc -l)
a_kernel=$(cd "$CSI_STORE" && find . -name '*.cubin' | head -1)
a_kernel=${a_kernel#./}

step "identity"
expect_ok "GetPluginInfo" csi info
assert_contains "$OUT" "name=csi.tkm.io version=" "driver name and version"
expect_ok "GetPluginCapabilities" csi caps
assert_eq "OK" "$OUT" "no capabilities (no controller service)"
expect_ok "Probe" csi probe
assert_eq "OK ready=true" "$OUT" "probe: agent ready"
expect_ok "NodeGetCapabilities" csi nodecaps
assert_eq "OK rpc=2" "$OUT" "node capabilities: GET_VOLUME_STATS only"
expect_ok "registration GetInfo" "$TKM_BUILD_DIR/tests/e2e_csi_client" "$CSI_REG_DIR/csi.tkm.io-reg.sock" reginfo
assert_eq "OK type=CSIPlugin name=csi.tkm.io endpoint=$CSI_SOCK versions=1.0.0" "$OUT" "plugin registration info"

step "two pods, one store copy"
expect_ok "publish pod a" csi publish vol-a "$P/a/mount" cacheName=vadd csi.storage.k8s.io/pod.name=pod-a
expect_ok "publish pod b" csi publish vol-b "$P/b/mount" cacheName=vadd mountPath=/home/ml/.triton/cache csi.storage.k8s.io/pod.name=pod-b
mounts=$(csi_mounts | sort)
assert_eq "$P/a/mount tkm-csi:vol-a
$P/b/mount tkm-csi:vol-b" "$mounts" "two overlays, one per pod"
opts_a=$(findmnt -n -o OPTIONS "$P/a/mount")
opts_b=$(findmnt -n -o OPTIONS "$P/b/mount")
assert_contains "$opts_a" "lowerdir=$CSI_STATE/default/pod-a/vol-a/groups:$CSI_STORE," "pod a: groups over the store"
assert_contains "$opts_b" ":$CSI_STORE," "pod b: the same store copy"
assert_contains "$opts_a" "nosuid" "nosuid"
assert_contains "$opts_a" "nodev" "nodev"
cmp "$CSI_STORE/$a_kernel" "$P/a/mount/$a_kernel" && pass "pod a sees the store's kernel binary"
grp=$(cd "$P/a/mount" && find . -name '__grp__*.json' | head -1)
assert_contains "$(cat "$P/a/mount/$grp")" '"/cache/' "pod a: group files name the cache's mountPath hint /cache"
assert_contains "$(cat "$P/b/mount/$grp")" '"/home/ml/.triton/cache/' "pod b: group files name its mountPath attribute"
assert_not_contains "$(cat "$CSI_STORE/$grp")" '"/cache/' "the store's group file is untouched"

step "bytes written per pod: the rewritten group files only"
files_a=$(find "$CSI_STATE/default/pod-a" -type f | wc -l)
assert_eq "$n_groups" "$files_a" "pod a's files = the $n_groups group files"
bytes_a=$(find "$CSI_STATE/default/pod-a" -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}')
store_bytes=$(find "$CSI_STORE" -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}')
((bytes_a * 20 < store_bytes)) && pass "pod a wrote $bytes_a bytes for a $store_bytes-byte cache"

step "writes stay in the pod"
mkdir "$P/a/mount/NEWKERNELXYZ" && echo new >"$P/a/mount/NEWKERNELXYZ/k.json"
echo changed >>"$P/a/mount/$a_kernel"
rm "$P/a/mount/$grp"
[[ -f $P/a/mount/NEWKERNELXYZ/k.json ]] && pass "pod a can add a kernel (a Triton miss compiles)"
[[ ! -e $P/b/mount/NEWKERNELXYZ ]] && pass "pod b does not see pod a's new kernel"
cmp "$CSI_STORE/$a_kernel" "$P/b/mount/$a_kernel" && pass "pod b sees the original kernel binary"
[[ -f $P/b/mount/$grp ]] && pass "pod b still has the group file pod a deleted"
assert_eq "$sum0" "$(store_sum)" "the store is byte-for-byte unchanged"
[[ -f $CSI_STATE/default/pod-a/vol-a/upper/NEWKERNELXYZ/k.json ]] && pass "pod a's writes are in its scratch upper dir"

step "stats"
expect_ok "NodeGetVolumeStats" csi stats vol-a "$P/a/mount"
assert_contains "$OUT" "bytes:total=" "stats: bytes"
assert_contains "$OUT" "inodes:total=" "stats: inodes"
expect_fail "stats of a volume not published there" csi stats vol-a "$P/b/mount"
assert_contains "$OUT" "NOT_FOUND" "stats: NOT_FOUND"

step "strict read-only"
expect_ok "publish readOnly=true" csi publish vol-ro "$P/ro/mount" cacheName=vadd readOnly=true
assert_contains "$(findmnt -n -o OPTIONS "$P/ro/mount")" "ro," "mounted ro"
assert_not_contains "$(findmnt -n -o OPTIONS "$P/ro/mount")" "upperdir" "no upper layer"
expect_fail "a write in a strict mount" touch "$P/ro/mount/x"
assert_contains "$OUT" "Read-only file system" "EROFS"
expect_ok "publish with the pod's readOnly flag" csi publish vol-ro2 "$P/ro2/mount" cacheName=vadd --readonly
expect_fail "a write there" mkdir "$P/ro2/mount/NEW"
assert_contains "$OUT" "Read-only file system" "the pod's readOnly: strict too"
[[ ! -e $CSI_STATE/default/pod-vol-ro/vol-ro/upper ]] && pass "strict: no scratch dir"

step "readOnly false: a private writable copy"
expect_ok "publish readOnly=false" csi publish vol-copy "$P/copy/mount" cacheName=vadd readOnly=false
copied=$(find "$CSI_STATE/default/pod-vol-copy/vol-copy/upper" -type f | wc -l)
assert_eq "$n_store_files" "$copied" "the copy holds every store file"
assert_contains "$(cat "$P/copy/mount/$grp")" '"/cache/' "the copy's group files are rewritten"
echo x >>"$P/copy/mount/$a_kernel"
assert_eq "$sum0" "$(store_sum)" "writing in the copy leaves the store unchanged"

step "no mountPath anywhere: group files as built"
expect_ok "publish a cache without a hint" csi publish vol-nh "$P/nh/mount" cacheName=nohint
cmp "$CSI_STORE/$grp" "$P/nh/mount/$grp" && pass "group file as built"

step "concurrent publishes of one volume"
expect_ok "8 identical publishes at once" csi publish vol-c "$P/c/mount" cacheName=vadd --repeat 8
assert_eq "1" "$(csi_mounts | grep -c ' tkm-csi:vol-c$')" "one mount"
assert_eq "1" "$(grep -c '^Materialize vol-c ' "$CSI_TMP/agent.log")" "one Materialize"

step "two volumes racing for one target"
base_args=("${CSI_AGENT_ARGS[@]}")
csi_agent_stop
csi_agent_start "${base_args[@]}" --delay-ms 300
mkdir -p "$P/race"
csi publish vol-r1 "$P/race/mount" cacheName=vadd >"$CSI_TMP/r1.out" 2>&1 &
r1=$!
sleep 0.1
expect_fail "a second volume while the first is being published" csi publish vol-r2 "$P/race/mount" cacheName=vadd
assert_contains "$OUT" "ABORTED: an operation on volume vol-r1 at target $P/race/mount is in progress" "Aborted"
wait "$r1" || fail "the first publish failed: $(cat "$CSI_TMP/r1.out")"
assert_eq "$P/race/mount tkm-csi:vol-r1" "$(csi_mounts | grep race)" "one mount, the first volume's"
expect_ok "unpublish vol-r1" csi unpublish vol-r1 "$P/race/mount"
csi_agent_stop
csi_agent_start "${base_args[@]}"

step "already exists / idempotent"
expect_ok "publish again: idempotent" csi publish vol-a "$P/a/mount" cacheName=vadd csi.storage.k8s.io/pod.name=pod-a
expect_fail "another volume at a used target" csi publish vol-x "$P/a/mount" cacheName=vadd
assert_contains "$OUT" "ALREADY_EXISTS: target $P/a/mount is already a mount of tkm-csi:vol-a" "ALREADY_EXISTS"
expect_fail "the same volume at another target" csi publish vol-a "$P/a2/mount" cacheName=vadd csi.storage.k8s.io/pod.name=pod-a
assert_contains "$OUT" "ALREADY_EXISTS: volume vol-a is already published at another target path" "ALREADY_EXISTS: one volume, one target"

step "errors a person reads in kubectl describe pod"
expect_fail "cache not declared" csi publish vol-e1 "$P/e1/mount" cacheName=other
assert_contains "$OUT" 'PERMISSION_DENIED: tkm-agent: no TritonKernelCache "other" in namespace default' "PermissionDenied"
expect_fail "image not declared" csi publish vol-e2 "$P/e2/mount" cacheImage=registry.example:5000/evil:latest
assert_contains "$OUT" "PERMISSION_DENIED" "PermissionDenied for an undeclared image"
expect_ok "a declared image" csi publish vol-e2 "$P/e2/mount" cacheImage=registry.example:5000/kernels/vadd@sha256:1111111111111111111111111111111111111111111111111111111111111111
expect_fail "not verified" csi publish vol-e3 "$P/e3/mount" cacheName=unverified
assert_contains "$OUT" "FAILED_PRECONDITION: tkm-agent: cache ml/unverified: signature not verified" "FailedPrecondition, the agent's reason"
expect_fail "incompatible" csi publish vol-e4 "$P/e4/mount" cacheName=nogpu
assert_contains "$OUT" "FAILED_PRECONDITION: tkm-agent: cache ml/nogpu: incompatible with this node" "FailedPrecondition"
expect_fail "no cache named" csi publish vol-e5 "$P/e5/mount" readOnly=true
assert_contains "$OUT" "INVALID_ARGUMENT: volume attribute cacheName (or cacheImage) is required" "InvalidArgument: no cache"
expect_fail "both named" csi publish vol-e5 "$P/e5/mount" cacheName=vadd cacheImage=x/y:z
assert_contains "$OUT" "INVALID_ARGUMENT" "InvalidArgument: both"
expect_fail "bad readOnly" csi publish vol-e5 "$P/e5/mount" cacheName=vadd readOnly=yes
assert_contains "$OUT" 'INVALID_ARGUMENT: volume attribute readOnly is "yes"' "InvalidArgument: readOnly"
expect_fail "a typo" csi publish vol-e5 "$P/e5/mount" cachename=vadd
assert_contains "$OUT" 'INVALID_ARGUMENT: unknown volume attribute "cachename"' "InvalidArgument: unknown key"
expect_fail "relative mountPath" csi publish vol-e5 "$P/e5/mount" cacheName=vadd mountPath=cache
assert_contains "$OUT" 'INVALID_ARGUMENT: mountPath "cache" is not an absolute path' "InvalidArgument: mountPath"
expect_fail "not ephemeral" csi publish vol-e5 "$P/e5/mount" cacheName=vadd csi.storage.k8s.io/ephemeral=false
assert_contains "$OUT" "INVALID_ARGUMENT: csi.tkm.io serves only ephemeral inline volumes" "InvalidArgument: a PV"
expect_fail "target outside the roots" csi publish vol-e5 "$CSI_TMP/elsewhere/mount" cacheName=vadd
assert_contains "$OUT" "is not below the kubelet's pods dir or a --target-root" "InvalidArgument: target root"
mkdir -p "$CSI_TMP/real" && ln -s "$CSI_TMP/real" "$P/link"
expect_fail "a symlink in the target path" csi publish vol-e5 "$P/link/mount" cacheName=vadd
assert_contains "$OUT" 'INVALID_ARGUMENT: target path '"$P"'/link/mount: component "link" is a symbolic link' "InvalidArgument: symlink"
[[ ! -e $CSI_TMP/real/mount ]] && pass "nothing created through the symlink"
expect_fail "a bad volume id" csi publish 'bad/id' "$P/e5/mount" cacheName=vadd
assert_contains "$OUT" "INVALID_ARGUMENT: volume_id" "InvalidArgument: volume id"
for v in e1 e3 e4 e5; do [[ ! -e $CSI_STATE/default/pod-vol-$v ]] || fail "a failed publish left $CSI_STATE/default/pod-vol-$v"; done
pass "failed publishes leave no dir"
assert_eq "" "$(csi_mounts | grep -E 'vol-e[1345]$' || true)" "failed publishes leave no mount"

step "local failures after Materialize: nothing left, the reference released"
expect_fail "a store the driver cannot read" csi publish vol-ns "$P/ns/mount" cacheName=nostore
assert_contains "$OUT" "INTERNAL: " "Internal"
assert_contains "$OUT" "no-such-store" "naming the store path"
expect_fail "a store path that would add overlay options" csi publish vol-bs "$P/bs/mount" cacheName=badstore
assert_contains "$OUT" "INTERNAL: the agent's store path" "Internal: option separators refused"
for v in ns bs; do
  [[ ! -e $CSI_STATE/default/pod-vol-$v ]] || fail "a failed publish left $CSI_STATE/default/pod-vol-$v"
  [[ ! -e $P/$v/mount ]] || fail "a failed publish left the target $P/$v/mount"
done
pass "no dir or target left"
wait_for 10 "both references released in the agent" bash -c "grep -q '^Release vol-ns released' $CSI_TMP/agent.log && grep -q '^Release vol-bs released' $CSI_TMP/agent.log"
assert_eq "" "$(csi_mounts | grep -E 'vol-(ns|bs)$' || true)" "no mount"

step "agent unreachable, then restarted"
csi_agent_stop
expect_fail "publish without the agent" csi publish vol-r "$P/r/mount" cacheName=vadd
assert_contains "$OUT" "UNAVAILABLE: tkm-agent is unavailable: " "Unavailable, naming the agent"
expect_ok "probe without the agent" csi probe
assert_eq "OK ready=false" "$OUT" "probe: not ready"
csi_agent_start
expect_ok "publish after the agent restarted" csi publish vol-r "$P/r/mount" cacheName=vadd
expect_ok "probe" csi probe
assert_eq "OK ready=true" "$OUT" "probe: ready again"

step "unpublish: no mount, no dir, released"
for v in a b; do expect_ok "unpublish vol-$v" csi unpublish "vol-$v" "$P/$v/mount"; done
for v in ro ro2 copy nh c e2 r; do expect_ok "unpublish vol-$v" csi unpublish "vol-$v" "$P/$v/mount"; done
expect_ok "unpublish again: idempotent" csi unpublish vol-a "$P/a/mount"
expect_ok "unpublish of a volume never published" csi unpublish vol-never "$P/never/mount"
assert_eq "" "$(csi_mounts)" "no tkm-csi mount left"
assert_eq "" "$(find "$CSI_STATE" -mindepth 1 -maxdepth 1 ! -name .release -printf '%f\n')" "no per-pod dir left"
assert_eq "" "$(ls -A "$CSI_STATE/.release" 2>/dev/null || true)" "no release pending"
assert_eq "" "$(find "$P" -mindepth 2 -name mount)" "target dirs removed"
for v in a b ro ro2 copy nh c e2 r; do
  grep -q "^Release vol-$v " "$CSI_TMP/agent.log" || fail "no Release of vol-$v in the agent log"
done
pass "every published volume was released in the agent (those from before its restart it no longer knew)"
assert_contains "$(cat "$CSI_TMP/agent.log")" "Release vol-r released" "a reference the agent held was dropped"
assert_eq "$sum0" "$(store_sum)" "the store is unchanged after all of it"

step "crash recovery"
expect_ok "publish vol-live" csi publish vol-live "$P/live/mount" cacheName=vadd
expect_ok "publish vol-gone" csi publish vol-gone "$P/gone/mount" cacheName=vadd
csi_driver_stop KILL
umount "$P/gone/mount" # as after a node reboot: the mount is gone, the dir is not
csi_agent_stop
csi_agent_start # the agent restarted too: it still holds nothing for vol-gone's Release to find
csi_driver_start
[[ ! -e $CSI_STATE/default/pod-vol-gone ]] && pass "the stale per-pod dir without a mount was removed at start"
[[ -d $CSI_STATE/default/pod-vol-live/vol-live/upper ]] && pass "the live volume's dirs are kept"
wait_for 10 "the stale volume is released in the agent" grep -q '^Release vol-gone ' "$CSI_TMP/agent.log"
wait_for 10 "its release marker is gone" bash -c "[[ ! -e $CSI_STATE/.release/vol-gone ]]"
expect_ok "publish vol-live again: still published" csi publish vol-live "$P/live/mount" cacheName=vadd
expect_ok "unpublish vol-live" csi unpublish vol-live "$P/live/mount"
assert_eq "" "$(csi_mounts)" "no mount left"

step "release retried when the agent missed it"
expect_ok "publish vol-late" csi publish vol-late "$P/late/mount" cacheName=vadd
csi_agent_stop
expect_ok "unpublish while the agent is down" csi unpublish vol-late "$P/late/mount"
[[ -e $CSI_STATE/.release/vol-late ]] && pass "a release marker is kept"
csi_agent_start
wait_for 10 "the release reaches the agent" bash -c "[[ ! -e $CSI_STATE/.release/vol-late ]]"
assert_contains "$(cat "$CSI_TMP/agent.log")" "Release vol-late" "the agent got it"

step "a target root reached through a symlink (kubelet dir on another disk)"
csi_driver_stop
mkdir -p "$CSI_TMP/data/pods" && ln -s "$CSI_TMP/data/pods" "$CSI_TMP/linkroot"
csi_driver_start --target-root "$CSI_TMP/linkroot"
L=$CSI_TMP/linkroot
expect_ok "publish below the symlinked root" csi publish vol-l "$L/u/mount" cacheName=vadd
assert_eq "$CSI_TMP/data/pods/u/mount tkm-csi:vol-l" "$(csi_mounts)" "mounted at the real path"
expect_ok "publish again: recognised as published" csi publish vol-l "$L/u/mount" cacheName=vadd
assert_eq "1" "$(csi_mounts | wc -l)" "still one mount"
expect_ok "stats through the symlinked root" csi stats vol-l "$L/u/mount"
expect_ok "unpublish below the symlinked root" csi unpublish vol-l "$L/u/mount"
assert_eq "" "$(csi_mounts)" "unmounted"
[[ ! -e $CSI_TMP/data/pods/u/mount ]] && pass "target removed"

step "shutdown, with a publish in flight (the agent answers after 3 s)"
csi_agent_stop
csi_agent_start "${base_args[@]}" --delay-ms 3000
mkdir -p "$P/s"
csi publish vol-s "$P/s/mount" cacheName=vadd >"$CSI_TMP/s.out" 2>&1 &
s_pid=$!
materializing() { grep -q '^Materialize vol-s ' "$CSI_TMP/agent.log"; }
wait_for 10 "the publish is in flight at the agent" materializing
t0=$(date +%s%N)
csi_driver_stop
ms=$((($(date +%s%N) - t0) / 1000000))
assert_eq 0 "$CSI_DRIVER_RC" "SIGTERM: tkm-csi exits 0"
((ms < 3000)) || fail "the stop took $ms ms: it waited for the agent's answer"
pass "stopped in $ms ms, before the agent answered"
[[ ! -e $CSI_SOCK ]] && pass "SIGTERM: the socket is removed"
wait "$s_pid" && fail "the publish in flight succeeded: $(cat "$CSI_TMP/s.out")"
pass "the publish in flight failed (kubelet retries it): $(tail -1 "$CSI_TMP/s.out")"
assert_eq "" "$(csi_mounts | grep ' tkm-csi:vol-s$' || true)" "nothing mounted for it"
csi_agent_stop
csi_logs_clean && pass "no sanitizer report in the logs"
assert_not_contains "$(cat "$CSI_TMP/csi.log")" "handles open" "the loop closed cleanly"
e2e_done
