#!/usr/bin/env bash
# node_imagevol: tkm's CSI volume and a Kubernetes image volume (KEP-4639,
# `volumes[].image`, mounted by containerd 2.x) side by side on the real node, with
# the same cache image and the same workload: bench/gpu/fake_workload.py, which
# treats TRITON_CACHE_DIR as Triton 3.6's FileCacheManager does, in the test node's
# python image (hack/images/build.sh). Every row of docs/alternatives.md's table is an
# assertion here:
#   1. mounted at the path the cache was compiled at (/tmp/tcache): both hit;
#   2. mounted at another path: the image volume misses every kernel and the workload
#      fails writing on the read-only mount (OSError, errno 30); tkm hits every one;
#   3. a kernel missing from the cache: the image volume's pod fails; tkm's compiles
#      into its scratch layer;
#   4. an unsigned image and one signed with another key, under tkm-config's Enforce
#      policy: the image volume mounts both; tkm refuses with NoSignature/KeyMismatch;
#   5. an sm80 image on the fixture H200: the image volume mounts it and the workload
#      misses every kernel and fails; tkm mounts an empty writable cache (the default
#      whenIncompatible: Empty) with a CacheNotUsed event saying ArchMismatch, and the
#      workload compiles and succeeds; with whenIncompatible: Fail tkm refuses the mount;
#   6. the same cache in two pods: copies of the kernels on the node's disk for each.
# Setup (images, the signed sm90 cache image, tkm deployed with the controller, the
# cache Ready) is node_tkm_full's (node_scenario.inc, NODE_SETUP_ONLY=1).
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
NODE_WITH_CONTROLLER=1 NODE_SETUP_ONLY=1
# shellcheck source=tests/e2e/node_scenario.inc
source "$(dirname "$0")/node_scenario.inc"
: "${TKM_PYTHON_IMAGE:?hack/node.sh env names the python image}"
CP=/tmp/tcache # where the fixture was compiled: its group files name /tmp/tcache/<key>/...
ROWS=$E2E_TMP/rows.tsv
: >"$ROWS"
row() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$ROWS"; } # ROW IMAGE-VOLUME TKM
SEED=$E2E_TMP/seed
mkdir -p "$SEED" && tar -xzf "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" -C "$SEED"
# The fixture's kernels: those with a group file (what Triton compiles), and the rest
# (launcher/utility .so files, which have none).
NK=$(find "$SEED/tcache" -name '__grp__*.json' | wc -l)
NALL=$(find "$SEED/tcache" -mindepth 1 -maxdepth 1 -type d | wc -l)
((NK > 0 && NALL > NK)) || fail "the fixture has $NK grouped kernels of $NALL dirs"

# pod NAME KIND(img|tkm) REF_OR_CACHE MOUNT [WORKLOAD ARGS...|sleep]: a run-once
# workload pod. img: an image volume of REF, its io.triton.cache/ dir (subPath) at
# MOUNT, as an admin would mount a cache image with no operator; tkm: a csi.tkm.io
# volume of the cache at MOUNT. With `sleep` the pod sleeps (for the disk row); with
# `hold ARGS...` it runs the workload and then sleeps, keeping its volume mounted.
pod() {
  local name=$1 kind=$2 what=$3 mp=$4 cmd
  shift 4
  if [[ ${1:-} == sleep ]]; then
    cmd='["python3", "-c", "import time; time.sleep(3600)"]'
  elif [[ ${1:-} == hold ]]; then # the workload, then the pod stays (its scratch layer too)
    shift
    cmd=$(jq -cn --arg a "$*" '["sh", "-c", "python3 /fake_workload.py triton \($a) && exec sleep 3600"]')
  else
    cmd=$(jq -cn --args '["python3", "/fake_workload.py", "triton"] + $ARGS.positional' -- "$@")
  fi
  local vol
  if [[ $kind == img ]]; then
    vol="image: {reference: $what, pullPolicy: IfNotPresent}"
  else
    vol="csi: {driver: csi.tkm.io, volumeAttributes: {cacheName: $what, mountPath: $mp}}"
  fi
  local sub=
  [[ $kind == img ]] && sub=', subPath: io.triton.cache'
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $name, namespace: $NSA}
spec:
  hostNetwork: true
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  restartPolicy: Never
  containers:
  - name: main
    image: $TKM_PYTHON_IMAGE
    command: $cmd
    env:
    - {name: TRITON_CACHE_DIR, value: $mp}
    - {name: FAKE_SEED, value: /seed/tcache}
    - {name: FAKE_COMPILE_S, value: "0.01"}
    volumeMounts: [{name: cache, mountPath: $mp$sub}]
  volumes:
  - name: cache
    $vol
