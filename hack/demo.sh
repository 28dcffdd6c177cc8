#!/usr/bin/env bash
# `make demo` on a fresh machine (Debian 12, root): installs what it needs, builds
# tkm and its images, starts a local control plane (etcd + kube-apiserver) with an
# OCI registry and a real node (hack/node.sh: containerd + kubelet on loopback),
# packs a real Triton cache (compiled on an H200, tests/fixtures) into an image with
# tkmctl, signs it with cosign v3, deploys tkm with kustomize as pods on the node
# (tkm-controller Deployment, tkm-node DaemonSet: tkm-agent + tkm-csi, with the
# manifests' RBAC; the cosign key in tkm-config and tkm-trusted-keys), declares the
# cache with a TritonKernelCache, waits until it is Verified, Ready and compatible
# (the host's GPU when nvidia-smi is there, else the fixture H200's GPU root), and
# runs a workload pod that mounts it with a csi.tkm.io inline volume and prints a
# group file's child paths, rewritten for the pod's mountPath, from inside.
#
# Usage: hack/demo.sh [up]      the demo (again: reuses what runs)
#        hack/demo.sh down      `make demo-down`: the demo's caches, pods and tkm's
#                               workloads, the node, the control plane, and the host
#                               dirs the demo created; idempotent
# Env:   TKM_DEMO_MODE=local    tkm-controller and tkm-agent as local processes
#                               (hack/tkm-local.sh), no node, no pods, no kubelet
#        JOBS (2)               ninja's parallel jobs
# State: .tkm/cluster (hack/cluster.sh, hack/node.sh), .tkm/demo (logs, key, overlay).
# Afterwards:  eval "$(hack/cluster.sh env)"; kubectl get tkm -A
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
# shellcheck source=hack/lib.sh
source hack/lib.sh
# shellcheck source=hack/tkm-scenario.sh
source hack/tkm-scenario.sh

cmd=${1:-up} mode=${TKM_DEMO_MODE:-node}
[[ $mode == node || $mode == local ]] || die "TKM_DEMO_MODE is '$mode'; it is node (default) or local"
D=$repo/.tkm/demo
NS=ml CACHE=vector-add MP=/home/ml/.triton/cache POD=triton-demo
BUILD=$repo/build
HOSTDIRS=(/var/lib/tkm /var/run/tkm /var/lib/tkm-fixture-gpu) # what the node's pods create on the host
t0=$(date +%s)
n=0 total=13
[[ $mode == local ]] && total=10
step() {
  local e=$(($(date +%s) - t0))
  n=$((n + 1))
  printf '[%02d:%02d] %d/%d %s\n' $((e / 60)) $((e % 60)) "$n" "$total" "$*"
}
# quiet NAME CMD...: runs CMD with its output in $D/NAME.log; on failure shows the log's end
quiet() {
  local name=$1
  shift
  "$@" >"$D/$name.log" 2>&1 && return 0
  echo "---- last lines of $D/$name.log ----" >&2
  tail -25 "$D/$name.log" >&2
  die "$name failed (log: $D/$name.log)"
}
# wait_until SECONDS WHAT CMD...: polls CMD every second
wait_until() {
  local s=$1 end # ($2, WHAT, names the wait for the reader; the caller reports a timeout)
  shift 2
  end=$(($(date +%s) + s))
  until "$@" >/dev/null 2>&1; do
    (($(date +%s) < end)) || return 1
    sleep 1
  done
}
jp() { kubectl -n "$1" get "$2" -o jsonpath="$3" 2>/dev/null; } # NS OBJ JSONPATH
cluster_up() { [[ -s .tkm/cluster/env ]] && hack/cluster.sh status >/dev/null 2>&1; }
# stop_test_node: a test node left running by an interrupted `make test` (its
# cluster dir is a build's e2e-cluster) holds the host's kubelet, and there is one
# node per host: it is disposable, so stop it (and its control plane) and say so.
# Any other node is left alone; hack/node.sh up then says whose it is.
stop_test_node() {
  local owner
  owner=$(running_node_owner)
  [[ $owner == */e2e-cluster ]] || return 0
  echo "  a test node left by an interrupted \`make test\` runs ($owner): stopping it (one node per host)"
  stop_cluster_of "$owner" >"$D/stop-test-node.log" 2>&1
}

