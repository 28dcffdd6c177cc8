#!/usr/bin/env bash
# csi_scratch: what each pod compiled (issue 25), counted by tkm-csi at unpublish and
# sent in the agent's Release, in a private mount namespace against e2e_csi_testagent
# (tests/e2e/csi/env.sh), which logs the counts it gets:
#   an overlay volume: new real Triton kernel dirs (names, files and bytes as in the
#   scratch layer), copied-up and removed store kernels and a bad kernel name not
#   counted as names; the one-line summary in tkm-csi's log; a private copy
#   (readOnly "false"): only what is not in the store; strict: no counts; Empty
#   volumes (Triton-only at the root, torch.compile parts: triton/ and
#   inductor/fxgraph/); a tkm-csi restart between publish and unpublish still counts;
#   a state file it cannot read and --count-scratch=false: unpublish succeeds, no counts.
source "$(dirname "$0")/csi/env.sh"
csi_unshare "$0" "$@"
source "$(dirname "$0")/lib.sh"

csi_setup "$E2E_TMP/csi"
e2e_on_exit csi_teardown
csi_agent_start --cache empty=/cache --empty empty=ArchMismatch \
  --cache emptyparts --empty emptyparts=NoVariant --parts emptyparts=triton,inductor
csi_driver_start
P=$CSI_TMP/pods
V=$CSI_STATE/default
# "New" kernels: real Triton 3.6 kernel dirs of another target (sm80), not in the store.
NEW=$TKM_FIXTURES/triton-3.6-sm80-cross/cache
K_SM=KLIMEI4IIM6RDQY436IVDU2R2BZB3K5GO75QKX2BM5BMPD5WYMVQ  # softmax_kernel
K_MM=ZPIVXZ6EZTL75CEMY4YV6TRUXBSA3B5MIC4QHZI6LFHNDAY7CX7A  # matmul_kernel
K_ADD=C23QZYI4GH3MXBAUKWP6BNEAK4HN6NGURFQVMFJAUTTNJHPAGT3Q # add_kernel
for k in $K_SM $K_MM $K_ADD; do
  [[ -d $NEW/$k && ! -e $CSI_STORE/$k ]] || fail "fixture kernel dir $k missing, or in the store"
