#!/usr/bin/env python3
"""registry_gets.py LOG DIGEST...: "GETS PEAK GAP" of blobs in a registry's own access log.

LOG is a docker-registry log written with hack/registry.sh --access-log: the "response completed"
lines of GET /v2/.../blobs/DIGEST (any DIGEST given) are counted, and the peak number of them in
flight at once
(each request's interval is its completion time minus its http.response.duration), and the
shortest time in seconds between two of them starting (0 for fewer than two). The registry's
duration ends when the last byte went to the socket: a client that reads slowly (tkm-agent
--pull-bandwidth) is seen by when its next request starts, not by the duration. Used by
bench/fleet.sh and tests/e2e/agent_prefetch_slots.sh: what a registry saw, never tkm's own
count.
"""
import re, sys
from datetime import datetime
log, layers = sys.argv[1], sys.argv[2:]
def dur(s):
    t = 0.0
    for v, u in re.findall(r"([0-9.]+)(ns|µs|us|ms|s|m|h)", s):
        t += float(v) * {"ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}[u]
    return t
iv = []
for line in open(log, errors="replace"):
    if 'msg="response completed"' not in line or "http.request.method=GET" not in line or not any(f"/blobs/{l}" in line for l in layers):
        continue
    end = datetime.strptime(re.search(r'time="([^".]+)', line).group(1), "%Y-%m-%dT%H:%M:%S").timestamp()
    end += float("0." + (re.search(r'time="[^".]+\.(\d+)', line) or [None, "0"])[1])
    iv.append((end - dur(re.search(r"http.response.duration=(\S+)", line).group(1)), end))
ev = sorted([(a, 1) for a, _ in iv] + [(b, -1) for _, b in iv])
peak = cur = 0
for _, d in ev:
    cur += d
    peak = max(peak, cur)
starts = sorted(a for a, _ in iv)
gap = min((b - a for a, b in zip(starts, starts[1:])), default=0.0)
print(len(iv), peak, f"{gap:.3f}")