down() {
  mkdir -p "$D"
  step "workload pods and caches, then tkm's workloads (tkm-csi unmounts, the controller drops its finalizers)"
  if ! cluster_up; then
    echo "  no control plane running"
  else
    eval "$(hack/cluster.sh env)"
    # Workload pods first (every namespace but tkm-system), so that tkm-csi unmounts their volumes.
    local ns
    for ns in $(kubectl get pods -A --no-headers 2>/dev/null | awk '$1 != "tkm-system" {print $1}' | sort -u); do
      kubectl -n "$ns" delete pods --all --wait=true --timeout=60s >/dev/null 2>&1 || true
    done
    kubectl delete tkc,tkcc -A --all --wait=true --timeout=60s >/dev/null 2>&1 || true
    tkm_workloads_down || log "tkm's workloads did not go (above); node.sh down stops their containers"
  fi
  step "the node (hack/node.sh down) and the control plane (hack/cluster.sh down)"
  if [[ -d .tkm/cluster ]]; then
    hack/node.sh down || log "hack/node.sh down failed (above); hack/cluster.sh down tries again"
    hack/cluster.sh down
  fi
  step "the host dirs the demo created"
  local d
  for d in "${HOSTDIRS[@]}"; do
    if grep -qx "$d" "$D/created-dirs" 2>/dev/null && [[ -e $d ]]; then
      rm -rf --one-file-system "$d" && echo "removed $d"
    fi
  done
  rm -f "$D/created-dirs"
  echo "demo down in $(($(date +%s) - t0)) s"
}

case $cmd in
  up) ;;
  down)
    total=3
    down
    exit 0
    ;;
  *) sed -n '14,22p' "$0" >&2; exit 2 ;;
esac

mkdir -p "$D"
[[ $(id -u) -eq 0 ]] || die "make demo runs as root (containerd and kubelet need it; hack/deps.sh installs packages)"
step "Debian packages (hack/deps.sh)"
quiet deps hack/deps.sh
step "Go-built binaries: etcd, Kubernetes $(hack/testbin/build.sh --version kubelet) (kube-apiserver, kubectl, kubelet, kube-scheduler, kube-controller-manager), containerd, runc, cosign v3, crane (first run only: about 30 min)"
quiet testbin hack/testbin/build.sh etcd kube-apiserver kubectl kubelet kube-scheduler kube-controller-manager \
  containerd containerd-shim-runc-v2 ctr runc cosign3 crane
step "build tkm (cmake + ninja -j ${JOBS:-2} into build/)"
quiet cmake cmake -S . -B "$BUILD" -G Ninja
quiet ninja ninja -C "$BUILD" -j "${JOBS:-2}"
step "control plane and registry (hack/cluster.sh up)"
quiet cluster hack/cluster.sh up
eval "$(hack/cluster.sh env)"
echo "  apiserver $(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}'), registry $TKM_REGISTRY"

if [[ $mode == node ]]; then
  step "the real node: containerd + kubelet on 127.0.0.1 (hack/node.sh up)"
  for d in "${HOSTDIRS[@]}"; do
    [[ -e $d ]] || grep -qx "$d" "$D/created-dirs" 2>/dev/null || echo "$d" >>"$D/created-dirs"
  done
  stop_test_node
  quiet node hack/node.sh up
  eval "$(hack/node.sh env)"
  # A control plane left by TKM_DEMO_MODE=local: its daemons and Node object go.
  if [[ -s .tkm/cluster/tkm-controller.pid || -s .tkm/cluster/tkm-agent.pid ]]; then
    quiet tkm-local-down hack/tkm-local.sh down
    kubectl delete node demo-node --ignore-not-found >/dev/null
  fi
  echo "  $(kubectl get node "$TKM_NODE_NAME" --no-headers)"
  step "tkm's images: tkm-controller, tkm-agent, tkm-csi, tkmctl (make images: hack/images/all.sh)"
  quiet images hack/images/all.sh "$BUILD" "" dev
  awk '$1 ~ /^tkm/ {print "  " $2}' "$D/images.log"
fi

