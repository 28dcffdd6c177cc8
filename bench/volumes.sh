#!/usr/bin/env bash
# bench/volumes.sh - cold start of a pod with a kernel cache: a Kubernetes image
# volume (KEP-4639, containerd 2.x) against tkm's CSI volume, not prefetched and
# prefetched, side by side on `make demo`'s real node, for caches of several sizes.
#
# Usage: bench/volumes.sh [-r ROUNDS] [-s "SIZES"]       (needs `make demo` up; root)
#   -r ROUNDS  rounds per size and side (default 3); the table shows medians
#   -s SIZES   cache sizes (default "10M 200M 1G"), made by bench/gen_cache.py from the
#              sm90 fixture: many small files, as real caches have, compressing about
#              as the fixture does
#
# One round of one size:
#   - two new cache images (a new salt each, so every layer is new to containerd and to
#     tkm's store: nothing is warm), built with tkmctl, pushed to the demo's registry,
#     signed with the demo's key (tkm-config's Enforce policy);
#   - image volume: a pod with `volumes[].image` of image A (its io.triton.cache/ at the
#     mountPath), created; the time until its container runs (Ready; busybox sleeps);
#   - tkm, not prefetched: a TritonKernelCache of image A (digest), waited until Ready
#     (the controller verified it; prefetch is off, so the node has not pulled it); then
#     a pod with a csi.tkm.io volume of it, timed the same way (pull, verification by
#     digest, extraction and publish all happen on the pod's path);
#   - tkm, prefetched: tkm-config prefetch "true", a cache of image B, waited until the
#     node reports it extracted; then the pod, timed.
# A pod with an emptyDir instead (the floor: sandbox and container start, no cache) runs
# each round too. Disk (round 1): what the first pod of each side added on the node
# (containerd's root, content store + snapshots, for the image volume; tkm's store for
# tkm), and what a second pod of the same cache adds (containerd's root again; tkm's
# per-pod layer: rewritten group files and an empty scratch), in KiB of blocks.
# The pod timer starts before `kubectl create` and stops when `kubectl wait
# --for=condition=Ready` returns: both sides pay the same two kubectl runs.
# Goals (issue 22): tkm not prefetched <= 1.1x the image volume's time at every size,
# prefetched <= 0.2x; tkm's disk use per extra pod <= 1% of the cache (tests/e2e/node_imagevol.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
# shellcheck source=hack/lib.sh
source hack/lib.sh
# shellcheck source=hack/tkm-scenario.sh
source hack/tkm-scenario.sh

ROUNDS=3 SIZES="10M 200M 1G"
while getopts r:s:h o; do
  case $o in
    r) ROUNDS=$OPTARG ;;
    s) SIZES=$OPTARG ;;
    *) sed -n '2,28p' "$0" >&2; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || die "bench/volumes.sh runs as root (it reads the node's containerd and tkm dirs)"
[[ -s .tkm/cluster/env && -s .tkm/cluster/node/env && -s .tkm/demo/keys/cosign.key ]] ||
  die "no demo: run \`make demo\` first (bench/volumes.sh uses its node, registry, tkm and key)"
eval "$(hack/cluster.sh env)"
eval "$(hack/node.sh env)"
TKMCTL=$repo/build/cli/tkmctl
COSIGN=$(hack/testbin/build.sh --path cosign3)
CTR=$TKM_CTR
CROOT=$TKM_NODE_DIR/containerd/root
STORE=/var/lib/tkm/store
NS=bench-vol
MP=/tmp/tcache # where the fixture (and so every generated cache) was compiled
W=$(mktemp -d "${TMPDIR:-/tmp}/tkm-bench-volumes-XXXXXX")
REPO=$TKM_REGISTRY/bench/volumes
echo "bench/volumes.sh: sizes $SIZES, $ROUNDS rounds; work dir $W; node $TKM_NODE_NAME"
echo "containerd $("$CTR" --version | awk '{print $3}'), kubelet $(kubectl get node "$TKM_NODE_NAME" -o jsonpath='{.status.nodeInfo.kubeletVersion}')"

kubectl get ns "$NS" >/dev/null 2>&1 || kubectl create ns "$NS" >/dev/null
prefetch0=$(kubectl -n tkm-system get cm tkm-config -o jsonpath='{.data.prefetch}')
set_prefetch() { kubectl -n tkm-system patch cm tkm-config --type=merge -p "{\"data\":{\"prefetch\":\"$1\"}}" >/dev/null; }
cleanup() {
  kubectl -n "$NS" delete pods --all --wait=true --timeout=120s >/dev/null 2>&1 || true
  kubectl -n "$NS" delete tkc --all --wait=true --timeout=120s >/dev/null 2>&1 || true
  if [[ -n $prefetch0 ]]; then set_prefetch "$prefetch0"; else
    kubectl -n tkm-system patch cm tkm-config --type=json -p '[{"op":"remove","path":"/data/prefetch"}]' >/dev/null 2>&1 || true
  fi
  rm -rf "$W"
}
trap cleanup EXIT
set_prefetch false

