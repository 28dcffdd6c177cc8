# tests/e2e/ctrl_helpers.bash - sourced by the tkm-controller scenarios (ctrl_*.sh)
# after lib.sh. Not a scenario itself (ctest registers *.sh only).
#
#   ctrl_crds                      apply the CRDs and wait until they are served
#   ctrl_image REPO TAG            build the fixture cache with tkmctl, push REPO:TAG;
#                                  prints the digest
#   ctrl_keys                      cosign key pairs in $E2E_TMP (cosign.pub, other/cosign.pub)
#   ctrl_sign REF@DIGEST           cosign sign with $E2E_TMP/cosign.key (no tlog)
#   ctrl_start NAME [FLAGS...]     start tkm-controller with CTRL_REACH_FLAGS (log $E2E_TMP/NAME.log, pid in
#                                  CTRL_PID[NAME]); CTRL_NS is its namespace; the state dir is
#                                  $E2E_TMP/state-${CTRL_STATE:-main} (shared by restarts);
#                                  under valgrind memcheck with TKM_E2E_CTRL_VALGRIND=1
#   ctrl_kill NAME [SIG]           signal it (default TERM) and wait for it: its exit status in
#                                  CTRL_RC[NAME], how long it took (ms) in CTRL_STOP_MS[NAME]
#   ctrl_drain_and_kill            at exit: delete the caches in $NS (a controller still runs), stop all
#   ctrl_node NAME                 create a Node; prints its uid
#   ctrl_report NS NODE UID JSON   apply a node status the way tkm-agent does (server-side,
#                                  field manager tkm-agent, status subresource); JSON is the
#                                  value of status.caches
#   ctrl_cond NS KIND/NAME TYPE    the condition's status ("" when absent); ctrl_reason: its reason
#   ctrl_events NS NAME REASON     how many times REASON was recorded for the object (sum of counts)
COSIGN=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path cosign)
CRANE=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path crane)
TKMCTL=$TKM_BUILD_DIR/cli/tkmctl
CTRL_BIN=${TKM_CTRL_BIN:-$TKM_BUILD_DIR/controller/tkm-controller}
[[ -x $TKMCTL && -x $CTRL_BIN ]] || fail "build tkmctl and tkm-controller first"
export COSIGN_PASSWORD='' COSIGN_YES=true
declare -A CTRL_PID=()
# ctrl_start's registry reach flags (lib.sh); a scenario may set its own (or none).
CTRL_REACH_FLAGS=("${E2E_REACH_FLAGS[@]}")
# a command ctrl_start runs the controller under (it must exec it), or none
CTRL_WRAP=()

ctrl_crds() {
  kubectl apply -f "$TKM_SOURCE_DIR/crds/" >/dev/null
  e2e_crds_established tritonkernelcaches tritonkernelcacheclusters tritonkernelcachenodestatuses \
    tritonkernelcachenodestatusclusters
}

ctrl_image() { # REPO TAG [TKMCTL BUILD FLAGS...] (--add-variant: a variant index of one)
  local repo=$1 tag=$2 src=$E2E_TMP/src-$RANDOM
  shift 2
  mkdir -p "$src"
  tar -xzf "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" -C "$src"
  "$TKMCTL" build "$src/tcache" --push "$repo:$tag" "$@" >"$E2E_TMP/build.log" 2>&1 ||
    fail "tkmctl build --push $repo:$tag: $(cat "$E2E_TMP/build.log")"
  "$CRANE" digest "$repo:$tag"
}

ctrl_keys() {
  (cd "$E2E_TMP" && "$COSIGN" generate-key-pair >/dev/null 2>&1 && mkdir -p other &&
    cd other && "$COSIGN" generate-key-pair >/dev/null 2>&1)
  [[ -s $E2E_TMP/cosign.pub && -s $E2E_TMP/other/cosign.pub ]] || fail "cosign generate-key-pair"
}

ctrl_sign() {
  "$COSIGN" sign --key "$E2E_TMP/cosign.key" --tlog-upload=false -y "$1" >"$E2E_TMP/sign.log" 2>&1 ||
    fail "cosign sign $1: $(cat "$E2E_TMP/sign.log")"
}

ctrl_start() {
  local name=$1 vg=()
  shift
  # TKM_E2E_CTRL_VALGRIND=1: under memcheck, as e2e_valgrind runs a program (any report fails
  # the scenario when it exits), but valgrind itself is the process CTRL_PID signals
  if [[ ${TKM_E2E_CTRL_VALGRIND:-0} == 1 ]]; then
    mkdir -p "$E2E_TMP/valgrind"
    vg=(valgrind -q --leak-check=full '--show-leak-kinds=definite,indirect'
      '--errors-for-leak-kinds=definite,indirect' --track-fds=no
      --suppressions="$TKM_SOURCE_DIR/tests/valgrind.supp" --log-file="$E2E_TMP/valgrind/%p.log")
  fi
  "${CTRL_WRAP[@]}" "${vg[@]}" "$CTRL_BIN" --kubeconfig "$KUBECONFIG" --namespace "$CTRL_NS" --state-dir "$E2E_TMP/state-${CTRL_STATE:-main}" \
    --metrics-bind-address 0 --health-probe-bind-address 0 --cleanup-timeout 3s \
    --node-gc-grace 1s --registry-timeout 3s -v 1 "${CTRL_REACH_FLAGS[@]}" "$@" >>"$E2E_TMP/$name.log" 2>&1 &
  CTRL_PID[$name]=$!
}

