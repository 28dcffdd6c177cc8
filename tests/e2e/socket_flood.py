"""Opens N idle connections to a unix socket and reports when the server closes them.

usage: socket_flood.py SOCKET N OUT_FILE

Connects N times (non-blocking, retried while the listen backlog is full),
sends nothing, then appends "connected N" to OUT_FILE and one line
"closed K T" (K connections closed by the server so far, T seconds since the
last connect) whenever K changes. Exits once all are closed, or after 120 s.
For tests/e2e/agent_limits.sh."""
import resource
import socket
import sys
import time


def main():
    path, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 64), hard))

    def log(line):
        with open(out, "a") as f:
            f.write(line + "\n")

    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        while True:
            try:
                s.connect(path)
                break
            except (BlockingIOError, InterruptedError):
                time.sleep(0.002)
        socks.append(s)
    t0 = time.monotonic()
    log("connected %d" % n)
    open_socks, closed, reported = list(socks), 0, -1
    while time.monotonic() - t0 < 120:
        still = []
        for s in open_socks:
            try:
                while True:
                    if not s.recv(65536):
                        raise ConnectionResetError
            except BlockingIOError:
                still.append(s)
            except (ConnectionResetError, OSError):
                closed += 1
                s.close()
        open_socks = still
        if closed != reported:
            log("closed %d %.2f" % (closed, time.monotonic() - t0))
            reported = closed
        if not open_socks:
            return 0
        time.sleep(0.1)
    return 1


if __name__ == "__main__":
    sys.exit(main())
