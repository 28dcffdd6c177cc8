# tests/e2e/csi/env.sh - the world the tests of tkm-csi alone run in, sourced by
# tests/e2e/csi_*.sh and bench/csi.sh (not a scenario itself: ctest only picks up
# tests/e2e/*.sh).
#
# The caller must already be in a private mount namespace (csi_unshare, first
# thing in the script): every overlay tkm-csi mounts stays in it and goes with it.
#
#   CSI_TMP/store/tcache   the real Triton fixture cache, extracted (the "store")
#   CSI_TMP/run            a tmpfs, as /var/run is on a node: state dir CSI_STATE
#   CSI_TMP/pods           the target root (as kubelet's pods dir)
#   CSI_SOCK, CSI_AGENT_SOCK, CSI_REG_DIR
# The agent is e2e_csi_testagent, a protocol-level stand-in for tkm-agent
# (tests/e2e/progs/csi_testagent.c): it answers Materialize from the fixture store.

# csi_unshare "$0" "$@": re-executes the script in a private mount namespace.
csi_unshare() {
  if [[ -z ${TKM_CSI_UNSHARED:-} ]]; then
    exec env TKM_CSI_UNSHARED=1 unshare -m --propagation private bash "$@"
  fi
}

# csi_setup TMPDIR FIXTURE: the store, the tmpfs state dir, the target root.
csi_setup() {
  CSI_TMP=$1
  local fixture=${2:-triton-3.6.0-cuda-sm90}
  mkdir -p "$CSI_TMP/store" "$CSI_TMP/run" "$CSI_TMP/pods"
  tar -xzf "$TKM_FIXTURES/triton-cache/$fixture.tar.gz" -C "$CSI_TMP/store"
  # The fixture's one top-level dir (tcache/, tcache-inductor/, ...) is the cache root.
  CSI_STORE=$(find "$CSI_TMP/store" -mindepth 1 -maxdepth 1 -type d | head -1)
  [[ -n $CSI_STORE ]] || { echo "csi env: no cache dir in fixture $fixture" >&2; return 1; }
  mount -t tmpfs -o mode=0755,size=512m tkm-e2e-run "$CSI_TMP/run"
  CSI_STATE=$CSI_TMP/run/tkm/caches
  CSI_SOCK=$CSI_TMP/plugins/csi.sock
  CSI_AGENT_SOCK=$CSI_TMP/agent/agent.sock
  CSI_REG_DIR=$CSI_TMP/plugins_registry
  CSI_AGENT_ARGS=()
  export CSI_TMP CSI_STORE CSI_STATE CSI_SOCK CSI_AGENT_SOCK CSI_REG_DIR
}

# csi_agent_start [ARGS...]: the test agent, with ARGS after the defaults (remembered:
# a later call without ARGS starts it with the same ones)
# (--cache vadd=/cache: a cache whose spec.mountPath hint is /cache).
csi_agent_start() {
  [[ $# -gt 0 ]] && CSI_AGENT_ARGS=("$@")
  "$TKM_BUILD_DIR/tests/e2e_csi_testagent" --socket "$CSI_AGENT_SOCK" --store "$CSI_STORE" \
    --cache vadd=/cache --cache nohint "${CSI_AGENT_ARGS[@]}" >>"$CSI_TMP/agent.log" 2>&1 &
  CSI_AGENT_PID=$!
  for _ in $(seq 100); do [[ -S $CSI_AGENT_SOCK ]] && return 0; sleep 0.05; done
  echo "csi env: the test agent did not start:" >&2; cat "$CSI_TMP/agent.log" >&2; return 1
}
csi_agent_stop() {
  [[ -n ${CSI_AGENT_PID:-} ]] || return 0
  kill "$CSI_AGENT_PID" 2>/dev/null || true
  wait "$CSI_AGENT_PID" 2>/dev/null || true
  CSI_AGENT_PID=
}

# csi_driver_start [FLAGS...]: tkm-csi on CSI_SOCK, targets below CSI_TMP/pods.
csi_driver_start() {
  "$TKM_BUILD_DIR/csi/tkm-csi" --endpoint "$CSI_SOCK" --agent-socket "$CSI_AGENT_SOCK" \
    --node-id e2e-node --state-dir "$CSI_STATE" --kubelet-dir "$CSI_TMP/kubelet" \
    --target-root "$CSI_TMP/pods" --registration-dir "$CSI_REG_DIR" --retry-release 1s -v 1 "$@" \
    >>"$CSI_TMP/csi.log" 2>&1 &
  CSI_DRIVER_PID=$!
  for _ in $(seq 100); do [[ -S $CSI_SOCK ]] && return 0; sleep 0.05; done
  echo "csi env: tkm-csi did not start:" >&2; cat "$CSI_TMP/csi.log" >&2; return 1
}
# csi_driver_stop [SIGNAL]: sets CSI_DRIVER_RC, its exit status
# shellcheck disable=SC2120 # SIGNAL is optional; callers in other files pass it (csi_publish.sh: KILL)
csi_driver_stop() {
  [[ -n ${CSI_DRIVER_PID:-} ]] || return 0
  kill "-${1:-TERM}" "$CSI_DRIVER_PID" 2>/dev/null || true
  export CSI_DRIVER_RC=0 # (the callers read it)
  wait "$CSI_DRIVER_PID" 2>/dev/null || CSI_DRIVER_RC=$?
  CSI_DRIVER_PID= # a SIGKILLed one leaves a stale socket: the next tkm-csi removes it
}

# csi_logs_clean: no sanitizer report (ASan/UBSan builds) in the driver's or agent's log.
csi_logs_clean() {
  ! grep -E 'Sanitizer|runtime error:' "$CSI_TMP/csi.log" "$CSI_TMP/agent.log"
}

# csi CMD ARGS...: one CSI call (e2e_csi_client) against tkm-csi. For publish it
# first creates the target's parent, as kubelet does (the driver creates the target).
csi() {
  [[ $1 != publish ]] || mkdir -p "$(dirname "$3")"
  "$TKM_BUILD_DIR/tests/e2e_csi_client" "$CSI_SOCK" "$@"
}

# csi_mounts: "MOUNTPOINT SOURCE" for every overlay tkm-csi mounted (mountinfo's
# optional fields vary in number: split at the " - " separator).
csi_mounts() {
  awk '{ split($0, a, " - "); split(a[1], f, " "); split(a[2], g, " ");
         if (g[1] == "overlay" && g[2] ~ /^tkm-csi:/) print f[5], g[2] }' /proc/self/mountinfo
}

# csi_teardown: stops both, unmounts whatever is left (the namespace goes anyway).
csi_teardown() {
  csi_driver_stop
  csi_agent_stop
  local m
  while read -r m _; do umount -l "$m" 2>/dev/null || true; done < <(csi_mounts)
  umount -l "$CSI_TMP/run" 2>/dev/null || true
}
