"""inductor_workload.py [--miss] [--small] [--json FILE] [--events FILE]: the torch.compile program of csi-proof.sh.

Like the Inductor fixture (tests/fixtures/triton-cache/triton-3.6.0-cuda-sm90-inductor-block:
two transformer blocks, three shapes, forward and backward): a training step of
two pre-norm transformer blocks (LayerNorm, attention, GELU MLP) compiled with
torch.compile(dynamic=False), run on three sequence lengths. The fixture's model
source is not in the repository and Inductor's kernel source (so Triton's cache
key) depends on every detail of the model, so csi-proof.sh compiles this one on
the device and takes THAT Triton cache through tkm (see bench/gpu/README.md).

Part inductor of csi-proof.sh carries Triton's cache (TRITON_CACHE_DIR) only: Inductor's
own caches are cold in every run (a fresh TORCHINDUCTOR_CACHE_DIR, the FX graph and AOT
autograd caches off). Part full carries both (TRITON_CACHE_DIR=DIR/triton,
TORCHINDUCTOR_CACHE_DIR=DIR/inductor, caches on). TRITON_CACHE_DIR unset: Inductor's
own triton/ subdir (the fixture, --small). The JSON line adds torch's counters
(fxgraph_cache_hit/miss, autograd_cache_hit/miss), Triton's compile events (hits,
misses, missed_names) and, with --events FILE, every compile event's key parts
(bench/gpu/inductor-regen.sh, docs/inductor.md).

--miss adds a fourth sequence length: new kernels that compile into the pod's
scratch layer. Prints one JSON line like triton_workload.py.
"""

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

T_IMPORT = time.perf_counter()

# Triton's compile events (hits and misses) and, with --events, every kernel's
# identity: what its cache key is made of, to see which keys differ between
# processes (bench/gpu/README.md, docs/inductor.md).
EVENTS = {"hit": 0, "miss": 0, "names": [], "missed": [], "detail": []}


def _listener(*args, **kw):
    try:  # Triton 3.6 calls it with keywords: src, metadata, metadata_group, times, cache_hit
        hit = bool(kw.get("cache_hit"))
        EVENTS["hit" if hit else "miss"] += 1
        md = kw.get("metadata") or {}
        EVENTS["names"].append(md.get("name", "?"))
        if not hit:
            EVENTS["missed"].append(md.get("name", "?"))
        if EVENTS.get("want_detail"):
            src = kw.get("src")
            fn = getattr(src, "fn", None)
            text = getattr(fn, "src", "") or ""
            import hashlib
            EVENTS["detail"].append({
                "name": md.get("name"), "hash": md.get("hash"), "cache_hit": hit,
                "src_hash": src.hash() if hasattr(src, "hash") else None,
                "fn_src_sha": hashlib.sha256(text.encode()).hexdigest(),
                "fn_cache_key": getattr(fn, "cache_key", None),
                "constants": repr(getattr(src, "constants", None)),
                "attrs": repr(getattr(src, "attrs", None)),
                "signature": repr(getattr(src, "signature", None)),
                "num_warps": md.get("num_warps"), "num_stages": md.get("num_stages"),
                "src": text,
            })
    except Exception as e:  # noqa: BLE001
        EVENTS.setdefault("errors", []).append(repr(e))


try:
    import triton  # noqa: E402

    triton.knobs.compilation.listener = _listener
    LISTENER = True
except Exception:  # an older Triton without knobs
    LISTENER = False


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Model(nn.Module):
    def __init__(self, d=256, heads=4, n=2):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(n)])
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        return self.ln(self.blocks(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--miss", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--events", help="write every compile event's key parts here")
    ap.add_argument("--small", action="store_true", help="one block, d=64, one length (the fixture)")
    a = ap.parse_args()
    EVENTS["want_detail"] = bool(a.events)
    for v in ("TORCHINDUCTOR_CACHE_DIR",):
        if not os.environ.get(v):
            sys.exit(f"inductor_workload: {v} is not set")
    torch.manual_seed(0)
    torch.empty(1, device="cuda")
    model = (Model(d=64, heads=2, n=1) if a.small else Model()).cuda()
    step = torch.compile(lambda x: model(x).float().pow(2).mean(), dynamic=False)
    seqs = [64] if a.small else [64, 128, 256] + ([512] if a.miss else [])
    t_k = time.perf_counter()
    ok = True
    for s in seqs:
        x = torch.randn(8, s, 64 if a.small else 256, device="cuda", requires_grad=True)
        loss = step(x)
        loss.backward()
        ok = ok and bool(torch.isfinite(loss).item()) and bool(torch.isfinite(x.grad).all().item())
    torch.cuda.synchronize()
    t_end = time.perf_counter()
    from torch._dynamo.utils import counters

    ind = {k: v for k, v in counters["inductor"].items() if "cache" in k}
    aot = {k: v for k, v in counters["aot_autograd"].items() if "cache" in k}
    r = {
        "workload": "inductor", "miss": a.miss, "ok": ok, "seqs": seqs,
        "import_s": round(T_IMPORT - T0, 4), "kernels_s": round(t_end - t_k, 4),
        "startup_s": round(t_end - T0, 4), "triton": triton.__version__,
        "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
        "cache_dir": os.environ.get("TRITON_CACHE_DIR", ""),
        "inductor_dir": os.environ["TORCHINDUCTOR_CACHE_DIR"], "listener": LISTENER,
        "compile_hits": EVENTS["hit"], "compile_misses": EVENTS["miss"],
        "fxgraph_cache_hit": ind.get("fxgraph_cache_hit", 0),
        "fxgraph_cache_miss": ind.get("fxgraph_cache_miss", 0),
        "autograd_cache_hit": aot.get("autograd_cache_hit", 0),
        "autograd_cache_miss": aot.get("autograd_cache_miss", 0),
        "inductor_counters": ind, "aot_counters": aot,
        "missed_names": EVENTS["missed"],
    }
    if a.events:
        with open(a.events, "w") as f:
            json.dump({"events": EVENTS["detail"], "errors": EVENTS.get("errors", [])}, f)
    line = json.dumps(r, sort_keys=True)
    print(line)
    if a.json:
        with open(a.json, "w") as f:
            f.write(line + "\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
