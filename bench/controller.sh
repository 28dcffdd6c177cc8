#!/usr/bin/env bash
# bench/controller.sh - tkm-controller against upstream GKM's operator
# (webhooks off), one after the other on one private control plane, fed by the
# same simulated agents (bench_simagents) on the same Node objects.
#
# Usage: bench/controller.sh [small|large]      (default small)
#   small  NODES=1000 CACHES=100   goal: all Ready within 5 s of the last node
#                                  status, RSS < 15 MiB
#   large  NODES=5000 CACHES=1000  goal: all Ready within 60 s; takes long and
#                                  needs memory: 5 million node status entries,
#                                  ~3 GB in etcd and, measured, ~6 KB of
#                                  kube-apiserver memory per entry (~30 GB):
#                                  not for a 2-core, 24 GiB machine. Scaled
#                                  runs that fit one: NODES=5000 CACHES=200
#                                  and NODES=1000 CACHES=1000 (1 million each)
#   env: NODES, CACHES (override the preset), INCOMPATIBLE (fraction of nodes
#        whose GPU fits no cache; default 0), VARIANTS (tkm: 1..3, the image is
#        an index of that many variants (sm90, sm80, sm100, pushed here; the GKM
#        side gets the same image) and the nodes use them in turn, naming their
#        digests, as bench_simagents --variants --variant-digests; default 0:
#        node statuses without variants), CONCURRENCY (simulator requests in
#        flight; default 32), TIMEOUT (s to wait for Ready after the last
#        write; default 300 small, 900 large), SIDES ("tkm gkm"), SETTLE (s; default 5)
#        TKM_BUILD_DIR (default <repo>/build), TKM_CONTROLLER (default
#        $TKM_BUILD_DIR/controller/tkm-controller), TKM_CONTROLLER_ARGS (more
#        flags, e.g. "-v 1"), GKM_MIRROR (a clone of github.com/redhat-et/GKM,
#        built once by bench/gkm-build.sh) or GKM_BIN_DIR (a directory with
#        gkm-agent, gkm-operator, crds/): one is required unless SIDES=tkm;
#        BENCH_DIR (default a temp dir), KEEP=1 (leave it up)
#
# Per side:
# A TritonKernelCacheNodeStatus lists at most 512 caches (the CRD's
# status.caches maxProperties; one object per node and namespace, as the agent
# writes them), so more caches are spread over several namespaces: bench-ctrl,
# bench-ctrl-1, ... (CACHES / 512 rounded up, caches shared out evenly), and
# every simulated node writes one node status object per namespace, all at
# once (one simulator per namespace); the waiters watch every namespace.
#   1. start the controller:
#        tkm-controller --kubeconfig K --namespace tkm-system --state-dir D
#          --metrics-bind-address 0 --health-probe-bind-address 0
#        gkm-operator (ENABLE_WEBHOOKS=false, NO_GPU=true,
#          --metrics-bind-address=0 --health-probe-bind-address=0)
#      on CACHES caches (tkm: TritonKernelCache in bench-ctrl, image built from
#      the real fixture and pushed to the local registry, signaturePolicy
#      Disabled; GKM: GKMCache in bench-gkm with the annotations its webhook
#      would write) and NODES Node objects with empty node status objects
#      (bench_simagents setup), and wait until every cache is pinned (tkm:
#      status.resolvedDigest; GKM: status.resolvedDigest and pvcOwner);
#   2. scrape apiserver_request_total from the apiserver's /metrics;
#   3. start `bench_simagents wait` (one list + watch of the caches), then
#      `bench_simagents write`: one server-side apply on /status per node
#      listing every cache at the pinned digest (tkm: TritonKernelCacheNodeStatus,
#      field manager tkm-agent, owned by the Node; GKM: GKMCacheNode with
#      per-cache PVC condition Extracted and counts, as GKM's agent fills it);
#   4. Ready latency = when the waiter saw the last cache Ready (tkm: condition
#      Ready=True and counts.nodes >= NODES; GKM: counts.nodeCnt >= NODES and
#      condition Extracted, Running or Error) minus when the simulator's last
#      write returned;
#   5. scrape /metrics again after SETTLE s; controller VmRSS/VmHWM;
#   6. one change: node sim-00000 re-reports every cache incompatible (one
#      apply; compatible when INCOMPATIBLE > 0 made it incompatible); writes to the caches within CHANGE_WAIT (10) s, per cache, are
#      the cost of one change (goal <= 2); stop the controller.
# Request counts are deltas over steps 2-5, by verb/resource/subresource; the
# simulator's NODES applies and the waiter's list and watch are subtracted
# from the totals. Writes = POST/PUT/PATCH/APPLY/DELETE on the cache resource
# (any subresource). While NODES statuses arrive over tens of seconds each
# cache changes many times, so that count is shown per cache without a goal;
# the goal "<= 2 writes per cache per change" is checked on step 6.
# Goals (the issue): small: Ready within 5 s, RSS < 15 MiB; large: Ready within
# 60 s; both: RSS <= 0.2x GKM's operator, <= 2 writes per cache. Exits 1 when
# one is missed or the tkm side cannot run.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
BENCH_NAME=controller
preset=${1:-small}
case $preset in
  small) NODES=${NODES:-1000} CACHES=${CACHES:-100} goal_s=5 goal_rss=15 TIMEOUT=${TIMEOUT:-300} ;;
  large) NODES=${NODES:-5000} CACHES=${CACHES:-1000} goal_s=60 goal_rss='' TIMEOUT=${TIMEOUT:-900}
    # 5000 node statuses of 1000 entries, each written twice, exceed etcd's
    # default 2 GiB backend quota (etcdserver: mvcc: database space exceeded).
    export TKM_ETCD_QUOTA=${TKM_ETCD_QUOTA:-8589934592} ;;
  *) sed -n '2,54p' "$0" >&2; exit 2 ;;
