# Shell helpers shared by hack/*.sh (sourced, not run).

die() {
  echo "error: $*" >&2
  exit 1
}

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

# port_free PORT: true when nothing listens on 127.0.0.1:PORT (or *:PORT).
port_free() {
  [[ -z $(ss -Hltn "sport = :$1" 2>/dev/null) ]]
}

# free_port: prints a port in 20000-39999 that nothing listens on now.
free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 20000))
    if port_free "$p" && [[ " ${TKM_PORTS_TAKEN:-} " != *" $p "* ]]; then
      TKM_PORTS_TAKEN="${TKM_PORTS_TAKEN:-} $p"
      echo "$p"
      return 0
    fi
  done
  die "no free port found on 127.0.0.1"
}

# pid_alive PIDFILE NAME: true when PIDFILE names a live process whose command
# line contains NAME (so a recycled pid is never taken for ours).
pid_alive() {
  local pf=$1 name=$2 pid
  [[ -s $pf ]] || return 1
  pid=$(cat "$pf")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ -r /proc/$pid/cmdline ]] || return 1
  [[ $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) == *"$name"* ]]
}

# stop_pidfile PIDFILE NAME: stops the process PIDFILE names if it is ours
# (TERM, then KILL after 10 s) and removes the pid file; a stale file is just
# removed.
stop_pidfile() {
  local pf=$1 name=$2 pid
  if pid_alive "$pf" "$name"; then
    pid=$(cat "$pf")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pf"
}