done
a_store_kernel=$(cd "$CSI_STORE" && find . -name '*.cubin' | head -1)
a_store_kernel=${a_store_kernel#./}
a_store_dir=$(cd "$CSI_STORE" && find . -mindepth 1 -maxdepth 1 -type d | sed -n 2p)
a_store_dir=${a_store_dir#./}
# upper_files DIR: "FILES BYTES" of the regular files in DIR (what the count must say)
upper_files() { find "$1" -type f -printf '%s\n' | awk '{n++; s+=$1} END {printf "files=%d bytes=%d", n, s}'; }
# released VOL: the agent's Release line for VOL
released() { grep "^Release $1 " "$CSI_TMP/agent.log" | tail -1; }

step "an overlay volume: new kernels counted, store kernels not"
expect_ok "publish vol-o" csi publish vol-o "$P/o/mount" cacheName=vadd
cp -r "$NEW/$K_SM" "$NEW/$K_MM" "$P/o/mount/"
echo changed >>"$P/o/mount/$a_store_kernel"   # copied up: not a new kernel
rm -rf "${P:?}/o/mount/$a_store_dir"            # a whiteout: not a kernel
mkdir "$P/o/mount/BADNAMEKERNEL"
printf '{"name": "evil\\u001b[31m name;rm"}' >"$P/o/mount/BADNAMEKERNEL/k.json"
want=$(upper_files "$V/pod-vol-o/vol-o/upper")
expect_ok "unpublish vol-o" csi unpublish vol-o "$P/o/mount"
line=$(released vol-o)
assert_contains "$line" "Release vol-o released scratch triton=3 fxgraph=0 aotautograd=0 vllm=0 $want truncated=1 names=" \
  "3 new kernel dirs (2 real, 1 with a bad name), the scratch's $want, truncated: the bad name"
names=$(tr ',' '\n' <<<"${line##* names=}" | sort | paste -sd,)
assert_eq "matmul_kernel,softmax_kernel" "$names" "the kernels' names, the bad one left out"
log=$(grep "unpublished vol-o " "$CSI_TMP/csi.log")
assert_contains "$log" "the pod compiled: triton 3 kernels (" "the one-line summary in tkm-csi's log"
w_files=${want#files=}
assert_contains "$log" "inductor 0 fxgraph 0 aotautograd, vllm 0, ${w_files%% *} files ${want##*bytes=} bytes (truncated)" "... with files and bytes"
assert_not_contains "$log" "evil" "no bad name in the log"
[[ ! -e $V/pod-vol-o ]] && pass "the scratch layer is deleted after the count"

step "an overlay volume the pod wrote nothing to: zero"
expect_ok "publish vol-z" csi publish vol-z "$P/z/mount" cacheName=vadd
expect_ok "unpublish vol-z" csi unpublish vol-z "$P/z/mount"
assert_contains "$(released vol-z)" "scratch triton=0 fxgraph=0 aotautograd=0 vllm=0 files=0 bytes=0 truncated=0 names=" "counted, all zero (the group files are in the groups layer)"

step "strict read-only: no scratch layer, no counts"
expect_ok "publish vol-ro" csi publish vol-ro "$P/ro/mount" cacheName=vadd readOnly=true
expect_ok "unpublish vol-ro" csi unpublish vol-ro "$P/ro/mount"
assert_eq "Release vol-ro released" "$(released vol-ro)" "a Release without scratch"

step "a private copy (readOnly \"false\"): only what is not in the store"
expect_ok "publish vol-copy" csi publish vol-copy "$P/copy/mount" cacheName=vadd readOnly=false
echo changed >>"$P/copy/mount/$a_store_kernel"
cp -r "$NEW/$K_ADD" "$P/copy/mount/"
want=$(upper_files "$NEW/$K_ADD")
expect_ok "unpublish vol-copy" csi unpublish vol-copy "$P/copy/mount"
assert_contains "$(released vol-copy)" "scratch triton=1 fxgraph=0 aotautograd=0 vllm=0 $want truncated=0 names=add_kernel" \
  "the new kernel only ($want), not the copied store"

step "an Empty volume (Triton-only): everything the pod compiled"
expect_ok "publish vol-e" csi publish vol-e "$P/e/mount" cacheName=empty
cp -r "$NEW/$K_SM" "$NEW/$K_MM" "$NEW/$K_ADD" "$P/e/mount/"
want=$(upper_files "$P/e/mount")
expect_ok "unpublish vol-e" csi unpublish vol-e "$P/e/mount"
assert_contains "$(released vol-e)" "scratch triton=3 fxgraph=0 aotautograd=0 vllm=0 $want truncated=0 names=" "3 kernels at the root"

step "an Empty volume of a torch.compile cache: per part"
expect_ok "publish vol-ep" csi publish vol-ep "$P/ep/mount" cacheName=emptyparts
cp -r "$NEW/$K_SM" "$P/ep/mount/triton/"
mkdir -p "$P/ep/mount/inductor/fxgraph/ab/fabcdef1" "$P/ep/mount/inductor/fxgraph/cd/fcd0002" "$P/ep/mount/inductor/aotautograd/aotkey1"
echo graph >"$P/ep/mount/inductor/fxgraph/ab/fabcdef1/entry"
echo graph >"$P/ep/mount/inductor/fxgraph/cd/fcd0002/entry"
echo aot >"$P/ep/mount/inductor/aotautograd/aotkey1/entry"
want=$(upper_files "$P/ep/mount")
expect_ok "unpublish vol-ep" csi unpublish vol-ep "$P/ep/mount"
assert_contains "$(released vol-ep)" "scratch triton=1 fxgraph=2 aotautograd=1 vllm=0 $want truncated=0 names=softmax_kernel" \
  "triton/ 1 kernel, inductor/ 2 FX graphs and 1 AOTAutograd entry"

step "a tkm-csi restart between publish and unpublish"
expect_ok "publish vol-rs" csi publish vol-rs "$P/rs/mount" cacheName=vadd
expect_ok "publish vol-rse" csi publish vol-rse "$P/rse/mount" cacheName=emptyparts
cp -r "$NEW/$K_MM" "$P/rs/mount/"
cp -r "$NEW/$K_ADD" "$P/rse/mount/triton/"
want=$(upper_files "$V/pod-vol-rs/vol-rs/upper")
csi_driver_stop
assert_eq 0 "$CSI_DRIVER_RC" "stopped"
csi_driver_start
expect_ok "unpublish vol-rs after the restart" csi unpublish vol-rs "$P/rs/mount"
assert_contains "$(released vol-rs)" "scratch triton=1 fxgraph=0 aotautograd=0 vllm=0 $want truncated=0 names=matmul_kernel" "counted by the new tkm-csi"
expect_ok "unpublish vol-rse after the restart" csi unpublish vol-rse "$P/rse/mount"
assert_contains "$(released vol-rse)" "scratch triton=1 fxgraph=0 aotautograd=0 vllm=0 " "an Empty volume's parts layout kept over the restart"
assert_contains "$(released vol-rse)" "names=add_kernel" "its kernel's name"

step "a count that fails never fails the unpublish"
expect_ok "publish vol-bad" csi publish vol-bad "$P/bad/mount" cacheName=vadd
cp -r "$NEW/$K_SM" "$P/bad/mount/"
python3 -c 'import os, sys; os.setxattr(sys.argv[1], "trusted.tkm.scratch", b"not ours")' "$V/pod-vol-bad/vol-bad"
expect_ok "unpublish vol-bad" csi unpublish vol-bad "$P/bad/mount"
assert_eq "Release vol-bad released" "$(released vol-bad)" "released, without counts"
assert_contains "$(grep 'vol-bad' "$CSI_TMP/csi.log")" "volume vol-bad: the scratch layer was not counted: " "the reason in the log"
[[ ! -e $V/pod-vol-bad ]] && pass "the scratch layer is deleted all the same"

step "--count-scratch=false"
csi_driver_stop
csi_driver_start --count-scratch=false
expect_ok "publish vol-off" csi publish vol-off "$P/off/mount" cacheName=vadd
cp -r "$NEW/$K_SM" "$P/off/mount/"
expect_ok "unpublish vol-off" csi unpublish vol-off "$P/off/mount"
assert_eq "Release vol-off released" "$(released vol-off)" "no counts sent"
assert_eq "" "$(csi_mounts)" "no mount left"
assert_eq "" "$(find "$CSI_STATE" -mindepth 1 -maxdepth 1 ! -name .release -printf '%f\n')" "no per-pod dir left"
csi_driver_stop
csi_agent_stop
csi_logs_clean && pass "no sanitizer report in the logs"
e2e_done
