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

# running PIDFILE: the process is there. For waits right after a start: between
# fork and exec its command line is still ours, so pid_alive's name check fails
# (a cold page cache makes exec of a 100 MB binary take seconds).
running() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# running_node_owner: the cluster dir of the test node (hack/node.sh) that holds
# this host's kubelet root (named in <kubelet root>/.tkm-node), when its kubelet
# runs; nothing otherwise. One node per host: make test and make demo ask this.
running_node_owner() {
  local owner
  owner=$(cat "${TKM_KUBELET_ROOT:-/var/lib/kubelet}/.tkm-node" 2>/dev/null) || return 0
  if running "$owner/node/kubelet.pid"; then echo "$owner"; fi
}
# stop_cluster_of DIR: stops the node and then the control plane of cluster dir DIR
# (a test node another run left); failures are reported, not fatal.
stop_cluster_of() {
  local hack
  hack=$(dirname "${BASH_SOURCE[0]}")
  TKM_CLUSTER_DIR=$1 "$hack/node.sh" down || true
  TKM_CLUSTER_DIR=$1 "$hack/cluster.sh" down || true
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

# ---- Go ----------------------------------------------------------------------
# The Go-built test components (hack/testbin) and the client-go benchmark need
# a Go at least as new as the highest `go` directive of their go.mod files.
# Debian 12 ships Go 1.19, so go_ensure bootstraps: Debian's golang-go
# downloads the Go toolchain module (golang.org/toolchain@v0.0.1-go<V>.<os>-<arch>,
# the official release as a module on the module proxy) into a temporary module
# cache, and it is copied to ${TKM_CACHE:-~/.cache/tkm}/go/go<V>/ with its exec
# bits restored. Nothing under /usr/local is touched.

# go_required: prints the Go version tkm's Go modules need, e.g. 1.26.8.
go_required() {
  local root v best=1.0
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  for f in "$root"/hack/testbin/*/go.mod "$root"/bench/clientgo/go.mod; do
    [[ -f $f ]] || continue
    v=$(awk '$1 == "go" { print $2; exit }' "$f")
    [[ -n $v ]] || continue
    # "go 1.26" names language 1.26, whose first release is go1.26.0.
    [[ $v =~ ^1\.([0-9]+)$ ]] && ((BASH_REMATCH[1] >= 21)) && v=$v.0
    go_version_ge "$best" "$v" || best=$v
  done
  echo "$best"
}

# go_version_ge A B: true when Go version A (1.26.8, 1.19) >= B.
go_version_ge() {
  [[ $(printf '%s\n%s\n' "$1" "$2" | sort -V | awk 'NR == 1') == "$2" ]]
}

# go_version_of GO: prints the version (1.26.8) of the go binary GO, or nothing.
go_version_of() {
  local v
  [[ -x $1 ]] || return 0
  # From /, so that no go.mod asks for another toolchain.
  v=$(cd / && GOTOOLCHAIN=local "$1" env GOVERSION 2>/dev/null) || v=
  # Go < 1.21 (no GOVERSION in go env): parse `go version`.
  [[ $v == go* ]] || v=$(cd / && "$1" version 2>/dev/null | awk '{ print $3 }')
  v=${v#go}
  [[ $v =~ ^[0-9]+\.[0-9]+ ]] && echo "${v%% *}"
}

# go_bootstrap VERSION DEST: installs the Go toolchain VERSION into DEST with
# the Go found on PATH or /usr/lib/go (installing Debian's golang-go if there is
# none). Fails with a sentence on stderr.
go_bootstrap() {
  local want=$1 dest=$2 boot tmp os arch mod rc=0
  boot=$(command -v go 2>/dev/null || true)
  [[ -n $boot ]] || { [[ -x /usr/lib/go/bin/go ]] && boot=/usr/lib/go/bin/go; }
  if [[ -z $boot ]]; then
    local sudo=
    if [[ $(id -u) -ne 0 ]]; then
      command -v sudo >/dev/null || { echo "go: no Go found and not root: apt-get install golang-go, then rerun" >&2; return 1; }
      sudo=sudo
    fi
    echo "go: installing Debian's golang-go to bootstrap Go $want" >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends golang-go >&2 ||
      { $sudo apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q \
        --no-install-recommends golang-go >&2; } || { echo "go: apt-get install golang-go failed" >&2; return 1; }
    boot=/usr/lib/go/bin/go
    [[ -x $boot ]] || boot=$(command -v go) || { echo "go: golang-go installed no go binary" >&2; return 1; }
  fi
  { os=$("$boot" env GOHOSTOS) && arch=$("$boot" env GOHOSTARCH); } || { echo "go: $boot does not run" >&2; return 1; }
  mod=golang.org/toolchain@v0.0.1-go$want.$os-$arch
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/tkm-go-XXXXXX")
  echo "go: downloading $mod with $boot ($(go_version_of "$boot")) into $dest..." >&2
  # Outside any module, with a throwaway module cache (writable, so it can be removed).
  (cd "$tmp" && GOPATH=$tmp/gopath GOMODCACHE=$tmp/mod GOCACHE=$tmp/cache GOFLAGS=-modcacherw \
    GOTOOLCHAIN=local GO111MODULE=on "$boot" mod download "$mod") >&2 || rc=$?
  local src=$tmp/mod/$mod
  if ((rc == 0)) && [[ -f $src/bin/go ]]; then
    rm -rf "$dest.tmp"
    mkdir -p "$(dirname "$dest")"
    cp -a "$src" "$dest.tmp" && chmod -R u+w "$dest.tmp" &&
      chmod a+x "$dest.tmp"/bin/* "$dest.tmp"/pkg/tool/*/* || rc=$?
    if ((rc == 0)) && [[ $(go_version_of "$dest.tmp/bin/go") == "$want" ]]; then
      rm -rf "$dest" && mv "$dest.tmp" "$dest"
    else
      echo "go: the downloaded toolchain in $dest.tmp does not report go$want" >&2
      rc=1
    fi
  else
    echo "go: 'go mod download $mod' failed (is the module proxy reachable? GOPROXY=$("$boot" env GOPROXY))" >&2
    rc=1
  fi
  rm -rf "$tmp" "$dest.tmp"
  return "$rc"
}

# go_ensure: makes `go` (>= go_required) the first go on PATH, bootstrapping
# it into ${TKM_CACHE:-~/.cache/tkm}/go/go<V>/ if neither PATH nor the cache
# has one, and exports GOTOOLCHAIN=local so that go never fetches another.
# Cached: when a suitable Go exists, it only adjusts PATH. Returns 1 on failure.
# TKM_GO_BOOTSTRAP=0 forbids the bootstrap (a machine that must not download).
go_ensure() {
  local want have cache dir
  want=$(go_required)
  cache=${TKM_CACHE:-$HOME/.cache/tkm}
  dir=$cache/go/go$want
  export GOTOOLCHAIN=local
  if command -v go >/dev/null 2>&1; then
    have=$(go_version_of "$(command -v go)")
    if [[ -n $have ]] && go_version_ge "$have" "$want"; then
      return 0
    fi
  fi
  if [[ $(go_version_of "$dir/bin/go") != "$want" && ${TKM_GO_BOOTSTRAP:-1} == 0 ]]; then
    echo "go: no Go >= $want on PATH or in $dir, and TKM_GO_BOOTSTRAP=0 forbids fetching one" >&2
    return 1
  fi
  if [[ $(go_version_of "$dir/bin/go") != "$want" ]]; then
    mkdir -p "$cache/locks"
    # One bootstrapper at a time; a second caller waits and finds it done.
    (
      flock 8
      [[ $(go_version_of "$dir/bin/go") == "$want" ]] || go_bootstrap "$want" "$dir"
    ) 8>"$cache/locks/go.lock" || return 1
  fi
  PATH=$dir/bin:$PATH
  export PATH
}

# crds_established TIMEOUT_S CRD...: returns once every CRD (its full name) has the condition
# Established=True, 1 after TIMEOUT_S. Not `kubectl wait --for=condition=Established`: a CRD
# created a moment ago has no status.conditions yet, and kubectl 1.35 then fails at once
# ("accessor error: <nil> is of the type <nil>") instead of waiting.
crds_established() {
  local timeout=$1 crd deadline=$((SECONDS + $1))
  shift
  for crd in "$@"; do
    until [[ $(kubectl get crd "$crd" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null) == True ]]; do
      ((SECONDS < deadline)) || { echo "CRD $crd is not Established after ${timeout} s" >&2; return 1; }
      sleep 0.2
    done
  done
}
