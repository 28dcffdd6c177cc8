#!/usr/bin/env bash
# Runs Debian's docker-registry (distribution v2) on loopback, with a config of
# ours. The package's own service listens on every interface; never use it.
#
# Usage:
#   hack/registry.sh start DIR [--port N] [--htpasswd FILE] [--access-log] [--proxy URL] [--tls]
#       Starts a registry storing its blobs under DIR/data, listening on
#       127.0.0.1 (a free port unless --port), optionally with basic auth from
#       an htpasswd (bcrypt) file. Prints "127.0.0.1:PORT" when it answers.
#       --access-log: the registry logs every request to DIR/registry.log, in
#       the combined log format (what tests and benchmarks count blob GETs
#       with) and as a "response completed" line with http.response.duration
#       (its own view of how long each request took).
#       --proxy URL: a pull-through cache of the registry at URL (distribution's
#       proxy.remoteurl): what a cluster's registry mirror is. Distribution
#       2.8 fetches a blob it lacks from URL for every request that misses
#       while the first fetch runs, plus once to store it: N concurrent first
#       pulls cost URL N+1 GETs, later ones none (bench/README.md, issue 26).
#       --tls: https with a certificate for 127.0.0.1 and localhost signed by a
#       CA of its own, made once in DIR/tls (ca.crt is what clients trust).
#   hack/registry.sh stop DIR
#       Stops the registry started for DIR (only that process).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"

cmd=${1:-}
dir=${2:-}
[[ -n $cmd && -n $dir ]] || { sed -n '2,13p' "$0" >&2; exit 2; }
shift 2

case $cmd in
  start)
    port='' htpasswd='' accesslog=false proxy='' tls=false
    while [[ $# -gt 0 ]]; do
      case $1 in
        --port) port=$2; shift 2 ;;
        --htpasswd) htpasswd=$(realpath "$2"); shift 2 ;;
        --access-log) accesslog=true; shift ;;
        --proxy) proxy=$2; shift 2 ;;
        --tls) tls=true; shift ;;
        *) die "registry: unknown flag $1" ;;
      esac
    done
    command -v docker-registry >/dev/null || die "docker-registry is not installed (run hack/deps.sh)"
    mkdir -p "$dir/data"
    dir=$(realpath "$dir")
    if pid_alive "$dir/registry.pid" docker-registry; then
      cat "$dir/addr"
      exit 0
    fi
    rm -f "$dir/registry.pid"
    if [[ -n $port ]]; then
      port_free "$port" || die "registry: port 127.0.0.1:$port is in use (pick another with --port, or free it)"
    else
      port=$(free_port)
    fi
    scheme=http cacert=()
    if $tls; then
      scheme=https cacert=(--cacert "$dir/tls/ca.crt")
      if [[ ! -s $dir/tls/server.crt ]]; then
        mkdir -p "$dir/tls"
        (
          cd "$dir/tls"
          openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
            -subj "/CN=tkm test registry CA" 2>/dev/null
          openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj "/CN=127.0.0.1" 2>/dev/null
          printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >san.ext
          openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
            -extfile san.ext -out server.crt 2>/dev/null
        ) || die "registry: cannot make the TLS certificate in $dir/tls"
      fi
    fi
    {
      echo "version: 0.1"
      echo "log:"
      if $accesslog; then
        echo "  level: info"
        echo "  accesslog: {disabled: false}"
      else
        echo "  level: warn"
        echo "  accesslog: {disabled: true}"
      fi
      echo "storage:"
      echo "  filesystem: {rootdirectory: $dir/data}"
      echo "  delete: {enabled: true}"
      echo "  maintenance: {uploadpurging: {enabled: false}}"
      [[ -z $proxy ]] || echo "proxy: {remoteurl: $proxy}"
      echo "http:"
      echo "  addr: 127.0.0.1:$port"
      $tls && echo "  tls: {certificate: $dir/tls/server.crt, key: $dir/tls/server.key}"
      echo "  headers: {X-Content-Type-Options: [nosniff]}"
      if [[ -n $htpasswd ]]; then
        echo "auth:"
        echo "  htpasswd: {realm: tkm-test, path: $htpasswd}"
      fi
    } >"$dir/config.yml"
    setsid docker-registry serve "$dir/config.yml" >"$dir/registry.log" 2>&1 </dev/null &
    echo $! >"$dir/registry.pid"
    echo "127.0.0.1:$port" >"$dir/addr"
    for _ in $(seq 1 300); do
      code=$(curl -s -o /dev/null -w '%{http_code}' "${cacert[@]}" "$scheme://127.0.0.1:$port/v2/" || true)
      if [[ $code == 200 || $code == 401 ]]; then
        echo "127.0.0.1:$port"
        exit 0
      fi
      running "$dir/registry.pid" || break
      sleep 0.1
    done
    tail -5 "$dir/registry.log" >&2 || true
    die "registry: did not answer on 127.0.0.1:$port; log: $dir/registry.log"
    ;;
  stop)
    stop_pidfile "$dir/registry.pid" docker-registry
    ;;
  *) die "registry: unknown command '$cmd' (start|stop)" ;;
esac
