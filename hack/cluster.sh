#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for development and tests:
# etcd 3.6 and kube-apiserver 1.34 (built from Go modules by
# hack/testbin/build.sh, cached outside the clone), RBAC on, plus a local OCI
# registry (Debian's docker-registry). Everything listens on 127.0.0.1 only.
#
# Usage: hack/cluster.sh up|down|restart-apiserver|env|status
#   up       build what is missing, generate certificates, start etcd,
#            kube-apiserver and the registry, wait for /readyz, write kubeconfigs
#   down     stop the processes `up` started (from their pid files), clean up
#   restart-apiserver   stop and start kube-apiserver only (same ports, same data)
#   env      print `export KUBECONFIG=... TKM_REGISTRY=...` for eval
#   status   show what runs and whether the apiserver is ready
#
# State lives in ${TKM_CLUSTER_DIR:-<repo>/.tkm/cluster}; etcd's data in a tmpfs
# directory under /dev/shm. Ports are free ones chosen at `up`, unless set with
# TKM_APISERVER_PORT, TKM_ETCD_PORT, TKM_REGISTRY_PORT. TKM_ETCD_QUOTA: etcd's
# --quota-backend-bytes (default 2147483648, etcd's own default; the large
# controller benchmark needs more: bench/controller.sh large sets 8 GiB).
# ServiceAccounts: the ServiceAccount admission plugin is on and tokens are
# signed with pki/sa.key (issuer and audience https://127.0.0.1:<port>), so
# pods on the test node (hack/node.sh) get bound projected tokens that carry
# the pod and node names (user extra authentication.kubernetes.io/node-name).
# Files written there:
#   admin.kubeconfig  client certificate, group system:masters (the default KUBECONFIG)
#   alice.kubeconfig  client certificate of the unprivileged user "alice"
#   token.kubeconfig  bearer token of the user "tkm-admin" (system:masters)
#   node.kubeconfig, kube-controller-manager.kubeconfig, kube-scheduler.kubeconfig
#                     client certificates for hack/node.sh (which `up` never starts)
#   tokens.csv        the apiserver's --token-auth-file; spare tokens for rotation tests
#   env               the exports `env` prints
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"

dir=${TKM_CLUSTER_DIR:-$repo/.tkm/cluster}
mkdir -p "$dir"
dir=$(realpath "$dir")
pki=$dir/pki

# Client certificates of the components hack/node.sh adds (and of the
# apiserver towards the kubelet): made one by one when missing, so a cluster
# dir from before they existed gains them on the next `up`.
EXTRA_CLIENTS=(
  "kubelet-client:/O=system:masters/CN=kube-apiserver-kubelet-client"
  "kube-controller-manager:/CN=system:kube-controller-manager"
  "kube-scheduler:/CN=system:kube-scheduler"
  "node:/O=system:nodes/CN=system:node:127.0.0.1"
)

