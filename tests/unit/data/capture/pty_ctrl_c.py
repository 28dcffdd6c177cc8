"""pty_ctrl_c.py TKMCTL FIXTURE OUT_DIR: tkmctl capture on a terminal (a pty), Ctrl-C typed.

The command (a shell) reads a line from the terminal, says so, and waits; a Ctrl-C typed on the
terminal reaches it (its trap notes it in OUT_DIR/got and exits 0) and tkmctl, which then builds
nothing. Prints what the terminal showed and, last, "status N" (tkmctl's exit status).
Used by tests/unit/test_capture.c (unit.capture.ctrl_c_on_a_terminal).
"""
import os
import pty
import sys

ctl, fx, out = sys.argv[1], sys.argv[2], sys.argv[3]
pid, fd = pty.fork()
if pid == 0:
    os.environ["TMPDIR"] = os.path.join(out, "tmp")
    os.execv(ctl, [ctl, "capture", "--output", os.path.join(out, "img"), "--", "sh", "-c",
                   "trap 'echo got-int > \"$1\"/got; exit 0' INT; "
                   "cp -r \"$0\"/. \"$TRITON_CACHE_DIR\"/; echo READY; read x; echo \"READ $x\"; "
                   "while :; do sleep 0.05; done", fx, out])
seen = b""


def until(word):
    global seen
    while word not in seen:
        b = os.read(fd, 4096)
        if not b:
            sys.exit("terminal closed before " + word.decode())
        seen += b


until(b"READY")
os.write(fd, b"hello\n")  # the command reads the terminal
until(b"READ hello")
os.write(fd, b"\x03")  # Ctrl-C typed on the terminal
while True:
    try:
        b = os.read(fd, 4096)
    except OSError:  # EIO: the terminal's last process ended
        break
    if not b:
        break
    seen += b
_, st = os.waitpid(pid, 0)
print(seen.decode(errors="replace"))
print("status", os.waitstatus_to_exitcode(st))
