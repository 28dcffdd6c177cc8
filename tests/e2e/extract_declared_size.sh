#!/usr/bin/env bash
# extract_declared_size: `tkmctl extract REF` without --max-bytes checks the sizes the
# manifest declares against its default cap (32Gi, as --help says) before it downloads any
# layer: a manifest declaring a 1 PiB layer is refused with a clear message and exit 1, and
# the registry never sees a request for that layer's blob. The registry is a small one of
# the test's own on 127.0.0.1 that logs every request (the fixture registry keeps no access
# log); it serves the manifest and its config, and answers 404 to anything else.
source "$(dirname "$0")/lib.sh"
TKMCTL=$TKM_BUILD_DIR/cli/tkmctl
[[ -x $TKMCTL ]] || fail "tkmctl not built at $TKMCTL"

step "a registry serving e2e/pib:v1, a manifest with a 1 PiB layer"
python3 - "$E2E_TMP/reg.log" >"$E2E_TMP/reg.port" 2>"$E2E_TMP/reg.err" <<'PY' &
import hashlib, http.server, json, sys
log = sys.argv[1]
layer = "sha256:" + hashlib.sha256(b"never served").hexdigest()
config = json.dumps({"architecture": "amd64", "os": "linux",
                     "rootfs": {"type": "layers", "diff_ids": [layer]},
                     "config": {"Labels": {}}}).encode()
cdig = "sha256:" + hashlib.sha256(config).hexdigest()
MT = "application/vnd.oci.image.manifest.v1+json"
manifest = json.dumps({"schemaVersion": 2, "mediaType": MT,
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cdig, "size": len(config)},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer, "size": 1 << 50}]}).encode()
mdig = "sha256:" + hashlib.sha256(manifest).hexdigest()
class H(http.server.BaseHTTPRequestHandler):
    def answer(self, body):
        with open(log, "a") as f:
            f.write("%s %s\n" % (self.command, self.path))
        p = self.path.split("?")[0]
        if p == "/v2/":
            body, ct, dig = b"{}", "application/json", None
        elif p in ("/v2/e2e/pib/manifests/v1", "/v2/e2e/pib/manifests/" + mdig):
            body, ct, dig = manifest, MT, mdig
        elif p == "/v2/e2e/pib/blobs/" + cdig:
            body, ct, dig = config, "application/octet-stream", cdig
        else:
            self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers(); return
        self.send_response(200)
        self.send_header("Content-Type", ct)
        self.send_header("Content-Length", str(len(body)))
        if dig:
            self.send_header("Docker-Content-Digest", dig)
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)
    def do_GET(self): self.answer(True)
    def do_HEAD(self): self.answer(False)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], layer, flush=True)
s.serve_forever()
PY
e2e_on_exit "kill $! 2>/dev/null"
wait_for 10 "the registry listens" test -s "$E2E_TMP/reg.port"
read -r PORT LAYER <"$E2E_TMP/reg.port"

step "tkmctl extract without --max-bytes"
mkdir -p "$E2E_TMP/out"
rc=0
OUT=$("$TKMCTL" extract "127.0.0.1:$PORT/e2e/pib:v1" --output "$E2E_TMP/out/c" 2>&1) || rc=$?
assert_eq 1 "$rc" "a 1 PiB layer is refused by the default cap: exit 1 ($OUT)"
assert_contains "$OUT" "layer(s) and config add up to 1125899906842" "the message says the declared size"
assert_contains "$OUT" "over the 34359738368-byte cap (--max-bytes)" "and the cap (32Gi)"
[[ -s $E2E_TMP/reg.log ]] || fail "the registry saw no request at all"
assert_contains "$(cat "$E2E_TMP/reg.log")" "GET /v2/e2e/pib/manifests/" "the manifest was read"
assert_not_contains "$(cat "$E2E_TMP/reg.log")" "/blobs/$LAYER" "the layer's blob was never requested"
assert_eq "" "$(ls -A "$E2E_TMP/out")" "nothing left beside --output"

step "an explicit --max-bytes still decides"
expect_fail "--max-bytes 1Mi refuses it too" "$TKMCTL" extract "127.0.0.1:$PORT/e2e/pib:v1" --output "$E2E_TMP/out/c" --max-bytes 1Mi
assert_contains "$OUT" "over the 1048576-byte cap (--max-bytes)" "the given cap is named"
assert_not_contains "$(cat "$E2E_TMP/reg.log")" "/blobs/$LAYER" "the layer's blob was never requested"
e2e_done
