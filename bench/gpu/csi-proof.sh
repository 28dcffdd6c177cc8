#!/usr/bin/env bash
# csi-proof.sh [--fake] [--n N] [--parts "triton inductor"] [--out DIR] [--pack]
# The CSI issue's real-GPU proof: a Triton cache compiled on this machine goes
# through tkm's own code path into a pod's view, and Triton run against that view
# compiles nothing; a kernel the cache lacks compiles into the pod's scratch layer
# and the store is untouched. For each part (triton: bench/gpu/triton_workload.py;
# inductor: bench/gpu/inductor_workload.py through torch.compile):
#   1. cold: N runs, each with an empty TRITON_CACHE_DIR; the first run's cache is
#      the "original" (warm-local) cache;
#   2. tkmctl build <original> --output <OCI layout>   (the image)
#      tkmctl extract <layout> --output <store>         (tkm's extraction: digests,
#        safe untar, staging + rename; lib/triton/extract.c)
#   3. e2e_csi_testagent serves that store (agent/agent.proto on unix socket) and
#      tkm-csi runs on its CSI socket, in a private mount namespace (unshare -m);
#   4. N rounds, alternating order: warm-local (TRITON_CACHE_DIR = the original
#      cache) and tkm-mounted: NodePublishVolume through e2e_csi_client with
#      mountPath = MP (the path the "container" sees), the target bind-mounted at MP
#      (what the container runtime does with a volumeMount), the workload run with
#      TRITON_CACHE_DIR=MP, then unmount + NodeUnpublishVolume: a fresh pod each time;
#   5. miss: a fresh pod, the workload with --miss (new kernels): must succeed, the
#      new kernels land in that pod's upper (scratch) dir, the store's sha256 list
#      before == after; for the triton part also the same under readOnly "true"
#      (strict: the miss is expected to fail with EROFS, as the design notes say).
# Start-up = wall time of a fresh process (python start to every kernel run and
# checked), median of N; also the in-process kernels' share. New kernels per run =
# new files in the cache dir (cold, warm-local) or in the pod's upper dir (tkm).
# Goal: tkm-mounted start-up within 5% of warm-local, 0 new cubins.
# Part full (--parts full; docs/inductor.md): inductor_workload.py with BOTH
# caches, each run's dir holding triton/ (TRITON_CACHE_DIR) and inductor/
# (TORCHINDUCTOR_CACHE_DIR, FX graph + AOTAutograd caches on); the image is
# `tkmctl build DIR/triton --inductor-dir DIR/inductor`, the volume serves both
# (MP/triton, MP/inductor); fx.tsv adds torch's counters per run
# (fxgraph_cache_hit/miss, autograd_cache_hit/miss) and Triton's compile events.
#
# Binaries: TKM_BUILD_DIR (default: the bundle .device/csi-proof.tar.gz from
# bench/gpu/bundle.sh if present, unpacked to a temp dir; else build/). Python:
# TKM_PYTHON (default python3, else /opt/torch/.venv/bin/python) with torch and
# Triton. --fake: the CPU-only stand-in bench/gpu/fake_workload.py with the
# fixture caches as its kernels (rehearsal of everything but the GPU).
# No private mount namespace or no overlay here (preflight.txt says why): the
# fallback, tkmctl extract --mount-path straight to the mount path (a private
# copy); TKM_PROOF_FORCE_COPY=1 forces it (rehearsal).
# --pack (for the device tool, which brings back at most 8 files): at the end,
# everything in --out/results.tar.gz, with summary.txt, runs.tsv, preflight.txt.
# Everything goes to --out (default $OUT, the device tool's folder, else
# bench/gpu/results/local): runs.tsv, summary.txt/.json, preflight.txt, and per
# part: store-{before,after}.sha256, published-groups/, store-groups/, meta.txt,
# miss-upper.txt, logs. Needs root (mounts).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
here=$src/bench/gpu
fake=0
pack=0
n=3
parts="triton inductor"
out=${OUT:-$here/results/local}
while [[ $# -gt 0 ]]; do
  case $1 in
  --fake) fake=1 ;;
  --n) n=$2; shift ;;
  --parts) parts=$2; shift ;;
  --out) out=$2; shift ;;
  --pack) pack=1 ;;
  *) echo "usage: csi-proof.sh [--fake] [--n N] [--parts \"triton inductor\"] [--out DIR] [--pack]" >&2; exit 2 ;;
  esac
  shift
