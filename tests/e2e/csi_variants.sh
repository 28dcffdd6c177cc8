#!/usr/bin/env bash
# csi_variants: tkm-csi with the agent's answers for mixed fleets (issue 24), in a
# private mount namespace, against e2e_csi_testagent (tests/e2e/csi/env.sh):
#   several store dirs (a node whose GPUs use two variants): one overlay
#   groups:store1:store2, the files of both at the target, every store's group files
#   rewritten, writes in the scratch, the stores unchanged; strict and copy modes;
#   unpublish leaves nothing; more than 16 stores, a store twice, a bad second store,
#   empty together with a store: refused, nothing left, released.
#   Empty volumes (policy Empty, no variant fits): an empty dir any uid writes, one
#   empty dir per part for a torch.compile cache, writable even in readOnly "true",
#   the reason in the log, removed at unpublish; a tkm-csi restart keeps live
#   volumes (two-store and Empty) and removes the stale ones.
source "$(dirname "$0")/csi/env.sh"
csi_unshare "$0" "$@"
source "$(dirname "$0")/lib.sh"

csi_setup "$E2E_TMP/csi"
e2e_on_exit csi_teardown
# The second variant's store: another real Triton 3.6 cache (other kernels, so other
# kernel dirs; the launcher's dir is the same in both, as in two real variants).
mkdir -p "$CSI_TMP/store2"
tar -xzf "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90-inductor-block.tar.gz" -C "$CSI_TMP/store2"
S1=$CSI_STORE
S2=$CSI_TMP/store2/tcache-inductor
[[ -d $S2 ]] || fail "no second store at $S2"
mkdir -p "$CSI_TMP/parts-store/triton" "$CSI_TMP/parts-store/inductor" # a torch.compile layout
many=()
for i in $(seq 17); do many+=(--store-for "many=$CSI_TMP/store-$i"); done
csi_agent_start --cache two=/cache --store-for "two=$S1" --store-for "two=$S2" \
  --cache many "${many[@]}" \
  --cache dup --store-for "dup=$S1" --store-for "dup=$S1" \
  --cache bad2 --store-for "bad2=$S1" --store-for "bad2=$S2,upperdir=/etc" \
  --cache miss2 --store-for "miss2=$S1" --store-for "miss2=$CSI_TMP/no-such-store" \
  --cache mixed --store-for "mixed=$S1" --store-for "mixed=$CSI_TMP/parts-store" \
  --cache empty=/cache --empty empty=ArchMismatch \
  --cache emptyparts --empty emptyparts=NoVariant --parts emptyparts=inductor,triton,vllm \
  --cache broken --empty broken=NoVariant --store-for "broken=$S1" \
  --cache badparts --parts badparts=triton,../etc
csi_driver_start
P=$CSI_TMP/pods
tree_sum() { (cd "$1" && find . -printf '%p %s %m\n' | sort && find . -type f -exec sha256sum {} + | sort) | sha256sum; }
sum1=$(tree_sum "$S1")
sum2=$(tree_sum "$S2")
rel_files() { (cd "$1" && find . "${@:2}" | sed 's|^\./||'); }
k1=$(rel_files "$S1" -name '*.cubin' | sed -n 1p)
k2=$(rel_files "$S2" -name '*.cubin' | sed -n 1p)
[[ -n $k1 && -n $k2 && ! -e $S2/$k1 && ! -e $S1/$k2 ]] || fail "the fixtures' kernels are not distinct: $k1 $k2"
g2=$(rel_files "$S2" -name '__grp__*.json' | sed -n 1p)
n_groups=$({ rel_files "$S1" -name '__grp__*.json'; rel_files "$S2" -name '__grp__*.json'; } | sort -u | wc -l)
n_union=$({ rel_files "$S1" -type f; rel_files "$S2" -type f; } | sort -u | wc -l)
V=$CSI_STATE/default