EOF
}
phase() { kubectl -n "$NSA" get pod "$1" -o jsonpath='{.status.phase}' 2>/dev/null; }
done_() { [[ $(phase "$1") == Succeeded || $(phase "$1") == Failed ]]; }
# run NAME KIND WHAT MOUNT ARGS...: applies the pod, waits for it to end; sets PH (phase)
# and LOG (its output).
run() {
  expect_ok "apply $1" "$hack/node.sh" apply - < <(pod "$@")
  wait_for 180 "pod $1 ran to its end" done_ "$1"
  PH=$(phase "$1")
  LOG=$(kubectl -n "$NSA" logs "$1" 2>&1)
}
field() { tail -1 <<<"$LOG" | jq -r ".$1" 2>/dev/null; } # a field of the workload's JSON line
erofs() { assert_contains "$LOG" "OSError: [Errno 30] Read-only file system" "$1"; }
IMGREF=$REPO@$D
CRANE=$("$hack/testbin/build.sh" --path crane)
crane_digest() { "$CRANE" digest "$1"; }

step "1. mounted where the cache was compiled ($CP): both hit"
run i1 img "$IMGREF" "$CP"
assert_eq "Succeeded $NALL 0" "$PH $(field compile_hits) $(field compile_misses)" "image volume: all $NALL hit"
run t1 tkm vadd "$CP"
assert_eq "Succeeded $NALL 0" "$PH $(field compile_hits) $(field compile_misses)" "tkm: all $NALL hit"
row "mounted at the compile path ($CP)" "$NALL/$NALL hit" "$NALL/$NALL hit"

step "2. mounted at another path ($MP)"
run i2p img "$IMGREF" "$MP" --probe
assert_eq "Succeeded $((NALL - NK)) $NK" "$PH $(field compile_hits) $(field compile_misses)" \
  "image volume: every grouped kernel misses (its group file names $CP); only the $((NALL - NK)) .so files are found"
run i2 img "$IMGREF" "$MP"
assert_eq Failed "$PH" "image volume: the workload fails"
erofs "on its first miss, writing into the read-only mount"
run t2 tkm vadd "$MP"
assert_eq "Succeeded $NALL 0" "$PH $(field compile_hits) $(field compile_misses)" "tkm: all $NALL hit (group files rewritten for $MP)"
row "mounted at another path ($MP)" "$NK/$NK kernels miss; pod fails: OSError [Errno 30] Read-only file system" "$NALL/$NALL hit"

step "3. a kernel missing from the cache"
run i3 img "$IMGREF" "$CP" --miss
assert_eq Failed "$PH" "image volume: the pod fails"
erofs "compiling the missing kernel into the read-only mount"
expect_ok "apply t3" "$hack/node.sh" apply - < <(pod t3 tkm vadd "$MP" hold --miss)
said() { kubectl -n "$NSA" logs t3 2>/dev/null | grep -q compile_misses; }
wait_for 180 "t3's workload ran (the pod stays, so its scratch layer does)" said
LOG=$(kubectl -n "$NSA" logs t3 2>&1)
assert_eq "Running $NALL 1" "$(phase t3) $(field compile_hits) $(field compile_misses)" "tkm: the rest hit, the missing one compiles"
upper=$(find "$CACHES/$NSA/t3" -path '*/upper/FAKEMISS*' -type d 2>/dev/null | head -1 || true)
[[ -n $upper ]] || fail "tkm: the compiled kernel is not in t3's scratch layer under $CACHES/$NSA/t3"
[[ -z $(find "$STORE" -name 'FAKEMISS*' 2>/dev/null) ]] || fail "the compiled kernel reached the store"
pass "tkm: it lands in the pod's scratch layer, not in the store"
row "a kernel missing from the cache" "pod fails: OSError [Errno 30] Read-only file system" "compiles into the pod's scratch layer; pod succeeds"

step "4. an unsigned image and one signed with another key, under Enforce (tkm-config's key)"
# The same fixture under other titles: other digests, in the same repository.
for v in unsigned otherkey; do
  mkdir -p "$E2E_TMP/$v/c" && tar -xzf "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" -C "$E2E_TMP/$v/c"
  expect_ok "tkmctl build $v" "$TKMCTL" build "$E2E_TMP/$v/c/tcache" --title "$v" --push "$REPO:$v"