step "a kernel cache image: the sm90 fixture packed with tkmctl build, pushed, signed with cosign v3"
image=$TKM_REGISTRY/kernels/vector-add:triton-3.6.0-sm90
cosign=$(hack/testbin/build.sh --path cosign3)
rm -rf "$D/img"
mkdir -p "$D/img" "$D/keys"
digest=$(tkm_cache_image "$BUILD/cli/tkmctl" tests/fixtures/triton-cache/triton-3.6.0-cuda-sm90.tar.gz "$D/img" "$image") ||
  die "the cache image could not be built or pushed (above)"
echo "  \$ tkmctl build <cache dir> --output layout && tkmctl push layout $image"
echo "  \$ tkmctl inspect $image"
"$BUILD/cli/tkmctl" inspect "$image" | sed 's/^/    /'
if [[ -s $D/keys/cosign.pub ]] && "$BUILD/cli/tkmctl" verify "$image" --key "$D/keys/cosign.pub" >/dev/null 2>&1; then
  echo "  already signed with $D/keys/cosign.pub (tkmctl verify): not signed again"
else
  echo "  \$ cosign sign --key cosign.key ${image%:*}@$digest   (key: $D/keys/cosign.pub)"
  tkm_cosign_sign "$cosign" "$D/keys" "${image%:*}@$digest" || die "cosign sign failed (above)"
fi

if [[ $mode == node ]]; then
  step "deploy tkm with kustomize (hack/deploy.sh): CRDs, RBAC, tkm-config with the key and the local registries, controller, node DaemonSet"
  # An overlay of ours on top of the repository's: the key goes where the manifests
  # expect it, tkm-config (the cluster default: Enforce with this key) and the Secret
  # tkm-trusted-keys (for TritonKernelCacheClusters).
  ov=$D/overlay gpuflags=()
  if command -v nvidia-smi >/dev/null 2>&1; then
    base=$repo/manifests/overlays/local
    echo "  nvidia-smi found: tkm-agent probes this host's GPU(s) (overlays/local)"
  else
    base=$repo/manifests/overlays/fixture-gpu
    gpuflags=(--fixture-gpu-root tests/fixtures/gpu/roots/h200 --fakenvml "$BUILD/fakenvml/libnvidia-ml.so.1")
    echo "  no nvidia-smi: tkm-agent probes the recorded H200 of tests/fixtures/gpu/roots/h200 (overlays/fixture-gpu)"
  fi
  rm -rf "$ov"
  tkm_key_overlay "$ov" "$base" "$D/keys/cosign.pub" || die "the demo's overlay (above)"
  quiet deploy hack/deploy.sh --overlay "$ov" --tag dev "${gpuflags[@]}"
  step "wait for the tkm-controller Deployment and the tkm-node DaemonSet to be Ready"
  quiet rollout-controller kubectl -n tkm-system rollout status deploy/tkm-controller --timeout=300s
  quiet rollout-node kubectl -n tkm-system rollout status ds/tkm-node --timeout=300s
  kubectl -n tkm-system get pods -o wide | sed 's/^/  /'
else
  step "CRDs, tkm-system, RBAC, tkm-config with the key and the local registries; tkm-controller and tkm-agent as local processes (hack/tkm-local.sh)"
  quiet crds kubectl apply --server-side -f crds/
  quiet crds-established crds_established 60 tritonkernelcaches.tkm.io tritonkernelcacheclusters.tkm.io \
    tritonkernelcachenodestatuses.tkm.io tritonkernelcachenodestatusclusters.tkm.io
  for f in namespace rbac-controller rbac-agent admission-nodestatus; do
    quiet "apply-$f" kubectl apply --server-side -f "manifests/base/$f.yaml"
  done
  kubectl -n tkm-system create configmap tkm-config --from-literal=signatureMode=Enforce \
    --from-file=signaturePublicKeys="$D/keys/cosign.pub" \
    --from-literal=registryAllow="* $TKM_LOCAL_REGISTRIES" --from-literal=registryPrivate="$TKM_LOCAL_REGISTRIES" \
    --from-literal=registryPlainHTTP="$TKM_LOCAL_REGISTRIES" --dry-run=client -o yaml | quiet tkm-config kubectl apply -f -
  quiet tkm-local hack/tkm-local.sh up "$BUILD"
fi