step "two store dirs: one overlay"
expect_ok "publish a two-variant volume" csi publish vol-two "$P/two/mount" cacheName=two
assert_eq "$P/two/mount tkm-csi:vol-two" "$(csi_mounts)" "one overlay"
opts=$(findmnt -n -o OPTIONS "$P/two/mount")
assert_contains "$opts" "lowerdir=$V/pod-vol-two/vol-two/groups:$S1:$S2," "groups over store 1 over store 2"
assert_contains "$opts" "upperdir=$V/pod-vol-two/vol-two/upper" "the pod's scratch on top"
cmp "$S1/$k1" "$P/two/mount/$k1" && pass "store 1's kernel binary at the target ($k1)"
cmp "$S2/$k2" "$P/two/mount/$k2" && pass "store 2's kernel binary at the target ($k2)"
assert_eq "$n_union" "$(find "$P/two/mount" -type f | wc -l)" "the target holds the union of both stores ($n_union files)"
assert_contains "$(cat "$P/two/mount/$g2")" '"/cache/' "store 2's group files are rewritten for /cache too"
assert_not_contains "$(cat "$S2/$g2")" '"/cache/' "store 2's own group file is untouched"
assert_eq "$n_groups" "$(find "$V/pod-vol-two" -type f | wc -l)" "the per-pod layer holds the group files of both stores, nothing else"
mkdir "$P/two/mount/NEWKERNEL" && echo new >"$P/two/mount/NEWKERNEL/k.json"
echo changed >>"$P/two/mount/$k2"
[[ -f $V/pod-vol-two/vol-two/upper/NEWKERNEL/k.json ]] && pass "a new kernel goes to the scratch"
[[ -f $V/pod-vol-two/vol-two/upper/$k2 ]] && pass "a changed kernel of store 2 is copied up into the scratch"
assert_eq "$sum1" "$(tree_sum "$S1")" "store 1 is byte-for-byte unchanged"
assert_eq "$sum2" "$(tree_sum "$S2")" "store 2 is byte-for-byte unchanged"

step "two store dirs, strict read-only and a private copy"
expect_ok "publish readOnly=true" csi publish vol-two-ro "$P/two-ro/mount" cacheName=two readOnly=true
opts=$(findmnt -n -o OPTIONS "$P/two-ro/mount")
assert_contains "$opts" "ro," "read-only"
assert_contains "$opts" "lowerdir=$V/pod-vol-two-ro/vol-two-ro/groups:$S1:$S2" "both stores"
assert_not_contains "$opts" "upperdir" "no scratch"
cmp "$S2/$k2" "$P/two-ro/mount/$k2" && pass "store 2's kernel binary there"
expect_fail "a write" touch "$P/two-ro/mount/x"
assert_contains "$OUT" "Read-only file system" "EROFS"
expect_ok "publish readOnly=false" csi publish vol-two-cp "$P/two-cp/mount" cacheName=two readOnly=false
assert_eq "$n_union" "$(find "$V/pod-vol-two-cp/vol-two-cp/upper" -type f | wc -l)" "the copy holds the union of both stores"
cmp "$S1/$k1" "$P/two-cp/mount/$k1" && cmp "$S2/$k2" "$P/two-cp/mount/$k2" && pass "kernels of both stores in the copy"
assert_contains "$(cat "$P/two-cp/mount/$g2")" '"/cache/' "the copy's group files of store 2 are rewritten"
assert_eq "$sum2" "$(tree_sum "$S2")" "store 2 unchanged"