esac
INCOMPATIBLE=${INCOMPATIBLE:-0} CONCURRENCY=${CONCURRENCY:-32} SETTLE=${SETTLE:-5} VARIANTS=${VARIANTS:-0}
CHANGE_WAIT=${CHANGE_WAIT:-10}
SIDES=${SIDES:-tkm gkm}
# A node status object lists at most max_caches caches (the CRD's status.caches
# maxProperties; more would be rejected with 422): the tkm side spreads its
# caches over tkm_nsn namespaces, tkm_ns[k] holding tkm_cn[k] of them.
max_caches=$(awk '/^ *caches:$/ { c = 1 } c && /maxProperties:/ { print $2; exit }' \
  "$here/../crds/tkm.io_tritonkernelcachenodestatuses.yaml")
[[ $max_caches =~ ^[0-9]+$ ]] || { echo "controller: no status.caches maxProperties in crds/" >&2; exit 2; }
tkm_nsn=$(((CACHES + max_caches - 1) / max_caches))
tkm_ns=() tkm_cn=()
for ((k = 0; k < tkm_nsn; k++)); do
  if ((k)); then tkm_ns+=("bench-ctrl-$k"); else tkm_ns+=(bench-ctrl); fi
  tkm_cn+=($((CACHES / tkm_nsn + (k < CACHES % tkm_nsn))))
done
TKM_BUILD_DIR=${TKM_BUILD_DIR:-$repo/build}
TKM_CONTROLLER=${TKM_CONTROLLER:-$TKM_BUILD_DIR/controller/tkm-controller}
read -ra ctrl_args <<<"${TKM_CONTROLLER_ARGS:-}"
# shellcheck source=bench/lib-daemons.sh
source "$here/lib-daemons.sh"

for t in jq curl; do command -v "$t" >/dev/null || bench_die "$t is needed"; done
sim=$TKM_BUILD_DIR/bench/bench_simagents
[[ -x $sim && -x $TKM_BUILD_DIR/cli/tkmctl ]] ||
  bench_die "missing $sim or $TKM_BUILD_DIR/cli/tkmctl (build first: ninja -C $TKM_BUILD_DIR)"