step "declare the cache: TritonKernelCache $NS/$CACHE by tag; wait until it is Verified, Ready and compatible"
kubectl get ns "$NS" >/dev/null 2>&1 || kubectl create ns "$NS" >/dev/null
cat >"$D/tkc.yaml" <<EOF
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: $CACHE, namespace: $NS}
spec:
  cacheImage: $image
  mountPath: $MP
EOF
sed 's/^/  /' "$D/tkc.yaml"
quiet tkc kubectl apply -f "$D/tkc.yaml"
if ! kubectl -n "$NS" wait --for=condition=Ready "tkc/$CACHE" --timeout=180s >/dev/null; then
  kubectl -n "$NS" describe tkc "$CACHE" >&2 || true
  tkm_diagnose "$NS" >&2 || true
  die "the cache did not become Ready in 180 s (docs/user-guide.md#troubleshooting)"
fi
pinned=$(jp "$NS" "tkc/$CACHE" '{.status.resolvedDigest}')
[[ $pinned == "$digest" ]] || die "pinned digest $pinned is not the pushed image's $digest"
[[ $(jp "$NS" "tkc/$CACHE" '{.status.conditions[?(@.type=="Verified")].status}') == True ]] ||
  die "$NS/$CACHE is Ready but not Verified"

step "kubectl get tkc,tkcns -A -o wide"
echo "\$ kubectl get tkc,tkcns -A -o wide"
kubectl get tkc,tkcns -A -o wide

if [[ $mode == node ]]; then
  step "a workload pod mounts the cache (csi.tkm.io inline volume at $MP) and prints a group file from inside"
  # Busybox has no JSON tool: one "name -> path" line per child path of the first group file.
  # shellcheck disable=SC2016 # expanded in the pod
  script='g=$(find "$TRITON_CACHE_DIR" -name "__grp__*.json" | sort | head -1)
echo "TRITON_CACHE_DIR=$TRITON_CACHE_DIR"
echo "$g:"
tr "," "\n" <"$g" | sed -n "s/.*\"\([^\"]*\)\": *\"\([^\"]*\)\".*/  \1 -> \2/p"'
  kubectl -n "$NS" delete pod "$POD" --ignore-not-found --wait=true --timeout=60s >/dev/null
  tkm_workload_pod "$NS" "$POD" "$CACHE" "$MP" "$TKM_BUSYBOX_IMAGE" "$script" >"$D/pod.yaml"
  quiet pod hack/node.sh apply "$D/pod.yaml"
  if ! wait_until 180 "pod done" bash -c "[[ \$(kubectl -n $NS get pod $POD -o jsonpath='{.status.phase}') == Succeeded ]]"; then
    tkm_diagnose "$NS" >&2 || true
    die "the workload pod $NS/$POD did not run to completion in 180 s"
  fi
  echo "\$ kubectl -n $NS logs $POD"
  logs=$(kubectl -n "$NS" logs "$POD")
  echo "$logs"
  grep -q " -> $MP/" <<<"$logs" || die "the group file's child paths do not point at $MP"
  # The same file in the image names the directory the kernels were compiled in.
  rel=$(sed -n "s#^$MP/\(.*\):\$#\1#p" <<<"$logs")
  orig=$(find "$D/img/c" -path "*/$rel" 2>/dev/null | head -1)
  [[ -n $orig ]] && echo "  (in the image, $rel names $(jq -r '.child_paths | to_entries[0].value' "$orig" | xargs dirname)/...)"
  ! grep -q " -> " <<<"$(grep -v " -> $MP/" <<<"$logs")" || die "a child path does not point at $MP"
fi

step "kubectl tkm status -A (the kubectl plugin: each cache on each node, and why not where it is not ready)"
echo "\$ kubectl tkm status -A"
PATH=$BUILD/kubectl-tkm:$PATH kubectl tkm status -A || die "kubectl tkm status failed"

e=$(($(date +%s) - t0))
printf '[%02d:%02d] done: the demo took %d min %02d s\n' $((e / 60)) $((e % 60)) $((e / 60)) $((e % 60))
echo "Use it from your shell:  eval \"\$(hack/cluster.sh env)\"; kubectl get tkm -A"
echo "Stop it:                 make demo-down"