step "answers tkm-csi refuses: nothing left, the reference released"
# VOLUME|WHAT|what the error must say
refused=(
  "many|17 store dirs|INTERNAL: tkm-agent answered 17 store directories; a volume mounts at most 16"
  "dup|one store twice|INTERNAL: tkm-agent answered the store path $S1 twice"
  "bad2|a second store with option separators (every store path is checked)|INTERNAL: the agent's store path 2 "
  "miss2|a second store that does not exist|no-such-store"
  "mixed|a Triton-only store dir and a torch.compile one|INTERNAL: the agent's store dirs $S1 and $CSI_TMP/parts-store have different layouts"
  "broken|empty and a store at once (neither is guessed)|INTERNAL: tkm-agent answered Materialize with both empty and a store path"
  "badparts|an unknown part|INTERNAL: tkm-agent answered the part \"../etc\""
)
for r in "${refused[@]}"; do
  IFS='|' read -r v what want <<<"$r"
  expect_fail "$what" csi publish "vol-$v" "$P/$v/mount" "cacheName=$v"
  assert_contains "$OUT" "$want" "$what: the reason"
done
for v in many dup bad2 miss2 mixed broken badparts; do
  [[ ! -e $V/pod-vol-$v ]] || fail "a refused answer left $V/pod-vol-$v"
  [[ ! -e $P/$v/mount ]] || fail "a refused answer left the target $P/$v/mount"
  wait_for 10 "vol-$v released in the agent" grep -q "^Release vol-$v released" "$CSI_TMP/agent.log"
done
pass "no dir, no target, every reference released"
assert_eq "3" "$(csi_mounts | wc -l)" "no mount for them"

step "Empty: an empty writable dir"
expect_ok "publish a cache no variant of which fits" csi publish vol-e "$P/e/mount" cacheName=empty
assert_eq "$P/e/mount tkm-csi:vol-e" "$(csi_mounts | grep vol-e)" "mounted as tkm-csi's own (recognised by source)"
opts=$(findmnt -n -o OPTIONS "$P/e/mount")
assert_eq "lowerdir=$V/pod-vol-e/vol-e/groups,upperdir=$V/pod-vol-e/vol-e/upper,workdir=$V/pod-vol-e/vol-e/work" \
  "$(tr ',' '\n' <<<"$opts" | grep -E '^(lowerdir|upperdir|workdir)=' | paste -sd,)" "no store below it: only the volume's own dirs"
assert_not_contains "$opts" "$S1" "no store"
assert_eq "" "$(ls -A "$P/e/mount")" "the target is empty (a Triton-only cache: no subdir)"
assert_eq "" "$(find "$V/pod-vol-e/vol-e/groups" -mindepth 1)" "the groups layer is empty"
# (the test's temp dirs are 0700: let uid 65534 reach the targets, as kubelet's pods dir lets a pod)
chmod o+x "$E2E_TMP" "$CSI_TMP" "$P" "$P/e"
expect_ok "a non-root uid writes there" setpriv --reuid=65534 --regid=65534 --clear-groups \
  bash -c "mkdir '$P/e/mount/KNEW' && echo k >'$P/e/mount/KNEW/k.json'"
[[ -f $V/pod-vol-e/vol-e/upper/KNEW/k.json ]] && pass "the write is in the volume's own state dir"
assert_contains "$(cat "$CSI_TMP/csi.log")" "published vol-e at $P/e/mount (an empty writable cache: no variant of the cache fits this node: ArchMismatch: no variant of cache empty fits node" "the reason in the log"
expect_ok "NodeGetVolumeStats of an Empty volume" csi stats vol-e "$P/e/mount"
expect_ok "publish again: idempotent" csi publish vol-e "$P/e/mount" cacheName=empty
assert_eq "1" "$(grep -c '^Materialize vol-e ' "$CSI_TMP/agent.log")" "recognised as published, the agent not asked again"