done
DU=$(crane_digest "$REPO:unsigned") DK=$(crane_digest "$REPO:otherkey")
[[ $DU != "$D" && $DK != "$D" && $DU != "$DK" ]] || fail "three distinct digests expected: $D $DU $DK"
mkdir -p "$E2E_TMP/otherkey/keys"
tkm_cosign_sign "$COSIGN" "$E2E_TMP/otherkey/keys" "$REPO@$DK" || fail "cosign sign with another key"
for v in unsigned otherkey; do
  kubectl apply -f - >/dev/null <<EOT
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: $v, namespace: $NSA}
spec: {cacheImage: "$REPO:$v", mountPath: $MP}
EOT
done
wait_for 60 "unsigned: Verified=False NoSignature" is "$NSA" tkc/unsigned '{.status.conditions[?(@.type=="Verified")].reason}' NoSignature
wait_for 60 "otherkey: Verified=False KeyMismatch" is "$NSA" tkc/otherkey '{.status.conditions[?(@.type=="Verified")].reason}' KeyMismatch
run i4u img "$REPO@$DU" "$CP"
assert_eq "Succeeded $NALL" "$PH $(field compile_hits)" "image volume: the unsigned image is mounted and used"
run i4k img "$REPO@$DK" "$CP"
assert_eq "Succeeded $NALL" "$PH $(field compile_hits)" "image volume: the image signed with an untrusted key is mounted and used"
for v in unsigned otherkey; do
  expect_ok "apply t4-$v" "$hack/node.sh" apply - < <(pod "t4-$v" tkm "$v" "$MP" --probe)
done
refused() { kubectl -n "$NSA" describe pod "$1" | grep -q "$2"; }
wait_for 90 "t4-unsigned: FailedMount names NoSignature" refused t4-unsigned "FailedPrecondition.*NoSignature"
wait_for 90 "t4-otherkey: FailedMount names KeyMismatch" refused t4-otherkey "FailedPrecondition.*KeyMismatch"
for v in unsigned otherkey; do
  assert_eq Pending "$(phase "t4-$v")" "tkm: t4-$v never starts"
done
row "unsigned image, Enforce policy" "mounted and used" "refused: NoSignature (pod stays ContainerCreating)"
row "signed with an untrusted key, Enforce policy" "mounted and used" "refused: KeyMismatch (pod stays ContainerCreating)"

step "5. an sm80 image on the H200 node"
python3 "$TKM_SOURCE_DIR/tests/e2e/cache_retarget.py" "$SEED/tcache" "$E2E_TMP/sm80/tcache" 80 ||
  fail "cache_retarget.py"
expect_ok "tkmctl build sm80" "$TKMCTL" build "$E2E_TMP/sm80/tcache" --push "$REPO:sm80"
D80=$(crane_digest "$REPO:sm80")
tkm_cosign_sign "$COSIGN" "$IMG" "$REPO@$D80" || fail "cosign sign sm80 with the trusted key"
kubectl apply -f - >/dev/null <<EOT
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: sm80, namespace: $NSA}
spec: {cacheImage: "$REPO:sm80", mountPath: $MP}
EOT
wait_for 90 "sm80: the agent judges it ArchMismatch on the H200" is "$NSA" "tkcns/$TKM_NODE_NAME" '{.status.caches.sm80.incompatibleGPUs[0].reason}' ArchMismatch
run i5p img "$REPO@$D80" "$CP" --probe
assert_eq "Succeeded $((NALL - NK)) $NK" "$PH $(field compile_hits) $(field compile_misses)" "image volume: mounted; every kernel misses (other keys)"
run i5 img "$REPO@$D80" "$CP"
assert_eq Failed "$PH" "image volume: the workload fails"
erofs "recompiling into the read-only mount"
# whenIncompatible unset (the default, Empty): the pod starts with an empty writable cache
run t5 tkm sm80 "$MP"
assert_eq "Succeeded 0 $NALL" "$PH $(field compile_hits) $(field compile_misses)" "tkm (whenIncompatible: Empty, the default): the pod starts with an empty writable cache and compiles all $NALL"
ev=$(kubectl -n "$NSA" get events --field-selector involvedObject.name=t5,reason=CacheNotUsed -o jsonpath='{range .items[*]}{.type} {.message}{"\n"}{end}')
assert_eq 1 "$(grep -c . <<<"$ev")" "one CacheNotUsed event on t5"
assert_contains "$ev" "Warning" "a Warning"
assert_contains "$ev" "ArchMismatch" "naming the reason"
msg=$(kubectl -n "$NSA" get tkcns "$TKM_NODE_NAME" -o jsonpath='{.status.caches.sm80.incompatibleGPUs[0].message}')
assert_contains "$msg" "sm80" "the node status names the cache's arch"
# whenIncompatible: Fail: the refusal of before the policy
kubectl apply -f - >/dev/null <<EOT
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: sm80-fail, namespace: $NSA}
spec: {cacheImage: "$REPO:sm80", mountPath: $MP, whenIncompatible: Fail}
EOT
wait_for 90 "sm80-fail judged ArchMismatch" is "$NSA" "tkcns/$TKM_NODE_NAME" '{.status.caches.sm80-fail.incompatibleGPUs[0].reason}' ArchMismatch
expect_ok "apply t5f" "$hack/node.sh" apply - < <(pod t5f tkm sm80-fail "$MP" --probe)
wait_for 90 "t5f (whenIncompatible: Fail): FailedMount says why (ArchMismatch)" refused t5f "FailedPrecondition.*ArchMismatch"
row "sm80 image on the H200" "mounted; $NK/$NK kernels miss; pod fails: OSError [Errno 30]" "the pod starts with an empty writable cache, compiles its kernels, Warning CacheNotUsed: ArchMismatch ($msg); whenIncompatible: Fail refuses the mount instead"

