#!/usr/bin/python3
"""record_grpcio_seed.py METHOD TEXT OUT - records what the grpcio client sends.

Listens on a unix socket, sends an empty SETTINGS, lets one grpcio unary call
(1 s timeout, metadata x-md: v) run against it, and writes every byte the
client sent (preface, SETTINGS, HEADERS with HPACK indexing, DATA, then the
RST_STREAM of the timeout) to OUT: fuzz_grpc seeds grpcio_echo, grpcio_fail.
Needs /usr/bin/python3 with python3-grpcio.
"""
import os
import socket
import sys
import tempfile
import threading

import grpc


def main():
    method, text, out = sys.argv[1:4]
    path = os.path.join(tempfile.mkdtemp(), "rec.sock")
    ls = socket.socket(socket.AF_UNIX)
    ls.bind(path)
    ls.listen(1)
    data = bytearray()

    def serve():
        c, _ = ls.accept()
        c.settimeout(1.5)
        c.sendall(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")  # SETTINGS, empty
        try:
            while True:
                b = c.recv(65536)
                if not b:
                    break
                data.extend(b)
        except socket.timeout:
            pass
        c.close()

    t = threading.Thread(target=serve)
    t.start()
    ch = grpc.insecure_channel("unix:" + path)
    f = ch.unary_unary(method, request_serializer=None, response_deserializer=None)
    try:
        f(text.encode(), timeout=1, metadata=[("x-md", "v")])
    except grpc.RpcError:
        pass  # expected: nobody answers
    t.join()
    ch.close()
    with open(out, "wb") as o:
        o.write(bytes(data))


main()