step "Empty: one dir per part of a torch.compile cache, writable even when readOnly is \"true\""
expect_ok "publish (parts inductor, triton, vllm; readOnly true)" csi publish vol-ep "$P/ep/mount" cacheName=emptyparts readOnly=true
assert_eq "inductor triton vllm" "$(find "$P/ep/mount" -mindepth 1 -maxdepth 1 -printf "%f\n" | sort | paste -sd' ')" "one dir per part"
assert_eq "" "$(find "$P/ep/mount" -mindepth 2)" "each empty"
assert_eq "1777 1777 1777" "$(stat -c %a "$P/ep/mount"/* | paste -sd' ')" "each writable for any uid (sticky)"
assert_not_contains "$(findmnt -n -o OPTIONS "$P/ep/mount")" "ro," "not read-only: there is nothing to protect and Triton must write"
chmod o+x "$P/ep"
expect_ok "a non-root uid writes into each part" setpriv --reuid=65534 --regid=65534 --clear-groups \
  bash -c "for d in inductor triton vllm; do echo x >'$P/ep/mount/'\$d/f; done"
assert_eq "3" "$(find "$V/pod-vol-ep/vol-ep/upper" -type f | wc -l)" "the writes are in the volume's state dir"

step "a tkm-csi restart keeps live volumes and drops stale ones"
expect_ok "publish a stale Empty volume" csi publish vol-es "$P/es/mount" cacheName=empty
expect_ok "publish a stale two-store volume" csi publish vol-ts "$P/ts/mount" cacheName=two
csi_driver_stop KILL
umount "$P/es/mount"
umount "$P/ts/mount"
rm -f "$CSI_SOCK" # the killed one's (the new tkm-csi would remove it; csi_driver_start waits for the socket)
csi_driver_start
wait_for 10 "tkm-csi serves again (it recovers before it serves)" csi probe
for v in es ts; do
  [[ ! -e $V/pod-vol-$v ]] || fail "the stale volume vol-$v's dir was kept"
  wait_for 10 "stale vol-$v released in the agent" grep -q "^Release vol-$v released" "$CSI_TMP/agent.log"
done
pass "the stale volumes' dirs were removed at start"
[[ -f $V/pod-vol-e/vol-e/upper/KNEW/k.json ]] && pass "the live Empty volume's scratch is kept"
[[ -d $V/pod-vol-two/vol-two/groups ]] && pass "the live two-store volume's layers are kept"
cmp "$S2/$k2" "$P/two-ro/mount/$k2" && pass "a live two-store volume still serves store 2"
expect_ok "publish vol-e again after the restart" csi publish vol-e "$P/e/mount" cacheName=empty
expect_ok "publish vol-two again after the restart" csi publish vol-two "$P/two/mount" cacheName=two
assert_eq "1" "$(grep -c '^Materialize vol-two ' "$CSI_TMP/agent.log")" "both recognised as published"
[[ -f $P/e/mount/KNEW/k.json ]] && pass "the Empty volume keeps what the pod wrote"

step "unpublish: no mount, no dir, released"
for v in two two-ro two-cp e ep; do expect_ok "unpublish vol-$v" csi unpublish "vol-$v" "$P/$v/mount"; done
assert_eq "" "$(csi_mounts)" "no tkm-csi mount left"
assert_eq "" "$(find "$CSI_STATE" -mindepth 1 -maxdepth 1 ! -name .release -printf '%f\n')" "no per-pod dir left (the Empty volumes' writes went with them)"
for v in two two-ro two-cp e ep; do
  [[ ! -e $P/$v/mount ]] || fail "the target $P/$v/mount is left"
  wait_for 10 "vol-$v released" grep -q "^Release vol-$v released" "$CSI_TMP/agent.log"
done
pass "target dirs removed"
wait_for 10 "no release pending" bash -c "[[ -z \$(ls -A '$CSI_STATE/.release' 2>/dev/null) ]]"
assert_eq "$sum1" "$(tree_sum "$S1")" "store 1 unchanged after all of it"
assert_eq "$sum2" "$(tree_sum "$S2")" "store 2 unchanged after all of it"
csi_driver_stop
assert_eq 0 "$CSI_DRIVER_RC" "SIGTERM: tkm-csi exits 0"
csi_agent_stop
csi_logs_clean && pass "no sanitizer report in the logs"
e2e_done