gen_extra_certs() {
  (
    cd "$pki"
    umask 077
    for u in "${EXTRA_CLIENTS[@]}"; do
      name=${u%%:*} subj=${u#*:}
      [[ -s $name.crt && -s $name.key ]] && continue
      openssl req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "$subj" 2>/dev/null
      printf 'extendedKeyUsage=clientAuth\n' >"$name.ext"
      openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
        -extfile "$name.ext" -out "$name.crt" 2>/dev/null
      rm -f "$name.csr" "$name.ext"
      chmod 644 "$name.crt"
    done
  )
}

gen_pki() {
  if [[ -s $pki/ca.crt && -s $pki/admin.crt ]]; then
    gen_extra_certs
    return 0
  fi
  mkdir -p "$pki"
  (
    cd "$pki"
    umask 077
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
      -subj "/CN=tkm-dev-ca" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
      -subj "/CN=kube-apiserver" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1\nextendedKeyUsage=serverAuth\n' >apiserver.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    for u in "admin:/O=system:masters/CN=admin" "alice:/CN=alice"; do
      name=${u%%:*} subj=${u#*:}
      openssl req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "$subj" 2>/dev/null
      printf 'extendedKeyUsage=clientAuth\n' >client.ext
      openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
        -extfile client.ext -out "$name.crt" 2>/dev/null
    done
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    rm -f ./*.csr ./*.ext
    chmod 644 ./*.crt
  )
  # Tokens: one for tkm-admin (system:masters), spares for token-rotation tests, one for alice.
  {
    for _ in 0 1 2 3; do
      printf '%s,tkm-admin,uid-tkm-admin,"system:masters"\n' "$(openssl rand -hex 24)"
    done
    printf '%s,alice,uid-alice\n' "$(openssl rand -hex 24)"
  } >"$dir/tokens.csv"
  chmod 600 "$dir/tokens.csv"
  gen_extra_certs
}

write_kubeconfigs() {
  local port=$1 server="https://127.0.0.1:$1"
  local tok
  tok=$(head -1 "$dir/tokens.csv" | cut -d, -f1)
  for u in admin alice token node kube-controller-manager kube-scheduler; do
    local kc="$dir/$u.kubeconfig"
    rm -f "$kc"
    kubectl config --kubeconfig="$kc" set-cluster tkm-dev --server="$server" \
      --certificate-authority="$pki/ca.crt" --embed-certs=true >/dev/null
    if [[ $u == token ]]; then
      kubectl config --kubeconfig="$kc" set-credentials tkm-admin --token="$tok" >/dev/null
      kubectl config --kubeconfig="$kc" set-context tkm-dev --cluster=tkm-dev --user=tkm-admin >/dev/null
    else
      kubectl config --kubeconfig="$kc" set-credentials "$u" --client-certificate="$pki/$u.crt" \
        --client-key="$pki/$u.key" --embed-certs=true >/dev/null
      kubectl config --kubeconfig="$kc" set-context tkm-dev --cluster=tkm-dev --user="$u" >/dev/null
    fi
    kubectl config --kubeconfig="$kc" use-context tkm-dev >/dev/null
    chmod 600 "$kc"
  done
}

choose_port() { # VAR_NAME ENV_OVERRIDE FILE
  local file=$dir/$1.port want=${2:-}
  if [[ -n $want ]]; then
    port_free "$want" || die "port 127.0.0.1:$want ($1) is in use; free it or choose another (TKM_${1^^}_PORT)"
    echo "$want" >"$file"
  elif [[ -s $file ]] && port_free "$(cat "$file")"; then
    : # reuse the port of the last run (kubeconfigs stay valid)
  else
    free_port >"$file"
  fi
  cat "$file"
}

start_etcd() {
  local etcd=$1 port=$2 peer=$3
  local data quota=${TKM_ETCD_QUOTA:-2147483648}
  { [[ $quota =~ ^[0-9]+$ ]] && ((quota >= 1048576)); } ||
    die "TKM_ETCD_QUOTA=$quota: give etcd's backend quota in bytes (at least 1048576; default 2147483648)"
  if [[ -s $dir/etcd.datadir && -d $(cat "$dir/etcd.datadir") ]]; then
    data=$(cat "$dir/etcd.datadir")
  else
    local shm=/dev/shm
    [[ -d $shm && -w $shm ]] || shm=$dir
    data=$(mktemp -d "$shm/tkm-etcd-XXXXXX")
    echo "$data" >"$dir/etcd.datadir"
  fi
  setsid "$etcd" --name tkm-dev --data-dir "$data" \
    --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "tkm-dev=http://127.0.0.1:$peer" --unsafe-no-fsync=true \
    --quota-backend-bytes "$quota" --log-level warn >"$dir/etcd.log" 2>&1 </dev/null &
  echo $! >"$dir/etcd.pid"
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    running "$dir/etcd.pid" || break
    sleep 0.1
  done
  tail -5 "$dir/etcd.log" >&2
  grep -q "address already in use" "$dir/etcd.log" && die "etcd: port $port or $peer is in use; log: $dir/etcd.log"
  die "etcd did not become healthy; log: $dir/etcd.log"
}

start_apiserver() {
  local kas=$1 port=$2 etcd_port=$3
  # --endpoint-reconciler-type=none: Kubernetes >= 1.37 refuses a loopback advertise
  # address with an endpoint reconciler ("may not be in the loopback range"); without
  # one, the `kubernetes` Service gets no endpoints, which is what the network rule
  # wants anyway (pods talk to 127.0.0.1, never to the service IP).
  setsid "$kas" --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$port" \
    --endpoint-reconciler-type=none \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --cert-dir="$dir/kas-certs" --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" --token-auth-file="$dir/tokens.csv" \
    --service-account-issuer="https://127.0.0.1:$port" --service-account-key-file="$pki/sa.pub" \
    --service-account-signing-key-file="$pki/sa.key" --api-audiences="https://127.0.0.1:$port" \
    --service-cluster-ip-range=10.0.0.0/24 --authorization-mode=Node,RBAC --allow-privileged=true \
    --kubelet-preferred-address-types=InternalIP --kubelet-client-certificate="$pki/kubelet-client.crt" \
    --kubelet-client-key="$pki/kubelet-client.key" \
    --enable-admission-plugins=ServiceAccount --enable-priority-and-fairness=true \
    --profiling=false --v=1 >"$dir/kube-apiserver.log" 2>&1 </dev/null &
  echo $! >"$dir/kube-apiserver.pid"
  local t0=$SECONDS
  while ((SECONDS - t0 < 120)); do
    if [[ $(curl -s --cacert "$pki/ca.crt" "https://127.0.0.1:$port/readyz" 2>/dev/null) == ok ]]; then
      return 0
    fi
    if ! running "$dir/kube-apiserver.pid"; then
      tail -15 "$dir/kube-apiserver.log" >&2
      grep -q "address already in use" "$dir/kube-apiserver.log" &&
        die "kube-apiserver: port $port is in use; log: $dir/kube-apiserver.log"
      die "kube-apiserver exited; log: $dir/kube-apiserver.log"
    fi
    sleep 0.25
  done
  die "kube-apiserver not ready after 120 s; log: $dir/kube-apiserver.log"
}

write_env() {
  local port reg kubectl_dir
  kubectl_dir=$(dirname "$("$here/testbin/build.sh" --path kubectl)")
  port=$(cat "$dir/apiserver.port")
  reg=$(cat "$dir/registry/addr" 2>/dev/null || true)
  {
    echo "export KUBECONFIG=$dir/admin.kubeconfig"
    echo "export PATH=$kubectl_dir:\$PATH"
    echo "export TKM_CLUSTER_DIR=$dir"
    echo "export TKM_APISERVER=https://127.0.0.1:$port"
    echo "export TKM_REGISTRY=$reg"
    echo "export TKM_ETCD=http://127.0.0.1:$(cat "$dir/etcd.port")"
  } >"$dir/env"
}

cmd_up() {
  local etcd kas
  etcd=$("$here/testbin/build.sh" --path etcd)
  kas=$("$here/testbin/build.sh" --path kube-apiserver)
  # kubectl of the server's version (the preinstalled one may be outside the skew).
  kubectl_dir=$(dirname "$("$here/testbin/build.sh" --path kubectl)")
  export PATH="$kubectl_dir:$PATH"
  command -v openssl >/dev/null || die "openssl is not installed (run hack/deps.sh)"
  gen_pki
  local etcd_port peer_port kas_port
  if pid_alive "$dir/etcd.pid" etcd; then
    etcd_port=$(cat "$dir/etcd.port")
  else
    [[ -e $dir/etcd.pid ]] && log "removing stale pid file $dir/etcd.pid"
    rm -f "$dir/etcd.pid"
    etcd_port=$(choose_port etcd "${TKM_ETCD_PORT:-}")
    peer_port=$(free_port)
    log "starting etcd on 127.0.0.1:$etcd_port"
    start_etcd "$etcd" "$etcd_port" "$peer_port"
  fi
  if pid_alive "$dir/kube-apiserver.pid" kube-apiserver; then
    kas_port=$(cat "$dir/apiserver.port")
  else
    [[ -e $dir/kube-apiserver.pid ]] && log "removing stale pid file $dir/kube-apiserver.pid"
    rm -f "$dir/kube-apiserver.pid"
    kas_port=$(choose_port apiserver "${TKM_APISERVER_PORT:-}")
    log "starting kube-apiserver on 127.0.0.1:$kas_port"
    start_apiserver "$kas" "$kas_port" "$etcd_port"
  fi
  write_kubeconfigs "$kas_port"
  local regargs=()
  [[ -n ${TKM_REGISTRY_PORT:-} ]] && regargs=(--port "$TKM_REGISTRY_PORT")
  local reg
  reg=$("$here/registry.sh" start "$dir/registry" "${regargs[@]}")
  write_env
  log "control plane ready: kube-apiserver https://127.0.0.1:$kas_port, registry $reg"
  echo "eval \"\$($0 env)\"   # to use it from this shell" >&2
}

cmd_down() {
  # A test node (hack/node.sh) on this control plane goes first.
  if [[ -d $dir/node ]]; then
    "$here/node.sh" down || log "hack/node.sh down failed; see its messages above"
  fi
  # tkm's daemons run as local processes by hack/tkm-local.sh (TKM_DEMO_MODE=local make demo).
  stop_pidfile "$dir/tkm-agent.pid" tkm-agent
  stop_pidfile "$dir/tkm-controller.pid" tkm-controller
  "$here/registry.sh" stop "$dir/registry" 2>/dev/null || true
  stop_pidfile "$dir/kube-apiserver.pid" kube-apiserver
  stop_pidfile "$dir/etcd.pid" etcd
  if [[ -s $dir/etcd.datadir ]]; then
    local d
    d=$(cat "$dir/etcd.datadir")
    [[ $d == */tkm-etcd-* ]] && rm -rf "$d"
    rm -f "$dir/etcd.datadir"
  fi
  log "control plane stopped ($dir)"
}

cmd_status() {
  local rc=0
  for c in etcd kube-apiserver; do
    if pid_alive "$dir/$c.pid" "$c"; then echo "$c: running (pid $(cat "$dir/$c.pid"))"; else echo "$c: not running"; rc=1; fi
  done
  if pid_alive "$dir/registry/registry.pid" docker-registry; then
    echo "registry: running at $(cat "$dir/registry/addr")"
  else
    echo "registry: not running"; rc=1
  fi
  if [[ -s $dir/apiserver.port ]]; then
    local r
    r=$(curl -s --cacert "$pki/ca.crt" "https://127.0.0.1:$(cat "$dir/apiserver.port")/readyz" 2>/dev/null || true)
    echo "readyz: ${r:-unreachable}"
    [[ $r == ok ]] || rc=1
  fi
  return $rc
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  restart-apiserver)
    gen_pki # a cluster dir from before the kubelet client certificate gains it
    stop_pidfile "$dir/kube-apiserver.pid" kube-apiserver
    start_apiserver "$("$here/testbin/build.sh" --path kube-apiserver)" "$(cat "$dir/apiserver.port")" "$(cat "$dir/etcd.port")"
    ;;
  env)
    [[ -s $dir/env ]] || die "no control plane in $dir; run: hack/cluster.sh up"
    cat "$dir/env" ;;
  status) cmd_status ;;
  *) sed -n '2,28p' "$0" >&2; exit 2 ;;
esac
