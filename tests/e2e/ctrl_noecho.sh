#!/usr/bin/env bash
# ctrl_noecho: whatever answers at a tenant's cacheImage never has its words copied into the
# cache's status or events (issue 23, "never echo a remote body"). A loopback HTTP server
# answers every request with 403, 401 (a WWW-Authenticate full of junk) or 500, each with a
# body full of secrets and control characters; the real tkm-controller reconciles a
# TritonKernelCache for each. The conditions and events name the HTTP status, a code from the
# distribution spec's list and the reference, never the server's text: neither the secrets nor
# a control byte appears in `kubectl get tkc -o yaml` or the events.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/ctrl_helpers.bash"

ctrl_crds
NS=$(e2e_namespace)
CTRL_NS=$NS
finish() {
  kubectl -n "$NS" delete tkc --all --wait=false >/dev/null 2>&1
  for _ in $(seq 20); do [[ -z $(kubectl -n "$NS" get tkc -o name 2>/dev/null) ]] && break; sleep 0.5; done
  ctrl_kill_all
}
e2e_on_exit finish

step "a loopback server that answers with secrets and control characters"
python3 -c '
import http.server, sys
SECRET = "INTERNAL-SECRET-abc"
BODY = ("{\"errors\":[{\"code\":\"DENIED\",\"message\":\"" + SECRET + " \\u001b[2J\\r\\n\\u0007 '"'"'\","
        "\"detail\":{\"token\":\"" + SECRET + "-detail\"}},{\"code\":\"" + SECRET + "-code\"}]}").encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self, head=False):
        with open(sys.argv[1], "a") as f: f.write(self.path + "\n")
        status, hdrs = 403, []
        if "/unauth/" in self.path:
            status, hdrs = 401, [("WWW-Authenticate", SECRET + " \x01realm=\"" + SECRET + "\"")]
        elif "/broken/" in self.path:
            status = 500
        self.send_response(status)
        for k, v in hdrs: self.send_header(k, v)
        self.send_header("Content-Type", SECRET + "/\x1b]0;x")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        if not head: self.wfile.write(BODY)
    def do_HEAD(self): self.do_GET(True)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
' "$E2E_TMP/echo.requests" >"$E2E_TMP/echo.port" &
e2e_on_exit "kill $! 2>/dev/null"
wait_for 10 "the server listens" test -s "$E2E_TMP/echo.port"
SRV=127.0.0.1:$(cat "$E2E_TMP/echo.port")

tkc() { # NAME IMAGE
  printf 'apiVersion: tkm.io/v1alpha1\nkind: TritonKernelCache\nmetadata: {name: %s}\nspec: {cacheImage: "%s"}\n' \
    "$1" "$2" | kubectl -n "$NS" apply -f - >/dev/null
}
ctrl_start c1
tkc denied "$SRV/denied/x:v1"
tkc unauth "$SRV/unauth/x:v1"
tkc broken "$SRV/broken/x:v1"
said() { kubectl -n "$NS" get tkc "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}'; }
has() { [[ $(said "$1") == *"$2"* ]]; }

step "each failure names the status, the spec's code and the reference"
wait_for 60 "denied: HTTP 403 DENIED" has denied "HTTP 403 DENIED"
wait_for 60 "unauth: 401 Unauthorized" has unauth "401"
wait_for 90 "broken: HTTP 500 (after the retries)" has broken "HTTP 500"
assert_contains "$(said denied)" "$SRV/v2/denied/x/manifests/v1" "the reference (the URL tkm built) is named"
[[ -s $E2E_TMP/echo.requests ]] || fail "the server saw no request"
pass "the server was asked $(wc -l <"$E2E_TMP/echo.requests") times"

step "neither the secret nor a control byte in the caches' YAML or the events"
wait_for 30 "Warning events recorded" bash -c "[[ -n \$(kubectl -n $NS get events --field-selector type=Warning -o name) ]]"
kubectl -n "$NS" get tkc -o yaml >"$E2E_TMP/tkc.yaml"
kubectl -n "$NS" get events -o yaml >"$E2E_TMP/events.yaml"
kubectl -n "$NS" get tkc -o json >"$E2E_TMP/tkc.json"
kubectl -n "$NS" get events -o json >"$E2E_TMP/events.json"
for f in tkc.yaml events.yaml; do
  ! grep -q "SECRET" "$E2E_TMP/$f" || fail "$f carries the server's text: $(grep -m3 SECRET "$E2E_TMP/$f")"
  pass "$f: no secret"
done
python3 - "$E2E_TMP/tkc.json" "$E2E_TMP/events.json" <<'PY' || fail "a control byte in a message"
import json, sys
bad = []
for path in sys.argv[1:]:
    def walk(v, where):
        if isinstance(v, dict):
            for k, x in v.items(): walk(x, where + "." + k)
        elif isinstance(v, list):
            for i, x in enumerate(v): walk(x, where + "[%d]" % i)
        elif isinstance(v, str) and any(ord(c) < 0x20 or ord(c) == 0x7f for c in v) and ".metadata." not in where:
            bad.append((path, where, v))
    walk(json.load(open(path)), "")
for b in bad: print("control byte:", b)
sys.exit(1 if bad else 0)
PY
pass "no control byte in any string of the caches or the events"
e2e_done
