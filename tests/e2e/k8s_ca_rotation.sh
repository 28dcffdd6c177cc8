#!/usr/bin/env bash
# k8s_ca_rotation: a kubeconfig whose certificate-authority is a file; the file
# is replaced (by a rename, as the kubelet's atomic writer does) while one
# client keeps running, and the client trusts the new CA without a restart.
# "failure": the default 60 s check period, so only the re-read after the TLS
# failure can pick the file up; "periodic": a 500 ms period as well (which of
# the two wins is not observable here; the unit test
# ca_file_checked_periodically isolates the periodic check).
source "$(dirname "$0")/lib.sh"

PBIN=$TKM_BUILD_DIR/tests/e2e_k8s_ca_reload
[[ -x $PBIN ]] || fail "missing $PBIN (build first)"
T=$E2E_TMP
CA=$TKM_CLUSTER_DIR/pki/ca.crt
[[ -s $CA ]] || fail "no cluster CA at $CA"

# A CA the apiserver's certificate does not chain to.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$T/other.key" \
  -out "$T/other-ca.crt" -days 2 -subj /CN=e2e-other-ca >/dev/null 2>&1

# The token kubeconfig with its CA moved out to the file "ca.crt" beside it (relative path).
make_kubeconfig() { # FILE
  cp "$TKM_CLUSTER_DIR/token.kubeconfig" "$1"
  local cluster
  cluster=$(kubectl config --kubeconfig="$1" view -o jsonpath='{.clusters[0].name}')
  kubectl config --kubeconfig="$1" unset "clusters.$cluster.certificate-authority-data" >/dev/null
  kubectl config --kubeconfig="$1" set "clusters.$cluster.certificate-authority" ca.crt >/dev/null
}

wait_line() { # FILE PATTERN SECONDS
  local t0=$SECONDS
  until grep -q "$2" "$1" 2>/dev/null; do
    ((SECONDS - t0 < $3)) || fail "no line '$2' in $1 after $3 s: $(cat "$1")"
    sleep 0.2
  done
}

for mode in failure periodic; do
  step "CA file replaced while the client runs ($mode)"
  mkdir -p "$T/$mode"
  make_kubeconfig "$T/$mode/kc"
  assert_not_contains "$(cat "$T/$mode/kc")" "certificate-authority-data" "kubeconfig points at a CA file"
  cp "$T/other-ca.crt" "$T/$mode/ca.crt"
  reload=()
  [[ $mode == periodic ]] && reload=(500)
  e2e_valgrind "$PBIN" --kubeconfig "$T/$mode/kc" 60 "${reload[@]}" >"$T/$mode/out" 2>&1 &
  PID=$!
  e2e_on_exit "kill $PID 2>/dev/null"
  wait_line "$T/$mode/out" "ERROR" 30
  assert_contains "$(cat "$T/$mode/out")" "rc=-$(printf '%d' 71)" "the wrong CA is refused (EPROTO)"
  cp "$CA" "$T/$mode/ca.crt.new" && mv "$T/$mode/ca.crt.new" "$T/$mode/ca.crt"
  wait "$PID" || fail "the client did not trust the new CA: $(cat "$T/$mode/out")"
  assert_eq "$(grep -c '^ok$' "$T/$mode/out")" "1" "same process connected after the CA file changed"
done

e2e_done
