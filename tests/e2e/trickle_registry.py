"""A registry on 127.0.0.1 that serves one OCI layout and trickles its layers.

usage: trickle_registry.py LAYOUT_DIR PORT_FILE LOG_FILE [INTERVAL_S]

Serves /v2/, the layout's image manifest (by any tag and by digest) and its
config blob at once, and every layer blob one byte per INTERVAL_S (default
0.5 s: 2 bytes/s, faster than the 1 byte/s a stalled transfer is measured
against, so only an overall deadline stops the download). Writes its port to
PORT_FILE once listening and one line per request ("GET <path>") to LOG_FILE.
For tests/e2e/agent_limits.sh; loopback only."""
import http.server
import json
import os
import sys
import time


def main():
    layout, port_file, log_file = sys.argv[1], sys.argv[2], sys.argv[3]
    interval = float(sys.argv[4]) if len(sys.argv) > 4 else 0.5
    blobs = os.path.join(layout, "blobs", "sha256")
    with open(os.path.join(layout, "index.json")) as f:
        top = json.load(f)["manifests"][0]
    manifest_digest = top["digest"]
    with open(os.path.join(blobs, manifest_digest[7:]), "rb") as f:
        manifest = f.read()
    media_type = json.loads(manifest).get("mediaType", top.get("mediaType"))
    layers = {d["digest"] for d in json.loads(manifest)["layers"]}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            pass

        def answer(self, status, body, ctype="application/json", extra=None):
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Docker-Distribution-API-Version", "registry/2.0")
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self):
            with open(log_file, "a") as f:
                f.write("%s %s\n" % (self.command, self.path))
            path = self.path.split("?")[0]
            if path in ("/v2", "/v2/"):
                return self.answer(200, b"{}")
            if "/manifests/" in path:
                return self.answer(200, manifest, media_type,
                                   {"Docker-Content-Digest": manifest_digest})
            if "/blobs/sha256:" in path:
                digest = "sha256:" + path.rsplit("/blobs/sha256:", 1)[1]
                name = os.path.join(blobs, digest[7:])
                if "/" in digest or not os.path.isfile(name):
                    return self.answer(404, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}')
                with open(name, "rb") as f:
                    data = f.read()
                if digest not in layers or self.command == "HEAD":
                    return self.answer(200, data, "application/octet-stream")
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    for i in range(len(data)):
                        self.wfile.write(data[i:i + 1])
                        self.wfile.flush()
                        time.sleep(interval)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True
                return None
            return self.answer(404, b'{"errors":[{"code":"NAME_UNKNOWN"}]}')

        do_HEAD = do_GET

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    with open(port_file + ".tmp", "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(port_file + ".tmp", port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