# ctrl_drain_and_kill: at exit, the caches in $NS deleted while a controller still runs (it
# removes their finalizers), then every controller stopped.
ctrl_drain_and_kill() {
  kubectl -n "$NS" delete tkc --all --wait=false >/dev/null 2>&1
  for _ in $(seq 20); do [[ -z $(kubectl -n "$NS" get tkc -o name 2>/dev/null) ]] && break; sleep 0.5; done
  ctrl_kill_all
}

declare -A CTRL_RC CTRL_STOP_MS
# shellcheck disable=SC2034 # CTRL_RC, CTRL_STOP_MS: read by the scenarios
ctrl_kill() {
  local pid=${CTRL_PID[$1]:-} rc=0 t0
  [[ -n $pid ]] || return 0
  t0=$(date +%s%N)
  kill -"${2:-TERM}" "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || rc=$?
  CTRL_RC[$1]=$rc
  CTRL_STOP_MS[$1]=$((($(date +%s%N) - t0) / 1000000))
  unset "CTRL_PID[$1]"
}

ctrl_kill_all() {
  local n
  for n in "${!CTRL_PID[@]}"; do ctrl_kill "$n"; done
}

ctrl_node() {
  kubectl create -f - >/dev/null <<EOF2
{"apiVersion":"v1","kind":"Node","metadata":{"name":"$1","labels":{"e2e":"$E2E_NAME"}}}
EOF2
  kubectl get node "$1" -o jsonpath='{.metadata.uid}'
}

ctrl_report() {
  local ns=$1 node=$2 uid=$3 caches=$4 f=$E2E_TMP/report-$RANDOM.json
  cat >"$f" <<EOF2
{"apiVersion":"tkm.io/v1alpha1","kind":"TritonKernelCacheNodeStatus",
 "metadata":{"name":"$node","namespace":"$ns",
   "ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"$node","uid":"$uid"}]},
 "status":{"nodeName":"$node","gpus":[{"id":0,"gpuType":"nvidia-h200","vendor":"nvidia","arch":"90","warpSize":32}],
   "caches":$caches,"lastUpdated":"$(date -u +%Y-%m-%dT%H:%M:%SZ)"}}
EOF2
  kubectl apply --server-side --field-manager=tkm-agent -f "$f" >/dev/null
  kubectl apply --server-side --field-manager=tkm-agent --subresource=status -f "$f" >/dev/null
}

# A cache entry (the value of status.caches.<name>): DIGEST compat|incompat|error [REASON MSG]
ctrl_entry() {
  local d=$1 mode=$2 now
  now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  case $mode in
  compat) echo "{\"digest\":\"$d\",\"verified\":true,\"extracted\":true,\"compatibleGPUs\":[{\"ids\":[0],\"gpuType\":\"nvidia-h200\"}],\"lastUpdated\":\"$now\"}" ;;
  incompat) echo "{\"digest\":\"$d\",\"verified\":true,\"extracted\":false,\"incompatibleGPUs\":[{\"ids\":[0],\"gpuType\":\"nvidia-a100\",\"reason\":\"${3:-ArchMismatch}\",\"message\":\"${4:-the cache targets sm_90, the GPU is sm_80}\"}],\"lastUpdated\":\"$now\"}" ;;
  error) echo "{\"digest\":\"$d\",\"verified\":false,\"extracted\":false,\"error\":\"${3:-extraction failed}\",\"lastUpdated\":\"$now\"}" ;;
  esac
}

ctrl_cond() {
  kubectl -n "$1" get "$2" -o jsonpath="{.status.conditions[?(@.type==\"$3\")].status}" 2>/dev/null
}
# ctrl_reason NS KIND/NAME TYPE: the condition's reason
ctrl_reason() {
  kubectl -n "$1" get "$2" -o jsonpath="{.status.conditions[?(@.type==\"$3\")].reason}" 2>/dev/null
}

ctrl_events() {
  kubectl get events -n "$1" --field-selector "involvedObject.name=$2,reason=$3" \
    -o jsonpath='{range .items[*]}{.count}{"\n"}{end}' 2>/dev/null | awk '{s+=$1} END {print s+0}'
}

# On failure, the controllers' logs are the first thing to read.
ctrl_dump_logs() {
  local f
  for f in "$E2E_TMP"/*.log; do
    [[ -f $f ]] || continue
    echo "=== tail of $(basename "$f")" >&2
    tail -n "${CTRL_LOG_LINES:-25}" "$f" >&2
  done
  if [[ -n ${NS:-} ]]; then
    echo "=== events in $NS" >&2
    kubectl -n "$NS" get events -o custom-columns=OBJ:.involvedObject.name,REASON:.reason,COUNT:.count,MSG:.message 2>&1 | cut -c1-200 >&2
  fi
}
trap 'echo "FAIL [$E2E_NAME]: line $LINENO: \"$BASH_COMMAND\" exited $?" >&2; ctrl_dump_logs' ERR
fail() {
  ctrl_dump_logs
  echo "FAIL [$E2E_NAME]: $*" >&2
  exit 1
}
