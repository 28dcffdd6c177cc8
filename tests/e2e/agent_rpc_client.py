"""grpcio as the CSI driver's stand-in for tests/e2e/agent_rpc.sh.

usage: agent_rpc_client.py DESC SOCKET < requests.jsonl
Each input line is one call:
  {"m": "Materialize", "ns": "a", "pod": "p", "uid": "u", "vol": "v",
   "attrs": {"cacheName": "x"}, "timeout": 5}
  {"m": "Release", "vol": "v"}
  {"m": "Release", "vol": "v", "scratch": {"triton_kernels": 2, "kernel_names": ["k"]}}
  {"m": "Status"}
and gives one output line:
  {"code": "OK", "details": "", "resp": {field: value, ...}}
Messages come from the descriptor set protoc-c wrote for agent/agent.proto
(no Python protoc needed). Exits 3 when python3-grpcio/python3-protobuf
are missing."""
import json
import sys

try:
    import grpc
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
except ImportError as e:
    sys.stderr.write("agent_rpc_client.py: %s: install the Debian packages python3-grpcio and "
                     "python3-protobuf (hack/deps.sh)\n" % e)
    sys.exit(3)

SERVICE = "/tkm.agent.v1.Agent/"


def load(desc_path):
    with open(desc_path, "rb") as f:
        fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fd in fds.file:
        pool.Add(fd)

    def cls(name):
        d = pool.FindMessageTypeByName("tkm.agent.v1." + name)
        if hasattr(message_factory, "GetMessageClass"):
            return message_factory.GetMessageClass(d)
        return message_factory.MessageFactory(pool).GetPrototype(d)

    return {n: cls(n) for n in ("MaterializeRequest", "MaterializeResponse", "ReleaseRequest",
                                "ScratchCount",
                                "ReleaseResponse", "StatusRequest", "StatusResponse")}


def as_dict(msg):
    """The response's fields; repeated ones (store_paths, parts) as lists."""
    out = {}
    for f in msg.DESCRIPTOR.fields:
        v = getattr(msg, f.name)
        out[f.name] = v if isinstance(v, (str, bytes, bool, int, float)) else list(v)
    return out


def main():
    desc, sock = sys.argv[1], sys.argv[2]
    M = load(desc)
    with grpc.insecure_channel("unix:" + sock) as ch:
        for line in sys.stdin:
            if not line.strip():
                continue
            c = json.loads(line)
            m = c["m"]
            if m == "Materialize":
                req = M["MaterializeRequest"](pod_namespace=c.get("ns", ""),
                                              pod_name=c.get("pod", ""),
                                              pod_uid=c.get("uid", ""),
                                              volume_id=c.get("vol", ""))
                for k, v in c.get("attrs", {}).items():
                    req.volume_attributes[k] = v
            elif m == "Release":
                req = M["ReleaseRequest"](volume_id=c.get("vol", ""))
                if "scratch" in c:  # tkm-csi's counts of the pod's scratch layer
                    req.scratch.CopyFrom(M["ScratchCount"](**c["scratch"]))
            else:
                req = M["StatusRequest"]()
            stub = ch.unary_unary(SERVICE + m, request_serializer=lambda r: r.SerializeToString(),
                                  response_deserializer=M[m + "Response"].FromString)
            out = {"code": "OK", "details": "", "resp": {}}
            try:
                out["resp"] = as_dict(stub(req, timeout=c.get("timeout", 10)))
            except grpc.RpcError as e:
                out["code"] = e.code().name
                out["details"] = e.details() or ""
            print(json.dumps(out, sort_keys=True), flush=True)


main()
