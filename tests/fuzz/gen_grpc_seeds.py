#!/usr/bin/env python3
"""gen_grpc_seeds.py - writes the fuzz_grpc seeds (committed) into corpus/grpc/.

Each seed is what a client sends on one h2c prior-knowledge connection: the
preface, SETTINGS, then frames. Header blocks use HPACK literals without
indexing (no Huffman), like tests/unit/test_grpc.c's raw requests. Rerun with
`python3 tests/fuzz/gen_grpc_seeds.py` after changing it.
"""
import os
import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST, SETTINGS, PING, GOAWAY, WINDOW, CONT = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4


def frame(t, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([t, flags]) + struct.pack(">I", sid) + payload


def hlen(n):  # HPACK integer, 7-bit prefix, no Huffman
    if n < 127:
        return bytes([n])
    out, n = [127], n - 127
    while n >= 128:
        out.append(n % 128 + 128)
        n //= 128
    return bytes(out + [n])


def lit(name, value):
    name, value = name.encode(), value.encode()
    return b"\x00" + hlen(len(name)) + name + hlen(len(value)) + value


def hdrs(path, ctype="application/grpc", extra=()):
    b = lit(":method", "POST") + lit(":scheme", "http") + lit(":path", path)
    b += lit(":authority", "localhost") + lit("content-type", ctype) + lit("te", "trailers")
    for n, v in extra:
        b += lit(n, v)
    return b


def msg(body, compressed=0):
    return bytes([compressed]) + struct.pack(">I", len(body)) + body


def call(sid, path, body, **kw):
    return frame(HEADERS, END_HEADERS, sid, hdrs(path, **kw)) + frame(DATA, END_STREAM, sid, msg(body))


START = PREFACE + frame(SETTINGS, 0, 0)
ECHO, FAIL = "/test.Echo/Echo", "/test.Echo/Fail"
seeds = {
    "echo": START + call(1, ECHO, b"\x0a\x05hello"),
    "echo_ack_timeout": START + frame(SETTINGS, ACK, 0)
    + call(1, ECHO, b"hi", extra=[("grpc-timeout", "5S"), ("x-md", "v"), ("x-bin", "AAEC")]),
    "fail": START + call(1, FAIL, b""),
    "two_calls": START + call(1, ECHO, b"a") + call(3, FAIL, b"b")
    + frame(PING, 0, 0, b"12345678") + frame(WINDOW, 0, 0, struct.pack(">I", 1000)),
    "split_data": START + frame(HEADERS, END_HEADERS, 1, hdrs(ECHO))
    + frame(DATA, 0, 1, msg(b"xyz")[:3]) + frame(DATA, END_STREAM, 1, msg(b"xyz")[3:]),
    "continuation": START + frame(HEADERS, 0, 1, hdrs(ECHO)[:20])
    + frame(CONT, END_HEADERS, 1, hdrs(ECHO)[20:]) + frame(DATA, END_STREAM, 1, msg(b"c")),
    "unknown_method": START + call(1, "/test.Echo/Nope", b""),
    "bad_ctype": START + call(1, ECHO, b"", ctype="text/plain"),
    "compressed": START + frame(HEADERS, END_HEADERS, 1, hdrs(ECHO))
    + frame(DATA, END_STREAM, 1, msg(b"zz", compressed=1)),
    "short_prefix": START + frame(HEADERS, END_HEADERS, 1, hdrs(ECHO))
    + frame(DATA, END_STREAM, 1, b"\x00\x00\x00\x01\x00ab"),
    "two_messages": START + frame(HEADERS, END_HEADERS, 1, hdrs(ECHO))
    + frame(DATA, END_STREAM, 1, msg(b"a") + msg(b"b")),
    "reset": START + frame(HEADERS, END_HEADERS, 1, hdrs(ECHO)) + frame(RST, 0, 1, b"\x00\x00\x00\x08"),
    "goaway": START + call(1, ECHO, b"g") + frame(GOAWAY, 0, 0, b"\x00\x00\x00\x01\x00\x00\x00\x00"),
    "headers_only": START + frame(HEADERS, END_HEADERS | END_STREAM, 1, hdrs(ECHO)),
    "data_stream0": START + frame(DATA, 0, 0, b"xx"),
    "bad_timeout": START + call(1, ECHO, b"t", extra=[("grpc-timeout", "999999999H")]),
    "http1": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "bad_preface": b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n",
}
here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "grpc")
for name, b in seeds.items():
    with open(os.path.join(here, name), "wb") as f:
        f.write(b)