done
fake_flag=() pack_flag=() # the flags as given, passed on
[[ $fake == 0 ]] || fake_flag=(--fake)
[[ $pack == 0 ]] || pack_flag=(--pack)
mkdir -p "$out"
out=$(cd "$out" && pwd)
export TKM_FIXTURES=${TKM_FIXTURES:-$src/tests/fixtures}
# shellcheck source=tests/e2e/csi/env.sh
source "$src/tests/e2e/csi/env.sh"

# ---- before the namespace: binaries, python, what this machine permits --------
if [[ -z ${TKM_CSI_UNSHARED:-} ]]; then
  if [[ -z ${TKM_BUILD_DIR:-} ]]; then
    if [[ -f $src/.device/csi-proof.tar.gz ]]; then
      b=$(mktemp -d "${TMPDIR:-/tmp}/tkm-bundle-XXXXXX")
      tar -C "$b" -xzf "$src/.device/csi-proof.tar.gz"
      export TKM_BUILD_DIR=$b/csi-proof TKM_PROOF_BUNDLE_TMP=$b
    else
      export TKM_BUILD_DIR=$src/build
    fi
  fi
  for x in cli/tkmctl csi/tkm-csi tests/e2e_csi_testagent tests/e2e_csi_client; do
    [[ -x $TKM_BUILD_DIR/$x ]] || { echo "csi-proof: $TKM_BUILD_DIR/$x missing (bench/gpu/bundle.sh)" >&2; exit 1; }
  done
  if [[ $fake == 1 ]]; then
    export TKM_PYTHON=${TKM_PYTHON:-python3}
  elif [[ -z ${TKM_PYTHON:-} ]]; then
    for p in python3 /opt/torch/.venv/bin/python; do
      if "$p" -c 'import torch, triton' 2>/dev/null; then export TKM_PYTHON=$p; break; fi
    done
    [[ -n ${TKM_PYTHON:-} ]] || { echo "csi-proof: no python with torch and triton (TKM_PYTHON)" >&2; exit 1; }
  fi
  {
    echo "date: $(date -u +%FT%TZ)"
    echo "host: $(uname -a)"
    echo "os: $(. /etc/os-release && echo "$PRETTY_NAME")"
    echo "cpus: $(nproc)"
    echo "tkm: $(cat "$TKM_BUILD_DIR/COMMIT" 2>/dev/null || git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?') $("$TKM_BUILD_DIR/cli/tkmctl" --version)"
    echo "python: $TKM_PYTHON $("$TKM_PYTHON" --version 2>&1)"
    if [[ $fake == 0 ]]; then
      "$TKM_PYTHON" -c 'import torch, triton; print("torch:", torch.__version__, "cuda", torch.version.cuda); print("triton:", triton.__version__); print("gpu:", torch.cuda.get_device_name(0))' || true
      nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader 2>&1 | sed 's/^/nvidia-smi: /' || true
    else
      echo "workload: FAKE (bench/gpu/fake_workload.py, no GPU)"
    fi
    echo "uid: $(id -u); CapEff: $(awk '/^CapEff/ {print $2}' /proc/self/status); uid_map: $(tr -s ' ' </proc/self/uid_map)"
    echo "overlay in /proc/filesystems: $(grep -c overlay /proc/filesystems || true)"
    echo "work fs (${TMPDIR:-/tmp}): $(stat -f -c %T "${TMPDIR:-/tmp}")"
  } >"$out/preflight.txt" 2>&1
  # Can we make a private mount namespace, and an overlay in it (tmpfs upper, a
  # lower on the work fs as the store will be)?
  probe=$(mktemp -d "${TMPDIR:-/tmp}/tkm-probe-XXXXXX")
  mkdir -p "$probe/lower" "$probe/t" && echo x >"$probe/lower/f"
  if ns_err=$(unshare -m --propagation private true 2>&1); then
    echo "unshare -m: ok" >>"$out/preflight.txt"
    if ov_err=$(unshare -m --propagation private sh -c "mount -t tmpfs tkm-probe '$probe/t' &&
        mkdir '$probe/t/u' '$probe/t/w' '$probe/t/m' &&
        mount -t overlay tkm-probe -o lowerdir='$probe/lower',upperdir='$probe/t/u',workdir='$probe/t/w' '$probe/t/m' &&
        echo y >'$probe/t/m/g' && cat '$probe/t/m/f'" 2>&1); then
      echo "overlay mount: ok" >>"$out/preflight.txt"
      mode=overlay
    else
      echo "overlay mount: FAILED: $ov_err" >>"$out/preflight.txt"
      dmesg 2>/dev/null | tail -5 | sed 's/^/dmesg: /' >>"$out/preflight.txt" || true
      mode=copy
    fi
  else
    echo "unshare -m: FAILED: $ns_err" >>"$out/preflight.txt"
    mode=copy
  fi
  rm -rf "$probe"
  if [[ ${TKM_PROOF_FORCE_COPY:-} == 1 ]]; then # rehearsing the fallback
    echo "TKM_PROOF_FORCE_COPY=1: the fallback forced" >>"$out/preflight.txt"
    mode=copy
  fi
  echo "mode: $mode" >>"$out/preflight.txt"
  cat "$out/preflight.txt"
  export TKM_PROOF_MODE=$mode
  if [[ $mode == overlay ]]; then
    exec env TKM_CSI_UNSHARED=1 unshare -m --propagation private bash "$0" --n "$n" --parts "$parts" \
      --out "$out" "${fake_flag[@]}" "${pack_flag[@]}"
  fi
  # copy: no overlay here. The closest real path: tkmctl extract straight to the
  # mount path (the same extraction and the same group rewrite, lib/triton, as a
  # private copy: readOnly "false" without the overlay on top). Said in the summary.
fi
mode=$TKM_PROOF_MODE

# ---- the proof ----------------------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/tkm-gpu-proof-XXXXXX")
chmod 755 "$work"
CSI_TMP=$work/csi
cleanup() {
  # --pack: the device tool brings back at most 8 files from $OUT: everything in
  # one results.tar.gz, beside the summary, the runs and the preflight.
  if [[ $pack == 1 ]]; then
    tar -C "$out" --exclude results.tar.gz -czf "$work/results.tar.gz" . 2>/dev/null || true
    find "$out" -mindepth 1 -maxdepth 1 ! -name summary.txt ! -name runs.tsv ! -name preflight.txt \
      ! -name failed.txt -exec rm -rf {} + 2>/dev/null || true
    mv "$work/results.tar.gz" "$out/" 2>/dev/null || true
  fi
  local m
  while read -r m; do umount -l "$m" 2>/dev/null || true; done < <(awk -v w="$work" 'index($2, w) == 1 { print $2 }' /proc/self/mounts | sort -r)
  if [[ -n ${CSI_TMP:-} && -d $CSI_TMP ]]; then csi_teardown >/dev/null 2>&1 || true; fi
  rm -rf "$work" "${TKM_PROOF_BUNDLE_TMP:-}"
}
trap cleanup EXIT
printf 'part\tmode\trep\trc\twall_s\tstartup_s\tkernels_s\tnew_files\tnew_cubins\thits\tmisses\tpublish_ms\n' >"$out/runs.tsv"

# run_workload PART CACHE_DIR LOG [--miss]: one fresh process; prints
# "rc wall startup kernels hits misses". Part full: also a row in fx.tsv.
run_workload() {
  local part=$1 cache=$2 log=$3 extra=${4:-} ind=$work/torchinductor rc t0 t1 js fx=0
  local tdir=$cache wl=$part
  if [[ $part == full ]]; then # both caches, from the one dir (a pod's volume)
    tdir=$cache/triton ind=$cache/inductor fx=1 wl=inductor
    mkdir -p "$tdir" "$ind" 2>/dev/null || true # a read-only view has them already
  else
    # Inductor's own cache: empty in every run, always at the same path (so no path
    # can differ between runs but TRITON_CACHE_DIR's).
    rm -rf "$ind" && mkdir -p "$ind"
  fi
  local cmd=("$TKM_PYTHON" "$here/${wl}_workload.py")
  [[ $fake == 1 ]] && cmd=("$TKM_PYTHON" "$here/fake_workload.py" "$part")
  js=$log.json
  t0=$(date +%s.%N)
  rc=0
  env TRITON_CACHE_DIR="$tdir" TORCHINDUCTOR_CACHE_DIR="$ind" TORCHINDUCTOR_FX_GRAPH_CACHE="$fx" \
    TORCHINDUCTOR_AUTOGRAD_CACHE="$fx" FAKE_SEED="${FAKE_SEED:-}" FAKE_INDUCTOR_SEED="${FAKE_INDUCTOR_SEED:-}" \
    "${cmd[@]}" ${extra:+"$extra"} --json "$js" >"$log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  [[ $part == full ]] || rm -rf "$ind"
  "$TKM_PYTHON" - "$js" "$rc" "$t0" "$t1" "$part" "$(basename "$log" .log)" "$out/fx.tsv" <<'EOF'
import json, os, sys
js, rc, t0, t1 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
part, run, fx = sys.argv[5], sys.argv[6], sys.argv[7]
try:
    r = json.load(open(js))
except Exception:
    r = {}
print(rc, f"{t1 - t0:.3f}", r.get("startup_s", "nan"), r.get("kernels_s", "nan"),
      r.get("compile_hits", "-"), r.get("compile_misses", "-"))
if part == "full":
    new = not os.path.exists(fx)
    with open(fx, "a") as f:
        if new:
            f.write("part\trun\trc\tfx_hit\tfx_miss\taot_hit\taot_miss\tcompile_hits\tcompile_misses\tmissed_names\n")
        g = lambda k: str(r.get(k, "-"))
        f.write("\t".join([part, run, str(rc), g("fxgraph_cache_hit"), g("fxgraph_cache_miss"),
                           g("autograd_cache_hit"), g("autograd_cache_miss"), g("compile_hits"),
                           g("compile_misses"), ",".join(r.get("missed_names") or []) or "-"]) + "\n")
EOF
}
count() { find "$1" -type f ${2:+-name "$2"} 2>/dev/null | wc -l; }
listing() { (cd "$1" && find . -type f | sort); }
store_sum() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
row() { (IFS=$'\t' && echo "$*") >>"$out/runs.tsv"; }

# A pod: publish (mountPath = MP), bind the target at MP. Sets POD_UPPER.
MP=$work/container/home/ml/.triton/cache
pod_up() { # VOL POD [ATTR...]; POD_UP_MS: publish + bind (or extract), ms
  local vol=$1 pod=$2 t0
  shift 2
  t0=$(date +%s%N)
  local target=$CSI_TMP/pods/$pod/volumes/triton-cache/mount
  if [[ $mode == overlay ]]; then
    csi publish "$vol" "$target" cacheName="$PART" mountPath="$MP" "csi.storage.k8s.io/pod.name=$pod" "$@" \
      >>"$out/$PART/csi-client.log"
    mkdir -p "$MP"
    mount --bind "$target" "$MP"
    POD_UPPER=$CSI_STATE/default/$pod/$vol/upper
  else
    rm -rf "$MP"
    mkdir -p "$(dirname "$MP")"
    "$TKM_BUILD_DIR/cli/tkmctl" extract "$work/oci-$PART" --output "$MP" --mount-path "$MP" >>"$out/$PART/csi-client.log"
    POD_UPPER=$MP # a copy: new kernels are the files the extraction did not write
  fi
  POD_UP_MS=$((($(date +%s%N) - t0) / 1000000))
}
pod_down() { # VOL POD
  local target=$CSI_TMP/pods/$2/volumes/triton-cache/mount
  if [[ $mode == overlay ]]; then
    umount "$MP"
    csi unpublish "$1" "$target" >>"$out/$PART/csi-client.log"
  else
    rm -rf "$MP"
  fi
}
new_in_pod() { # -> "files cubins" written by the workload in the pod's view
  if [[ $mode == overlay ]]; then
    echo "$(count "$POD_UPPER") $(count "$POD_UPPER" '*.cubin')"
  else
    local before=$1
    echo "$(comm -13 "$before" <(listing "$MP") | wc -l) $(comm -13 "$before" <(listing "$MP") | grep -c '\.cubin$' || true)"
  fi
}

proof_part() { # PART
  PART=$1
  local d=$out/$PART i f c
  mkdir -p "$d/logs"
  : >"$d/csi-client.log"
  if [[ $fake == 1 ]]; then
    FAKE_SEED=$work/seed-$PART
    mkdir -p "$FAKE_SEED"
    local fx=triton-3.6.0-cuda-sm90
    [[ $PART != triton ]] && fx=triton-3.6.0-cuda-sm90-inductor-block
    tar -xzf "$TKM_FIXTURES/triton-cache/$fx.tar.gz" -C "$FAKE_SEED" --strip-components=1
    export FAKE_SEED
    if [[ $PART == full ]]; then # Inductor's files: the real fixture's (its triton/ left out)
      FAKE_INDUCTOR_SEED=$work/seed-inductor-cache
      mkdir -p "$FAKE_INDUCTOR_SEED"
      tar -xzf "$TKM_FIXTURES/inductor-cache/torch-2.11.0-cu130-sm90-block.tar.gz" \
        -C "$FAKE_INDUCTOR_SEED" --strip-components=1 --exclude='inductor-cache/triton'
      export FAKE_INDUCTOR_SEED
    fi
  fi
  echo "== $PART: cold runs (empty TRITON_CACHE_DIR)"
  for i in $(seq "$n"); do
    mkdir -p "$work/$PART-cold-$i"
    read -r rc wall st ks h m < <(run_workload "$PART" "$work/$PART-cold-$i" "$d/logs/cold-$i.log")
    row "$PART" cold "$i" "$rc" "$wall" "$st" "$ks" "$(count "$work/$PART-cold-$i")" \
      "$(count "$work/$PART-cold-$i" '*.cubin')" "$h" "$m" -
    [[ $rc == 0 ]] || { echo "csi-proof: cold run $i of $PART failed:" >&2; tail -20 "$d/logs/cold-$i.log" >&2; return 1; }
  done
  local orig=$work/$PART-cold-1
  echo "== $PART: tkmctl build, tkmctl extract into the store"
  if [[ $PART == full ]]; then
    "$TKM_BUILD_DIR/cli/tkmctl" build "$orig/triton" --inductor-dir "$orig/inductor" \
      --output "$work/oci-$PART" --tag "$PART" -o json >"$d/build.json"
    "$TKM_BUILD_DIR/cli/tkmctl" inspect --image-layout "$work/oci-$PART" >"$d/inspect.txt"
  else
    "$TKM_BUILD_DIR/cli/tkmctl" build "$orig" --output "$work/oci-$PART" --tag "$PART" -o json >"$d/build.json"
  fi
  local store=$work/store/$PART
  mkdir -p "$work/store"
  "$TKM_BUILD_DIR/cli/tkmctl" extract "$work/oci-$PART" --output "$store" -o json >"$d/extract.json"
  store_sum "$store" >"$d/store-before.sha256"
  (cd "$orig" && find . -type f ! -name '__grp__*' -print0 | sort -z | xargs -0 sha256sum) >"$work/orig.sha"
  (cd "$store" && find . -type f ! -name '__grp__*' -print0 | sort -z | xargs -0 sha256sum) >"$work/store.sha"
  cmp -s "$work/orig.sha" "$work/store.sha" || { echo "csi-proof: the store differs from the original cache" >&2; diff "$work/orig.sha" "$work/store.sha" | head >&2; return 1; }
  if [[ $mode == overlay ]]; then
    mkdir -p "$CSI_TMP/store" "$CSI_TMP/run" "$CSI_TMP/pods"
    mountpoint -q "$CSI_TMP/run" || mount -t tmpfs -o mode=0755,size=512m tkm-proof-run "$CSI_TMP/run"
    export CSI_TMP CSI_STORE=$store CSI_STATE=$CSI_TMP/run/tkm/caches CSI_SOCK=$CSI_TMP/plugins/csi.sock \
      CSI_AGENT_SOCK=$CSI_TMP/agent/agent.sock CSI_REG_DIR=$CSI_TMP/plugins_registry
    CSI_AGENT_ARGS=(--cache "$PART")
    csi_agent_start --cache "$PART"
    csi_driver_start -v warn
  fi

  echo "== $PART: $n rounds of warm-local and tkm-mounted (alternating order)"
  local before=$work/before.list
  for i in $(seq "$n"); do
    local order="warm tkm"
    ((i % 2)) || order="tkm warm"
    for what in $order; do
      if [[ $what == warm ]]; then
        listing "$orig" >"$before"
        read -r rc wall st ks h m < <(run_workload "$PART" "$orig" "$d/logs/warm-$i.log")
        comm -13 "$before" <(listing "$orig") >"$d/logs/new-warm-$i.txt"
        f=$(wc -l <"$d/logs/new-warm-$i.txt")
        c=$(grep -c '\.cubin$' "$d/logs/new-warm-$i.txt" || true)
        row "$PART" warm-local "$i" "$rc" "$wall" "$st" "$ks" "$f" "$c" "$h" "$m" -
      else
        pod_up "vol-$PART-$i" "pod-$PART-$i"
        listing "$MP" >"$before"
        if [[ $i == 1 ]]; then # what the pod sees: its group files, next to the store's
          (cd "$MP" && find . -name '__grp__*.json' | while read -r g; do
            mkdir -p "$d/published-groups/$(dirname "$g")" "$d/store-groups/$(dirname "$g")"
            cp "$g" "$d/published-groups/$g"
            cp "$store/$g" "$d/store-groups/$g"
          done)
          {
            echo "mount_path $MP"
            echo "store $store"
            echo "mode $mode"
            [[ $mode == overlay ]] && echo "overlay $(findmnt -n -o SOURCE,FSTYPE,OPTIONS "$MP")"
          } >"$d/meta.txt"
        fi
        read -r rc wall st ks h m < <(run_workload "$PART" "$MP" "$d/logs/tkm-$i.log")
        read -r f c < <(new_in_pod "$before")
        if [[ $mode == overlay ]]; then (cd "$POD_UPPER" && find . -type f | sort) >"$d/logs/new-tkm-$i.txt"; fi
        row "$PART" tkm-mounted "$i" "$rc" "$wall" "$st" "$ks" "$f" "$c" "$h" "$m" "$POD_UP_MS"
        pod_down "vol-$PART-$i" "pod-$PART-$i"
      fi
      [[ $rc == 0 ]] || { echo "csi-proof: $what run $i of $PART failed:" >&2; tail -20 "$d/logs/$what-$i.log" >&2; return 1; }
    done
  done

  echo "== $PART: a kernel the cache lacks (--miss) in a fresh pod"
  pod_up "vol-$PART-miss" "pod-$PART-miss"
  listing "$MP" >"$before"
  read -r rc wall st ks h m < <(run_workload "$PART" "$MP" "$d/logs/miss.log" --miss)
  read -r f c < <(new_in_pod "$before")
  row "$PART" tkm-miss 1 "$rc" "$wall" "$st" "$ks" "$f" "$c" "$h" "$m" "$POD_UP_MS"
  if [[ $mode == overlay ]]; then
    (cd "$POD_UPPER" && find . -type f | sort) >"$d/miss-upper.txt"
  else
    comm -13 "$before" <(listing "$MP") >"$d/miss-upper.txt"
  fi
  pod_down "vol-$PART-miss" "pod-$PART-miss"
  if [[ $mode == overlay && $PART == triton ]]; then
    echo "== $PART: the same miss under readOnly \"true\" (strict: expected to fail)"
    pod_up "vol-$PART-strict" "pod-$PART-strict" readOnly=true
    read -r rc wall st ks h m < <(run_workload "$PART" "$MP" "$d/logs/strict-miss.log" --miss)
    row "$PART" strict-miss 1 "$rc" "$wall" "$st" "$ks" 0 0 "$h" "$m" "$POD_UP_MS"
    grep -m1 -o 'Read-only file system' "$d/logs/strict-miss.log" >"$d/strict-miss.txt" || echo "no EROFS in the log" >"$d/strict-miss.txt"
    pod_down "vol-$PART-strict" "pod-$PART-strict"
  fi
  store_sum "$store" >"$d/store-after.sha256"
  if [[ $mode == overlay ]]; then
    echo "mounts left: $(csi_mounts | wc -l)" >>"$d/meta.txt"
    cp "$CSI_TMP/csi.log" "$d/logs/tkm-csi.log"
    cp "$CSI_TMP/agent.log" "$d/logs/agent.log"
    csi_driver_stop
    csi_agent_stop
    rm -f "$CSI_TMP/csi.log" "$CSI_TMP/agent.log"
  fi
  rm -rf "$work/$PART"-cold-*
}

# Each part in a subshell of its own (errexit on inside it): a part that fails
# does not keep the next from running. The summary after each part: a run cut
# short still leaves the parts it finished.
failed=()
for p in $parts; do
  set +e
  (
    set -e
    trap 'csi_driver_stop; csi_agent_stop' EXIT
    proof_part "$p"
  )
  rc=$?
  set -e
  if [[ $rc != 0 ]]; then
    failed+=("$p")
    echo "csi-proof: part $p FAILED (rc $rc)" | tee -a "$out/failed.txt" >&2
  fi
  "$TKM_PYTHON" "$here/summary.py" "$out" "$mode" "${fake_flag[@]}" >"$out/summary.txt"
done
cat "$out/summary.txt"
[[ ${#failed[@]} == 0 ]]
# Exit 1 if a verdict other than the 5% failed (a cubin compiled, the miss, the store).
"$TKM_PYTHON" "$here/summary.py" "$out" "$mode" "${fake_flag[@]}" --check >/dev/null
