"""grpcio as the server for tkm's client (tests/unit/test_grpc.c python_server).

usage: echo_server.py DESC SOCKET
Serves /tkm.test.Echo/Say on unix:SOCKET until SIGTERM: answers EchoReply{text,
metadata = the request's x-tkm-test value, blob}; sleeps delay_ms first; fails
with `status` and the message "failed as asked: <text>" when status != 0."""
import signal
import sys
import threading
import time
from concurrent import futures

from echo_pb import METHOD, load

import grpc

desc, sock = sys.argv[1], sys.argv[2]
Req, Rep = load(desc)


def say(req, ctx):
    if req.delay_ms:
        time.sleep(req.delay_ms / 1000.0)
    if req.status:
        ctx.abort(grpc.StatusCode(next(c for c in grpc.StatusCode if c.value[0] == req.status)),
                  "failed as asked: " + req.text)
    md = dict(ctx.invocation_metadata()).get("x-tkm-test", "")
    return Rep(text=req.text, metadata=md, blob=req.blob)


handler = grpc.method_handlers_generic_handler("tkm.test.Echo", {
    "Say": grpc.unary_unary_rpc_method_handler(say, request_deserializer=Req.FromString,
                                               response_serializer=Rep.SerializeToString)})
server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
server.add_generic_rpc_handlers((handler,))
server.add_insecure_port("unix:" + sock)
server.start()
done = threading.Event()
signal.signal(signal.SIGTERM, lambda *a: done.set())
print("echo_server.py: serving " + METHOD, flush=True)
done.wait()
server.stop(0)