SEED=$W/seed
mkdir -p "$SEED" && tar -xzf tests/fixtures/triton-cache/triton-3.6.0-cuda-sm90.tar.gz -C "$SEED"
now() { date +%s.%N; }
# KiB of blocks under the paths (a file that a GC removes meanwhile is not an error)
kdu() { { du -sk "$@" 2>/dev/null || true; } | awk '{s += $1} END {print s + 0}'; }
# the unpacked snapshot of the layer that holds the kernel dir KEY (containerd's overlayfs)
snapdir() { find "$CROOT/io.containerd.snapshotter.v1.overlayfs/snapshots" -mindepth 4 -maxdepth 4 \
  -path "*/fs/io.triton.cache/$1" -printf '%h\n' 2>/dev/null | head -1 | sed 's|/fs/io.triton.cache$||'; }

# image NAME SIZE: generates, builds, pushes and signs a cache image; prints REPO@DIGEST
image() {
  local name=$1 size=$2 d
  python3 bench/gen_cache.py "$SEED/tcache" "$W/$name" "$size" "$name" >/dev/null
  find "$W/$name" -mindepth 1 -maxdepth 1 -printf '%f\n' -quit >"$W/$name.key"
  "$TKMCTL" build "$W/$name" --output "$W/$name.oci" >/dev/null
  d=$("$TKMCTL" push "$W/$name.oci" "$REPO:$name" -o json | jq -r .digest)
  tkm_cosign_sign "$COSIGN" .tkm/demo/keys "$REPO@$d" >/dev/null
  rm -rf "${W:?}/$name" "${W:?}/$name.oci"
  echo "$REPO@$d"
}

# pod NAME img REF | pod NAME tkm CACHE | pod NAME none: a busybox pod (sleeps) with the
# cache at $MP (none: an emptyDir there, the floor: what any pod's start costs here)
pod() {
  local vol sub=
  if [[ $2 == none ]]; then
    vol="emptyDir: {}"
  elif [[ $2 == img ]]; then
    vol="image: {reference: $3, pullPolicy: IfNotPresent}" sub=", subPath: io.triton.cache"
  else
    vol="csi: {driver: csi.tkm.io, volumeAttributes: {cacheName: $3, mountPath: $MP}}"
  fi
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $NS}
spec:
  hostNetwork: true
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: $TKM_BUSYBOX_IMAGE
    command: [sleep, "3600"]
    volumeMounts: [{name: cache, mountPath: $MP$sub}]
  volumes:
  - name: cache
    $vol
