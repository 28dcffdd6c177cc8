"""EchoRequest/EchoReply classes from the descriptor set that protoc-c wrote
at build time from echo.proto (so no protoc for Python is needed)."""
import sys

try:
    import grpc  # noqa: F401  (imported here so both scripts fail the same way)
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError as e:
    sys.stderr.write("test_grpc: %s: install the Debian packages python3-grpcio and "
                     "python3-protobuf (hack/deps.sh)\n" % e)
    sys.exit(3)


def load(desc_path):
    with open(desc_path, "rb") as f:
        fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fd in fds.file:
        pool.Add(fd)

    def cls(name):
        d = pool.FindMessageTypeByName(name)
        if hasattr(message_factory, "GetMessageClass"):
            return message_factory.GetMessageClass(d)
        return message_factory.MessageFactory(pool).GetPrototype(d)

    return cls("tkm.test.EchoRequest"), cls("tkm.test.EchoReply")


METHOD = "/tkm.test.Echo/Say"
# Crosses the wire percent-encoded in grpc-message.
ODD_MESSAGE = "100% sure: \u00fcml\u00e4ut \u2603\nnext line"
