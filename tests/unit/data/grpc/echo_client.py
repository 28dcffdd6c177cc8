"""grpcio as the client of tkm's server (tests/unit/test_grpc.c python_client).

usage: echo_client.py DESC SOCKET
Exits 0 when every check passed, 1 with a message on the first failure,
3 when python3-grpcio/python3-protobuf are missing."""
import sys

from echo_pb import METHOD, ODD_MESSAGE, load

import grpc

desc, sock = sys.argv[1], sys.argv[2]
Req, Rep = load(desc)


def check(cond, what):
    if not cond:
        sys.stderr.write("echo_client.py: FAILED: %s\n" % what)
        sys.exit(1)


with grpc.insecure_channel("unix:" + sock) as ch:
    say = ch.unary_unary(METHOD, request_serializer=Req.SerializeToString,
                         response_deserializer=Rep.FromString)
    # 1. round trip with metadata (accepted, ignored) and a deadline
    rep = say(Req(text="hello from python", blob=b"\x00\x01\xff" * 1000), timeout=10,
              metadata=[("x-tkm-test", "py-md")])
    check(rep.text == "hello from python", "text %r" % rep.text)
    check(rep.metadata == "", "metadata %r (the C server reads none)" % rep.metadata)
    check(rep.blob == b"\x00\x01\xff" * 1000, "blob of %d bytes" % len(rep.blob))
    # 2. a status code and an odd message cross intact
    try:
        say(Req(text=ODD_MESSAGE, status=grpc.StatusCode.NOT_FOUND.value[0]), timeout=10)
        check(False, "status: no error raised")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.NOT_FOUND, "status code %s" % e.code())
        check(e.details() == "failed as asked: " + ODD_MESSAGE, "status message %r" % e.details())
    # 3. unknown method
    nope = ch.unary_unary("/tkm.test.Echo/Nope", request_serializer=None,
                          response_deserializer=None)
    try:
        nope(b"", timeout=10)
        check(False, "unknown method: no error raised")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.UNIMPLEMENTED, "unknown method: %s" % e.code())
    # 4. deadline: the server answers after 3 s, we wait 300 ms
    try:
        say(Req(text="slow", delay_ms=3000), timeout=0.3)
        check(False, "deadline: no error raised")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, "deadline: %s" % e.code())
    # 5. 2 MiB each way: HTTP/2 flow control on both sides
    big = bytes(range(256)) * 8192
    rep = say(Req(text="big", blob=big), timeout=30)
    check(rep.blob == big, "2 MiB blob came back as %d bytes" % len(rep.blob))
    # 6. raw bytes through the same method (no serializer) still decode on our side
    raw = ch.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
    out = raw(Req(text="raw").SerializeToString(), timeout=10)
    check(Rep.FromString(out).text == "raw", "raw bytes round trip")

print("echo_client.py: all checks passed")