EOF
}
# start NAME KIND WHAT: creates the pod, prints the seconds until it is Ready
start() {
  local f=$W/$1.yaml t0
  pod "$@" >"$f"
  hack/node.sh check "$f"
  t0=$(now)
  kubectl create -f "$f" >/dev/null
  kubectl -n "$NS" wait --for=condition=Ready "pod/$1" --timeout=900s >/dev/null ||
    { kubectl -n "$NS" describe pod "$1" | tail -15 >&2; die "pod $1 did not start"; }
  awk -v a="$t0" -v b="$(now)" 'BEGIN{printf "%.2f", b-a}'
}
tkc() { # NAME REF: declares the cache
  kubectl apply -f - >/dev/null <<EOF
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: $1, namespace: $NS}
spec: {cacheImage: "$2", mountPath: $MP}
EOF
  kubectl -n "$NS" wait --for=condition=Ready "tkc/$1" --timeout=300s >/dev/null || die "cache $1 not Ready"
}
extracted() { [[ $(kubectl -n "$NS" get tkcns "$TKM_NODE_NAME" -o jsonpath="{.status.caches.$1.extracted}" 2>/dev/null) == true ]]; }
median() { sort -g | awk '{a[NR] = $1} END {if (NR % 2) print a[(NR + 1) / 2]; else printf "%.2f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
drop() { # the round's pods, caches and containerd's copy of the image
  kubectl -n "$NS" delete pods --all --wait=true --timeout=120s >/dev/null
  kubectl -n "$NS" delete tkc --all --wait=true --timeout=120s >/dev/null
  "$CTR" -n k8s.io images rm "$@" >/dev/null 2>&1 || true
}

declare -A T_IMG T_COLD T_PRE T_NONE DISK_IMG DISK_TKM EXTRA_IMG EXTRA_TKM LAYER
CACHES=/var/run/tkm/caches
# Cold rounds first (prefetch off), then prefetched ones, so that a switch of tkm-config
# never races a measurement.
for size in $SIZES; do
  for r in $(seq 1 "$ROUNDS"); do
    a=$(image "v$size-r$r-a-$$" "$size")
    LAYER[$size]=$(curl -s "http://$TKM_REGISTRY/v2/bench/volumes/manifests/${a#*@}" \
      -H 'Accept: application/vnd.oci.image.manifest.v1+json' | jq '.layers[0].size')
    tn=$(start "nv$r" none -)
    T_NONE[$size]+="$tn "
    ti=$(start "iv$r" img "$a")
    T_IMG[$size]+="$ti "
    if ((r == 1)); then
      # containerd keeps the layer twice: the gzip blob in its content store and the
      # unpacked snapshot; a second pod gets a snapshot of its own over it (measured as
      # the snapshots dir's growth)
      sd=$(snapdir "$(cat "$W/v$size-r$r-a-$$.key")")
      [[ -n $sd ]] || die "no containerd snapshot holds the image volume's layer"
      DISK_IMG[$size]=$(($(kdu "$sd") + LAYER[$size] / 1024))
      c1=$(kdu "$CROOT/io.containerd.snapshotter.v1.overlayfs/snapshots")
      start iv-extra img "$a" >/dev/null
      EXTRA_IMG[$size]=$(($(kdu "$CROOT/io.containerd.snapshotter.v1.overlayfs/snapshots") - c1))
    fi
    tkc "c$r" "$a"
    t=$(start "tc$r" tkm "c$r")
    T_COLD[$size]+="$t "
    if ((r == 1)); then
      # tkm keeps the extracted tree only (the pulled blob is removed after extraction)
      ld=$(curl -s "http://$TKM_REGISTRY/v2/bench/volumes/manifests/${a#*@}" \
        -H 'Accept: application/vnd.oci.image.manifest.v1+json' | jq -r '.layers[0].digest')
      DISK_TKM[$size]=$(kdu "$STORE/sha256/${ld#sha256:}")
      start tc-extra tkm "c$r" >/dev/null
      EXTRA_TKM[$size]=$(kdu "$CACHES/$NS/tc-extra") # the extra pod's own layer (the store is shared)
    fi
    echo "  $size round $r: no cache volume ${tn}s; image volume ${ti}s; tkm not prefetched ${t}s"
    drop "$a"
  done
done
set_prefetch true
for size in $SIZES; do
  for r in $(seq 1 "$ROUNDS"); do
    b=$(image "v$size-r$r-b-$$" "$size")
    kubectl apply -f - >/dev/null <<EOF
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: p$r, namespace: $NS}
spec: {cacheImage: "$b", mountPath: $MP}
EOF
    t0=$SECONDS
    until extracted "p$r"; do
      ((SECONDS - t0 < 900)) || die "cache p$r not extracted by prefetch in 900 s"
      sleep 0.5
    done
    t=$(start "tp$r" tkm "p$r")
    T_PRE[$size]+="$t "
    echo "  $size round $r: tkm prefetched ${t}s"
    drop
  done
done

echo
echo "| cache | layer (gzip) | no cache volume (floor) | image volume | tkm, not prefetched | ratio | tkm, prefetched | ratio | disk: image volume, first pod / extra pod | disk: tkm, first pod / extra pod |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for size in $SIZES; do
  mn=$(tr ' ' '\n' <<<"${T_NONE[$size]}" | grep . | median)
  mi=$(tr ' ' '\n' <<<"${T_IMG[$size]}" | grep . | median)
  mc=$(tr ' ' '\n' <<<"${T_COLD[$size]}" | grep . | median)
  mp=$(tr ' ' '\n' <<<"${T_PRE[$size]}" | grep . | median)
  awk -v s="$size" -v l="${LAYER[$size]}" -v n="$mn" -v i="$mi" -v c="$mc" -v p="$mp" -v di="${DISK_IMG[$size]}" -v dt="${DISK_TKM[$size]}" \
    -v ei="${EXTRA_IMG[$size]}" -v et="${EXTRA_TKM[$size]}" \
    'BEGIN{printf "| %s | %.1f MiB | %.2f s | %.2f s | %.2f s | %.2fx | %.2f s | %.2fx | %.0f MiB / %d KiB | %.0f MiB / %d KiB (%.2f%%) |\n", s, l/1048576, n, i, c, c/i, p, p/i, di/1024, ei, dt/1024, et, 100*et/dt}'
done
echo "(medians of $ROUNDS rounds; rounds: no volume ${T_NONE[*]}; image volume ${T_IMG[*]}; tkm cold ${T_COLD[*]}; prefetched ${T_PRE[*]})"
