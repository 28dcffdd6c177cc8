#!/usr/bin/env bash
# hack/cluster.sh and hack/testbin/build.sh fail clearly: a port in use is
# named, a stale or recycled pid file never makes `down` kill a stranger,
# a missing Go and a failed build say so (with the log's path), a bad
# TKM_ETCD_QUOTA is named, and `status` tells what runs.
source "$(dirname "$0")/lib.sh"
hack=$TKM_SOURCE_DIR/hack
other=$E2E_TMP/cluster
mkdir -p "$other"

step "status of the running control plane"
expect_ok "status of the fixture's cluster" "$hack/cluster.sh" status
assert_contains "$OUT" "readyz: ok" "status shows readyz"
assert_contains "$OUT" "registry: running at $TKM_REGISTRY" "status shows the registry"

step "a port in use is named"
used=${TKM_APISERVER##*:}
expect_fail "up on the apiserver's port" env TKM_CLUSTER_DIR="$other" TKM_APISERVER_PORT="$used" "$hack/cluster.sh" up
assert_contains "$OUT" "port 127.0.0.1:$used (apiserver) is in use" "error names the port and component"
e2e_on_exit "TKM_CLUSTER_DIR=$other $hack/cluster.sh down >/dev/null 2>&1"
regport=${TKM_REGISTRY##*:}
expect_fail "registry on a used port" "$hack/registry.sh" start "$E2E_TMP/reg" --port "$regport"
assert_contains "$OUT" "port 127.0.0.1:$regport is in use" "registry error names the port"

step "stale and recycled pid files"
TKM_CLUSTER_DIR=$other "$hack/cluster.sh" down >/dev/null 2>&1
sleep 300 &
stranger=$!
e2e_on_exit "kill $stranger 2>/dev/null"
echo "$stranger" >"$other/kube-apiserver.pid" # a live process that is not ours
echo 999999 >"$other/etcd.pid"               # a dead pid
expect_fail "status with foreign pids" env TKM_CLUSTER_DIR="$other" "$hack/cluster.sh" status
assert_contains "$OUT" "kube-apiserver: not running" "a recycled pid is not taken for kube-apiserver"
assert_contains "$OUT" "etcd: not running" "a dead pid is not running"
expect_ok "down with foreign pids" env TKM_CLUSTER_DIR="$other" "$hack/cluster.sh" down
kill -0 "$stranger" 2>/dev/null || fail "down killed a process it did not start (pid $stranger)"
pass "down left the stranger alive"
[[ ! -e $other/kube-apiserver.pid && ! -e $other/etcd.pid ]] || fail "stale pid files were not removed"
pass "stale pid files removed"

step "a bad etcd quota is named before etcd starts"
expect_fail "up with TKM_ETCD_QUOTA=lots" env TKM_CLUSTER_DIR="$other" TKM_ETCD_QUOTA=lots "$hack/cluster.sh" up
assert_contains "$OUT" "TKM_ETCD_QUOTA=lots: give etcd's backend quota in bytes" "error names the variable"
[[ ! -e $other/etcd.pid ]] || fail "etcd was started with a bad quota"
pass "no etcd started"

step "Go missing, and a failed build, are explained"
nogo=$E2E_TMP/nogo-bin
mkdir -p "$nogo"
# Every command of /usr/bin and /bin but go (the cached or /usr/local Go is not on this PATH).
for d in /usr/bin /bin; do
  for t in "$d"/*; do
    [[ ${t##*/} == go || ${t##*/} == gofmt || -e $nogo/${t##*/} ]] || ln -s "$t" "$nogo/${t##*/}"
  done
done
expect_fail "build without Go, bootstrap forbidden" env PATH="$nogo" TKM_CACHE="$E2E_TMP/cache1" \
  TKM_GO_BOOTSTRAP=0 "$hack/testbin/build.sh" etcd
assert_contains "$OUT" "no Go >= " "says which Go is missing"
assert_contains "$OUT" "TKM_GO_BOOTSTRAP=0 forbids fetching one" "says why none was fetched"
[[ ! -e $E2E_TMP/cache1/bin/etcd-v3.6.16/etcd ]] || fail "a build without Go left a binary"
pass "no binary without Go"
expect_fail "build that cannot download" env TKM_CACHE="$E2E_TMP/cache2" GOPROXY=off GOFLAGS=-mod=mod \
  GOMODCACHE="$E2E_TMP/modcache" GOCACHE="$E2E_TMP/gocache" "$hack/testbin/build.sh" etcd
assert_contains "$OUT" "building etcd failed; full log: $E2E_TMP/cache2/logs/etcd.log" "failure names the log"
[[ -s $E2E_TMP/cache2/logs/etcd.log ]] || fail "the build log is missing"
pass "build log written"
[[ ! -e $E2E_TMP/cache2/bin/etcd-v3.6.16/etcd ]] || fail "a failed build left a binary"
pass "no half-built binary"
chmod -R u+w "$E2E_TMP/modcache" 2>/dev/null || true
expect_fail "unknown tool" "$hack/testbin/build.sh" no-such-tool
assert_contains "$OUT" "unknown tool 'no-such-tool'" "unknown tool named"
e2e_done