step "6. the same cache in two pods on one node: copies on disk"
CROOT=$TKM_NODE_DIR/containerd/root
# One kernel binary stands for the cache: count the copies of <key>/<file> (this cache's
# key: the sm80 image has other keys, the python image's seed lies under /seed) under
# containerd's root (snapshots; the content store keeps the gzip blob) and under tkm's
# store and per-pod layers (-xdev: not through the pods' mounts).
KB=$(cd "$SEED/tcache" && find . -name '*.cubin' | head -1)
KB=${KB#./}
copies() { find "$@" -xdev -path "*/io.triton.cache/$KB" -o -path "$STORE/*/$KB" -o -path "$CACHES/*/$KB" 2>/dev/null | wc -l; }
kdu() { du -sk "$@" 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
for p in i6a i6b; do expect_ok "apply $p" "$hack/node.sh" apply - < <(pod "$p" img "$IMGREF" "$CP" sleep); done
for p in t6a t6b; do expect_ok "apply $p" "$hack/node.sh" apply - < <(pod "$p" tkm vadd "$MP" sleep); done
for p in i6a i6b t6a t6b; do wait_for 120 "$p Running" is "$NSA" "pod/$p" '{.status.phase}' Running; done
# The image volume's mount as the container sees it: read-only (KEP-4639); whether the
# runtime adds noexec (the KEP's advice; Triton dlopen()s the launcher .so it caches)
# is recorded for docs/alternatives.md.
mi=$(kubectl -n "$NSA" exec i6a -- grep " $CP " /proc/self/mountinfo)
assert_contains "$mi" " $CP ro," "image volume: mounted read-only in the container"
noexec=no
[[ $mi == *" $CP ro,"*noexec* ]] && noexec=yes
echo "image volume mount in the container: ${mi#* * * }"
ci=$(copies "$CROOT")
ct=$(copies "$STORE" "$CACHES/$NSA/t6a" "$CACHES/$NSA/t6b")
assert_eq 1 "$ci" "image volume: one unpacked copy in containerd's snapshots, shared by both pods"
assert_eq 1 "$ct" "tkm: one copy in the store, shared by both pods"
# The pods' own layers: an image volume's per-pod snapshot (an empty upper dir) and
# tkm's per-pod dir (the group files rewritten for its mountPath, and an empty scratch).
# Bytes of the files in it against the cache's (directories' blocks aside: what they
# cost depends on the filesystem; bench/volumes.sh measures it for large caches).
fbytes() { find "$@" -xdev -type f -printf '%s\n' 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
SIZE=$(fbytes "$SEED/tcache")
per_pod_tkm=$(fbytes "$CACHES/$NSA/t6b")
pct=$(awk -v a="$per_pod_tkm" -v b="$SIZE" 'BEGIN{printf "%.2f", 100 * a / b}')
((per_pod_tkm > 0)) || fail "tkm: no rewritten group files in t6b's layer ($CACHES/$NSA/t6b)"
awk -v a="$per_pod_tkm" -v b="$SIZE" 'BEGIN{exit !(a <= b / 100)}' ||
  fail "tkm: the second pod's own files are $per_pod_tkm bytes, over 1% of the cache ($SIZE bytes)"
pass "tkm: the second pod adds $per_pod_tkm bytes of files ($pct% of the $SIZE-byte cache): its rewritten group files"
row "image volume mount options in the container" "read-only; noexec: $noexec" "overlay: the store's copy read-only below the pod's scratch"
row "the same cache in two pods (kernel copies on disk)" "$ci (containerd snapshot; plus the compressed blob)" "$ct (tkm's store); $per_pod_tkm bytes of files per extra pod ($pct%)"

step "the table (docs/alternatives.md)"
printf '| case | image volume | tkm |\n|---|---|---|\n'
awk -F'\t' '{printf "| %s | %s | %s |\n", $1, $2, $3}' "$ROWS"
e2e_done
