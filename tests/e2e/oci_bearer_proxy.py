#!/usr/bin/env python3
"""oci_bearer_proxy.py - a token-auth front for a real registry (tests only).

Listens on 127.0.0.1 (a free port, printed on stdout), serves a token
endpoint at /token that checks Basic credentials (user:pass from argv) and
returns {"token": ...} (POST /token: the refresh_token grant, with PASS as the
refresh token, returns {"access_token": ...}), and proxies every /v2/ request to the upstream
registry only when it carries "Authorization: Bearer <that token>"; otherwise
it answers 401 with a Bearer challenge (realm, service, scope), as Docker Hub
and quay do. With a 4th argument "flaky", the first GET of every manifest
answers 503 (Retry-After: 0) and the first GET of every blob is cut off
halfway, so clients must retry and restart a partial download.
Usage: oci_bearer_proxy.py UPSTREAM_HOST:PORT USER PASS [flaky]
"""
import base64
import http.client
import http.server
import json
import sys

UPSTREAM, USER, PASS = sys.argv[1], sys.argv[2], sys.argv[3]
FLAKY = len(sys.argv) > 4 and sys.argv[4] == "flaky"
SEEN = set()
TOKEN = "tkm-e2e-token-" + base64.b16encode(USER.encode()).decode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def token(self):
        auth = self.headers.get("Authorization", "")
        want = "Basic " + base64.b64encode(f"{USER}:{PASS}".encode()).decode()
        if auth != want:
            return self.reply(401, b'{"details":"bad credentials"}', [("Content-Type", "application/json")])
        if "scope=repository" not in self.path or "service=tkm-e2e" not in self.path:
            return self.reply(400, b'{"details":"missing scope or service"}')
        body = json.dumps({"token": TOKEN, "expires_in": 300}).encode()
        self.reply(200, body, [("Content-Type", "application/json")])

    def refresh(self):
        # OAuth2 refresh-token grant (docker config "identitytoken"); PASS is the refresh token.
        import urllib.parse
        n = int(self.headers.get("Content-Length") or 0)
        form = urllib.parse.parse_qs(self.rfile.read(n).decode())
        if form.get("grant_type") != ["refresh_token"] or form.get("refresh_token") != [PASS] \
                or form.get("service") != ["tkm-e2e"] or not form.get("scope"):
            return self.reply(401, b'{"error":"invalid_grant"}', [("Content-Type", "application/json")])
        body = json.dumps({"access_token": TOKEN, "expires_in": 300}).encode()
        self.reply(200, body, [("Content-Type", "application/json")])

    def do_POST(self):
        if self.path.startswith("/token"):
            return self.refresh()
        self.proxy()

    def proxy(self):
        if self.headers.get("Authorization", "") != "Bearer " + TOKEN:
            repo = self.path.split("/")[2:4]
            scope = "repository:%s:pull" % "/".join(repo) if len(repo) == 2 else ""
            if self.command in ("POST", "PUT", "PATCH"):
                scope += ",push"
            realm = "http://%s/token" % self.headers["Host"]
            ch = 'Bearer realm="%s",service="tkm-e2e"' % realm
            if scope:
                ch += ',scope="%s"' % scope
            body = b'{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}'
            return self.reply(401, body, [("WWW-Authenticate", ch), ("Content-Type", "application/json")])
        if FLAKY and self.command == "GET" and self.path not in SEEN:
            SEEN.add(self.path)
            if "/manifests/" in self.path:
                return self.reply(503, b"", [("Retry-After", "0")])
            if "/blobs/" in self.path:
                c = http.client.HTTPConnection(UPSTREAM, timeout=60)
                c.request("GET", self.path)
                body = c.getresponse().read()
                c.close()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
        n = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(n) if n else None
        hdrs = {k: v for k, v in self.headers.items() if k.lower() != "authorization"}
        c = http.client.HTTPConnection(UPSTREAM, timeout=60)
        c.request(self.command, self.path, body=data, headers=hdrs)
        r = c.getresponse()
        body = r.read()
        out = [(k, v) for k, v in r.getheaders() if k.lower() not in ("content-length", "transfer-encoding", "connection")]
        self.reply(r.status, body, out)
        c.close()

    def do_GET(self):
        if self.path.startswith("/token"):
            return self.token()
        self.proxy()

    do_HEAD = do_PUT = do_PATCH = do_DELETE = proxy


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("127.0.0.1:%d" % srv.server_address[1], flush=True)
srv.serve_forever()
