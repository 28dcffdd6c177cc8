#!/usr/bin/env bash
# inductor_csi: one tkm-csi volume serves a torch.compile image's parts. The store
# is what `tkmctl extract` makes of an image built from the real fixtures (Triton
# sm90, the H100 Inductor cache, MCV's vLLM example): triton/ inductor/ vllm/. A pod
# publishes it with mountPath=/home/ml/.cache/tkm and sees:
#   - triton/, inductor/ (fxgraph, aotautograd, generated code), vllm/ under one mount;
#   - every part's group files rewritten for the mount path (the per-pod layer, not
#     the store): MP/triton/..., MP/inductor/triton/0/..., MP/vllm/.../triton_cache/...;
#   - Inductor writing a new FX graph entry lands in the pod's scratch; the store is
#     unchanged (sha256 of every file before == after).
source "$(dirname "$0")/csi/env.sh"
csi_unshare "$0" "$@"
source "$(dirname "$0")/lib.sh"

TKMCTL=$TKM_BUILD_DIR/cli/tkmctl
csi_setup "$E2E_TMP/csi"
e2e_on_exit csi_teardown
T=$E2E_TMP
for f in inductor-cache/torch-2.11.0-cu130-sm90-block.tar.gz vllm-cache/mcv-vllm-example-rocm.tar.gz; do
  [[ -s $TKM_FIXTURES/$f ]] || fail "missing fixture $f"
  tar -xzf "$TKM_FIXTURES/$f" -C "$T"
done
"$TKMCTL" build "$CSI_STORE" --inductor-dir "$T/inductor-cache" --vllm-dir "$T/vllm-cache" --output "$T/img" >/dev/null
CSI_STORE=$CSI_TMP/store/parts
"$TKMCTL" extract "$T/img" --output "$CSI_STORE" >/dev/null
export CSI_STORE
csi_agent_start
csi_driver_start
store_sum() { (cd "$CSI_STORE" && find . -type f -exec sha256sum {} + | sort) | sha256sum; }
sum0=$(store_sum)
MP=/home/ml/.cache/tkm
P=$CSI_TMP/pods

step "one volume, three parts"
expect_ok "publish" csi publish vol-p "$P/p/mount" cacheName=vadd mountPath=$MP csi.storage.k8s.io/pod.name=pod-p
for d in triton inductor/fxgraph inductor/aotautograd inductor/triton/0 vllm/torch_compile_cache; do
  [[ -d $P/p/mount/$d ]] || fail "the pod does not see $d"
done
pass "triton/, inductor/, vllm/ under one mount"
n_store=$(find "$CSI_STORE" -name '__grp__*.json' | wc -l)
n_layer=$(find "$CSI_STATE/default/pod-p/vol-p/groups" -name '__grp__*.json' | wc -l)
assert_eq "$n_store" "$n_layer" "the per-pod layer rewrote every part's group files ($n_store)"
for part in triton inductor/triton/0 vllm/torch_compile_cache/d4ec7c2a7d/rank_0_0/triton_cache; do
  g=$(cd "$P/p/mount" && find "$part" -maxdepth 2 -name '__grp__*.json' -print -quit)
  [[ -n $g ]] || fail "no group file under $part"
  child=$(jq -r '.child_paths | to_entries[0].value' "$P/p/mount/$g")
  assert_eq "$MP/$(dirname "$g")/$(basename "$child")" "$child" "$part: a child path names the mount path"
  [[ -f $P/p/mount/${child#"$MP"/} ]] || fail "$part: $child is not in the volume"
  assert_not_contains "$(cat "$CSI_STORE/$g")" "$MP" "$part: the store's own group file is untouched"
done

step "Inductor writes into the pod's scratch, never into the store"
mkdir -p "$P/p/mount/inductor/fxgraph/zz/fnew"
echo entry >"$P/p/mount/inductor/fxgraph/zz/fnew/e1"
[[ -f $CSI_STATE/default/pod-p/vol-p/upper/inductor/fxgraph/zz/fnew/e1 ]] || fail "the new entry is not in the scratch"
pass "a new FX graph entry lands in the pod's upper dir"
expect_ok "unpublish" csi unpublish vol-p "$P/p/mount"
assert_eq "$sum0" "$(store_sum)" "the store is unchanged"
e2e_done