tkm_ok=0 tkm_why="not run (SIDES=$SIDES)"
if [[ " $SIDES " == *" tkm "* ]]; then
  tkm_ok=1 tkm_why=
  if [[ ! -x $TKM_CONTROLLER ]]; then
    tkm_ok=0 tkm_why="tkm-controller not found at $TKM_CONTROLLER, build it first (ninja -C $TKM_BUILD_DIR)"
    echo "controller: $tkm_why; running the GKM side only" >&2
  fi
fi
gkm=''
[[ " $SIDES " != *" gkm "* ]] || gkm=$(bench_gkm)

bench_workdir ctrl
bench_cluster_up "$work/cluster"
bench_crds "$repo/crds/" ${gkm:+"$gkm/crds/"}
for ns in tkm-system "${tkm_ns[@]}" bench-gkm; do kubectl create ns "$ns" >/dev/null; done
# The caches below switch signature checks off for themselves (as GKM verifies nothing): the
# admin allows it (signatureFloor, issue 23; older builds ignore the key). The local registry is
# allowed explicitly (registry reach, issue 23).
bench_reach_config --from-literal=signatureFloor=Disabled
# variant_index WORK V: an index of the first V of sm90, sm80, sm100 (bench_simagents' order; sm80
# and sm100 derived from the fixture bench_image extracted, as bench/variants.sh derives sm80) pushed
# as bench/cache:variants-V: "IMAGE INDEX_DIGEST D1,D2,...". The nodes name these digests: the
# controller takes each variant's target from the index and counts a digest it lacks as not caught up.
variant_index() {
  local work=$1 v=$2 fx arch dir out ds=() img=$TKM_REGISTRY/bench/cache:variants-$2
  fx=$work/fx/$(ls "$work/fx")
  for arch in 90 80 100; do
    ((${#ds[@]} < v)) || break
    dir=$fx
    if [[ $arch != 90 ]]; then
      dir=$work/c$arch
      python3 "$repo/tests/e2e/cache_retarget.py" "$fx" "$dir" "$arch" >&2 || bench_die "cache_retarget.py $arch"
    fi
    out=$("$TKM_BUILD_DIR/cli/tkmctl" build "$dir" --push "$img" --add-variant -o json) ||
      bench_die "tkmctl build --add-variant (sm$arch) failed"
    ds+=("$(jq -r .variant.digest <<<"$out")")
  done
  echo "$img $(jq -r .pushedIndex <<<"$out") $(IFS=,; echo "${ds[*]}")"
}
read -r image digest < <(bench_image "$work")
vdigests=
((VARIANTS == 0)) || read -r image digest vdigests < <(variant_index "$work" "$VARIANTS")
[[ $digest == sha256:* ]] || bench_die "no digest from tkmctl build --push"
nsnote=
((tkm_nsn == 1)) || nsnote=" (tkm: in $tkm_nsn namespaces, at most $max_caches caches per node status)"
bench_log "cache image $image@$digest; $NODES nodes x $CACHES caches$nsnote"

# ---- objects ----------------------------------------------------------------------
make_caches() { # SIDE: CACHES caches, created through one kubectl create of a List
  local i k items=()
  if [[ $1 == tkm ]]; then
    for ((k = 0; k < tkm_nsn; k++)); do
      for ((i = 0; i < tkm_cn[k]; i++)); do
        items+=("{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCache\",\"metadata\":{\"name\":\"$(printf 'bench-%05d' "$i")\",\"namespace\":\"${tkm_ns[k]}\"},\"spec\":{\"cacheImage\":\"$image\",\"signaturePolicy\":{\"mode\":\"Disabled\"}}}")
      done
    done
  fi
  for i in $(seq 0 $((CACHES - 1))); do
    if [[ $1 == tkm ]]; then
      break
    else
      items+=("{\"apiVersion\":\"gkm.io/v1alpha1\",\"kind\":\"GKMCache\",\"metadata\":{\"name\":\"$(printf 'bench-%05d' "$i")\",\"namespace\":\"bench-gkm\",\"annotations\":{\"gkm.io/resolvedDigest\":\"$digest\",\"gkm.io/cache-size-bytes\":\"758102\"}},\"spec\":{\"image\":\"$image\"}}")
    fi
  done
  local IFS=,
  echo "{\"apiVersion\":\"v1\",\"kind\":\"List\",\"items\":[${items[*]}]}" >"$work/$1-caches.json"
  kubectl create -f "$work/$1-caches.json" >/dev/null
}
t=$(bench_now_ms)
for ns in "${tkm_ns[@]}"; do # (the Nodes are created once; later namespaces find them)
  "$sim" setup --nodes "$NODES" --kind tkm --ns "$ns" --concurrency "$CONCURRENCY" >/dev/null ||
    bench_die "bench_simagents setup (tkm, $ns) failed"
done
if [[ -n $gkm ]]; then
  "$sim" setup --nodes "$NODES" --kind gkm --ns bench-gkm --concurrency "$CONCURRENCY" >/dev/null ||
    bench_die "bench_simagents setup (gkm) failed"
fi
bench_log "$NODES Nodes and their empty node status objects created in $((($(bench_now_ms) - t) / 1000)) s"

metrics() { # OUT: apiserver_request_total summed by verb resource subresource
  kubectl get --raw /metrics | awk '
    /^apiserver_request_total\{/ {
      v = r = s = ""
      if (match($0, /verb="[^"]*"/)) v = substr($0, RSTART + 6, RLENGTH - 7)
      if (match($0, /resource="[^"]*"/)) r = substr($0, RSTART + 10, RLENGTH - 11)
      if (match($0, /subresource="[^"]*"/)) s = substr($0, RSTART + 13, RLENGTH - 14)
      n[v " " (r == "" ? "-" : r) " " (s == "" ? "-" : s)] += $NF
    }
    END { for (k in n) print k, n[k] }' | sort >"$1"
}
pinned() { # SIDE: number of caches the controller has pinned
  if [[ $1 == tkm ]]; then
    kubectl get tritonkernelcaches -A -o json |
      jq --arg d "$digest" '[.items[] | select((.metadata.namespace | startswith("bench-ctrl")) and .status.resolvedDigest == $d)] | length'
  else
    kubectl -n bench-gkm get gkmcaches -o json |
      jq --arg d "$digest" '[.items[] | select(.status.resolvedDigest == $d and .status.pvcOwner == "Agent")] | length'
  fi
}

declare -A R
run_side() { # SIDE
  local s=$1 pid t0 n res node_res
  if [[ $s == tkm ]]; then
    res=tritonkernelcaches node_res=tritonkernelcachenodestatuses
    mkdir -p "$work/tkm-state"
    "$TKM_CONTROLLER" --kubeconfig "$KUBECONFIG" --namespace tkm-system --state-dir "$work/tkm-state" \
      --metrics-bind-address 0 --health-probe-bind-address 0 "${ctrl_args[@]}" >"$work/tkm-controller.log" 2>&1 &
    pid=$!
    disown "$pid"
  else
    res=gkmcaches node_res=gkmcachenodes
    (cd "$work" && ENABLE_WEBHOOKS=false NO_GPU=true exec "$gkm/gkm-operator" \
      --metrics-bind-address=0 --health-probe-bind-address=0 >"$work/gkm-operator.log" 2>&1) &
    pid=$!
    disown "$pid"
  fi
  pids+=("$pid")
  make_caches "$s"
  t0=$(bench_now_ms)
  while :; do
    kill -0 "$pid" 2>/dev/null || { tail -15 "$work/$s-"*.log >&2; echo "$s controller exited (log in $work)" >&2; return 1; }
    n=$(pinned "$s" || echo 0)
    ((n >= CACHES)) && break
    (($(bench_now_ms) - t0 > TIMEOUT * 1000)) && { echo "$s: only $n/$CACHES caches pinned after $TIMEOUT s" >&2; return 1; }
    sleep 1
  done
  R[$s.pin_s]=$(awk -v ms=$(($(bench_now_ms) - t0)) 'BEGIN { printf "%.1f", ms / 1000 }')
  bench_log "$s: $CACHES caches pinned after ${R[$s.pin_s]} s; settling $SETTLE s"
  sleep "$SETTLE"
  metrics "$work/$s.m0"
  # The namespaces and their cache counts of this side.
  local -a nss=(bench-gkm) cns=("$CACHES") wpids=() spids=()
  [[ $s == gkm ]] || nss=("${tkm_ns[@]}") cns=("${tkm_cn[@]}")
  local k kn=${#nss[@]} bad=0
  # One waiter per namespace; none has a timeout of its own: TIMEOUT counts from the last write.
  for ((k = 0; k < kn; k++)); do
    "$sim" wait --nodes "$NODES" --caches "${cns[k]}" --kind "$s" --ns "${nss[k]}" \
      --timeout 0 >"$work/$s.wait.$k" 2>"$work/$s.wait.err.$k" &
    wpids+=($!)
  done
  pids+=("${wpids[@]}")
  sleep 2
  local cpu0
  cpu0=$(bench_cpu_ms "$pid")
  bench_log "$s: writing $NODES node statuses of $CACHES caches${nsnote:+ ($kn per node, one simulator per namespace)}"
  for ((k = 0; k < kn; k++)); do
    "$sim" write --nodes "$NODES" --caches "${cns[k]}" --kind "$s" --ns "${nss[k]}" \
      --digest "$digest" --incompatible "$INCOMPATIBLE" --concurrency "$CONCURRENCY" \
      --variants "$([[ $s == tkm ]] && echo "$VARIANTS" || echo 0)" ${vdigests:+--variant-digests "$vdigests"} >"$work/$s.write.$k" &
    spids+=($!)
  done
  for ((k = 0; k < kn; k++)); do wait "${spids[k]}" || bad=1; done
  ((!bad)) || { cat "$work/$s.write".* >&2; echo "$s: bench_simagents write failed" >&2; return 1; }
  # All namespaces as one: the first write, the last reply, the slowest request.
  jq -s '{first_write_ms: (map(.first_write_ms) | min), last_write_ms: (map(.last_write_ms) | max),
      max_request_ms: (map(.max_request_ms) | max)} | .write_s = ((.last_write_ms - .first_write_ms) / 1000)' \
    "$work/$s.write".* >"$work/$s.write"
  bench_log "$s: writes done in $(jq -r .write_s "$work/$s.write") s (slowest request $(jq -r .max_request_ms "$work/$s.write") ms); waiting for all caches Ready (timeout $TIMEOUT s)"
  local tw
  tw=$(jq -r .last_write_ms "$work/$s.write")
  local running=1
  while ((running)) && (($(bench_now_ms) - tw < TIMEOUT * 1000)); do
    running=0
    for k in "${wpids[@]}"; do kill -0 "$k" 2>/dev/null && running=1; done
    ((!running)) || sleep 0.2
  done
  # All ready when every waiter saw its namespace's caches all Ready: the latest of their times.
  if (($(grep -l '"all_ready_ms"' "$work/$s.wait."[0-9]* | wc -l) == kn)); then # (jq -e on an empty file exits 0)
    jq -s '{all_ready_ms: (map(.all_ready_ms) | max)}' "$work/$s.wait."[0-9]* >"$work/$s.wait"
    R[$s.ready_s]=$(jq -r --argjson t "$tw" '(.all_ready_ms - $t) / 1000' "$work/$s.wait")
  else
    for k in "${wpids[@]}"; do bench_stop "$k"; done
    R[$s.ready_s]="timeout($(for ((k = 0; k < kn; k++)); do
      sed -n 's/.*wait: \([0-9]*\)\/.*/\1/p' "$work/$s.wait.err.$k" | tail -1
    done | awk '{ n += $1 } END { print n + 0 }')/$CACHES)"
  fi
  R[$s.write_s]=$(jq -r .write_s "$work/$s.write")
  # The controller's CPU from the simulator's first write to all Ready: its aggregation's cost,
  # which the machine's load does not change (its latencies it does).
  R[$s.cpu_s]=- R[$s.cpu_ev]=-
  if [[ ${R[$s.ready_s]} =~ ^[0-9.]+$ ]] && kill -0 "$pid" 2>/dev/null; then
    read -r "R[$s.cpu_s]" "R[$s.cpu_ev]" < <(awk -v a="$cpu0" -v b="$(bench_cpu_ms "$pid")" -v n="$NODES" \
      'BEGIN { printf "%.2f %.2f\n", (b - a) / 1000, (b - a) / n }')
  fi
  sleep "$SETTLE"
  # Where the time went (tkm): the controller's last "caught up" line (its queue
  # drained) SETTLE s after all were Ready, if its last node status event came
  # after the simulator's first write, gives when it saw the last node status
  # event and when its last status write was answered (wall clock, ms, as the
  # simulator's).
  R[$s.lag_in]=- R[$s.lag_work]=- R[$s.lag_out]=-
  if [[ $s == tkm && ${R[$s.ready_s]} =~ ^[0-9.]+$ ]]; then
    local ar cu
    ar=$(jq -r .all_ready_ms "$work/$s.wait")
    cu=$(sed -n 's/.*caught up: [0-9]* status writes, the last answered at \([0-9]*\) ms; last node status event at \([0-9]*\) ms.*/\1 \2/p' \
      "$work/tkm-controller.log" | awk -v t="$(jq -r .first_write_ms "$work/$s.write")" '$2 >= t { l = $0 } END { print l }')
    if [[ -n $cu ]]; then
      read -r "R[$s.lag_in]" "R[$s.lag_work]" "R[$s.lag_out]" < <(awk -v tw="$tw" -v ar="$ar" -v cu="$cu" \
        'BEGIN { split(cu, a, " "); printf "%.3f %.3f %.3f\n", (a[2] - tw) / 1000, (a[1] - a[2]) / 1000, (ar - a[1]) / 1000 }')
    fi
  fi
  metrics "$work/$s.m1"
  if kill -0 "$pid" 2>/dev/null; then
    read -r "R[$s.rss]" "R[$s.hwm]" < <(bench_rss "$pid")
    read -r "R[$s.anon]" "R[$s.file]" < <(bench_rss_split "$pid")
    cp "/proc/$pid/smaps" "$work/$s.smaps" 2>/dev/null || true # per-mapping RSS, kept with KEEP=1
  else
    R[$s.rss]=- R[$s.hwm]=- R[$s.anon]=- R[$s.file]=-
    echo "$s: the controller exited during the run (log in $work)" >&2
  fi
  # One change after everything settled: node sim-00000 re-reports every cache
  # of the first namespace as incompatible (one node status write touching
  # each of them); the writes to the caches in the next CHANGE_WAIT s are that
  # change's cost, per cache of that namespace.
  # (With INCOMPATIBLE > 0 node sim-00000 already is incompatible: it turns compatible.)
  metrics "$work/$s.m2"
  R[$s.change_caches]=${cns[0]}
  "$sim" write --nodes 1 --caches "${cns[0]}" --kind "$s" --ns "${nss[0]}" --digest "$digest" \
    --variants "$([[ $s == tkm ]] && echo "$VARIANTS" || echo 0)" ${vdigests:+--variant-digests "$vdigests"} --incompatible "$(awk -v f="$INCOMPATIBLE" 'BEGIN { print (f > 0 ? 0 : 1) }')" >/dev/null ||
    echo "$s: the single-change write failed" >&2
  sleep "$CHANGE_WAIT"
  metrics "$work/$s.m3"
  R[$s.change_writes]=$(awk -v r="$res" 'NR == FNR { a[$1 " " $2 " " $3] = $4; next }
    $2 == r && $1 ~ /^(POST|PUT|PATCH|APPLY|DELETE)$/ { n += $4 - a[$1 " " $2 " " $3] }
    END { print n + 0 }' "$work/$s.m2" "$work/$s.m3")
  bench_stop "$pid"
  # Deltas; the simulator's applies and the waiter's list+watch taken out.
  awk 'NR == FNR { a[$1 " " $2 " " $3] = $4; next }
    { d = $4 - a[$1 " " $2 " " $3]; if (d > 0) print $1, $2, $3, d }' "$work/$s.m0" "$work/$s.m1" >"$work/$s.delta"
  R[$s.writes]=$(awk -v r="$res" '$2 == r && $1 ~ /^(POST|PUT|PATCH|APPLY|DELETE)$/ { n += $4 } END { print n + 0 }' "$work/$s.delta")
  R[$s.reqs]=$(awk -v nr="$node_res" -v r="$res" -v nodes="$((NODES * kn))" -v waiters="$kn" '
    $2 != "-" { n += $4 }
    $1 == "APPLY" && $2 == nr && $3 == "status" { sim += $4 < nodes ? $4 : nodes }
    ($1 == "LIST" || $1 == "WATCH") && $2 == r { sim += $4 < waiters ? $4 : waiters }
    END { print n - sim }' "$work/$s.delta")
  bench_log "$s: Ready ${R[$s.ready_s]} s after the last write; RSS ${R[$s.rss]} KiB; ${R[$s.writes]} writes to $res"
}

for s in $SIDES; do
  if [[ $s == tkm ]] && ((!tkm_ok)); then continue; fi
  if ! run_side "$s"; then
    [[ $s == tkm ]] || bench_die "the GKM side failed"
    tkm_ok=0 tkm_why="the tkm side failed (log: $work/tkm-controller.log)"
  fi
done
for k in pin_s ready_s write_s cpu_s cpu_ev rss hwm anon file writes reqs change_writes lag_in lag_work lag_out; do
  ((tkm_ok)) || R[tkm.$k]=-
  [[ -n ${R[gkm.$k]:-} ]] || R[gkm.$k]=-
done

# ---- report --------------------------------------------------------------------------
per() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-") print "-"; else printf "%.2f", a / b }'; }
echo
echo "controller benchmark ($preset): $NODES nodes x $CACHES caches, incompatible fraction $INCOMPATIBLE, $(nproc) CPUs"
vs="alone (SIDES=$SIDES)"
[[ -z $gkm ]] || vs="vs GKM $(cut -c1-8 "$gkm/COMMIT" 2>/dev/null || true) gkm-operator (webhooks off)"
echo "tkm-controller $vs; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-54s %14s %14s %8s  %s\n' metric tkm-controller gkm-operator tkm/gkm goal
printf '%-54s %14s %14s\n' "caches created -> all pinned (s)" "${R[tkm.pin_s]}" "${R[gkm.pin_s]}"
printf '%-54s %14s %14s\n' "simulator: $NODES status applies took (s)" "${R[tkm.write_s]}" "${R[gkm.write_s]}"
printf '%-54s %14s %14s %8s  %s\n' "last node status -> all caches Ready (s)" "${R[tkm.ready_s]}" "${R[gkm.ready_s]}" \
  "$(bench_ratio "${R[tkm.ready_s]}" "${R[gkm.ready_s]}")" "<= $goal_s s"
printf '%-54s %14s\n' "  last node status -> seen by the controller (apiserver)" "${R[tkm.lag_in]}"
printf '%-54s %14s\n' "  -> its last status write answered (controller)" "${R[tkm.lag_work]}"
printf '%-54s %14s\n' "  -> seen Ready by the waiter (apiserver)" "${R[tkm.lag_out]}"
printf '%-54s %14s %14s %8s\n' "controller CPU, first node status -> all Ready (s)" "${R[tkm.cpu_s]}" "${R[gkm.cpu_s]}" \
  "$(bench_ratio "${R[tkm.cpu_s]}" "${R[gkm.cpu_s]}")"
printf '%-54s %14s %14s\n' "  per node status (ms)" "${R[tkm.cpu_ev]}" "${R[gkm.cpu_ev]}"
printf '%-54s %14s %14s %8s  %s\n' "controller RSS at the end, VmRSS as ps shows (MiB)" "$(bench_mib "${R[tkm.rss]}")" "$(bench_mib "${R[gkm.rss]}")" \
  "$(bench_ratio "${R[tkm.rss]}" "${R[gkm.rss]}")" "${goal_rss:+< $goal_rss MiB, }<= 0.2x"
printf '%-54s %14s %14s %8s\n' "  anonymous (heap, stacks) (MiB)" "$(bench_mib "${R[tkm.anon]}")" "$(bench_mib "${R[gkm.anon]}")" \
  "$(bench_ratio "${R[tkm.anon]}" "${R[gkm.anon]}")"
printf '%-54s %14s %14s %8s\n' "  file-backed (binary, shared libraries) (MiB)" "$(bench_mib "${R[tkm.file]}")" \
  "$(bench_mib "${R[gkm.file]}")" "$(bench_ratio "${R[tkm.file]}" "${R[gkm.file]}")"
printf '%-54s %14s %14s %8s\n' "  peak VmHWM (MiB)" "$(bench_mib "${R[tkm.hwm]}")" "$(bench_mib "${R[gkm.hwm]}")" \
  "$(bench_ratio "${R[tkm.hwm]}" "${R[gkm.hwm]}")"
printf '%-54s %14s %14s %8s\n' "writes to the caches while $NODES nodes report, per cache" "$(per "${R[tkm.writes]}" "$CACHES")" \
  "$(per "${R[gkm.writes]}" "$CACHES")" "$(bench_ratio "${R[tkm.writes]}" "${R[gkm.writes]}")"
printf '%-54s %14s %14s %8s  %s\n' "writes per cache for one change (1 node, all caches)" "$(per "${R[tkm.change_writes]}" "${R[tkm.change_caches]:-$CACHES}")" \
  "$(per "${R[gkm.change_writes]}" "$CACHES")" "$(bench_ratio "${R[tkm.change_writes]}" "${R[gkm.change_writes]}")" "<= 2"
printf '%-54s %14s %14s %8s\n' "apiserver requests, not the simulator's, per cache" "$(per "${R[tkm.reqs]}" "$CACHES")" \
  "$(per "${R[gkm.reqs]}" "$CACHES")" "$(bench_ratio "${R[tkm.reqs]}" "${R[gkm.reqs]}")"
for s in tkm gkm; do
  [[ -s $work/$s.delta ]] || continue
  echo "apiserver_request_total deltas, $s side (verb resource subresource count):"
  sort -k4,4nr "$work/$s.delta" | head -25 | awk '{ printf "  %-7s %-34s %-10s %8d\n", $1, $2, $3, $4 }'
done

if ((!tkm_ok)); then
  echo "goal NOT checked: $tkm_why"
  exit 1
fi
ok=1
num() { [[ $1 =~ ^[0-9.]+$ ]]; }
num "${R[tkm.ready_s]}" && awk -v a="${R[tkm.ready_s]}" -v g="$goal_s" 'BEGIN { exit !(a <= g) }' || ok=0
[[ -z $goal_rss ]] || { num "${R[tkm.rss]}" && ((${R[tkm.rss]} < goal_rss * 1024)); } || ok=0
if num "${R[gkm.rss]}"; then
  awk -v a="${R[tkm.rss]}" -v b="${R[gkm.rss]}" 'BEGIN { exit !(a <= 0.2 * b) }' || ok=0
fi
num "${R[tkm.change_writes]}" && awk -v a="${R[tkm.change_writes]}" -v c="${R[tkm.change_caches]:-$CACHES}" 'BEGIN { exit !(a <= 2 * c) }' || ok=0
if ((ok)) && ! num "${R[gkm.rss]}"; then
  echo "goal met without the GKM comparison (no GKM side): Ready within $goal_s s${goal_rss:+, RSS < $goal_rss MiB}, <= 2 writes per cache"
elif ((ok)); then
  echo "goal met: Ready within $goal_s s, RSS${goal_rss:+ < $goal_rss MiB and} <= 0.2x GKM's operator, <= 2 writes per cache"
else
  echo "goal NOT met: Ready within $goal_s s, RSS${goal_rss:+ < $goal_rss MiB and} <= 0.2x GKM's operator, <= 2 writes per cache"
  exit 1
fi
