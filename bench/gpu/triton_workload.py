"""triton_workload.py [--miss] [--json FILE]: the Triton program of bench/gpu/csi-proof.sh.

The kernels of the sm90 fixture (tests/fixtures/triton-cache/triton-3.6.0-cuda-sm90):
add_kernel (fp32, BLOCK 1024), softmax_kernel (one row per program), matmul_kernel
(fp16, two tile configs), written anew here: the fixture's Python source
(gen_triton_cache.py) is not in the repository and Triton's cache key hashes the
kernel's source text, so csi-proof.sh compiles these once on the device and takes
THAT cache through tkm (see bench/gpu/README.md).

--miss adds kernels no cache run has seen (add_kernel on fp16 with BLOCK 512, a
third matmul tile config): they must compile into the pod's scratch layer.

Prints one JSON line (and writes it to --json): seconds from process start to
after the imports, to after every kernel ran and was checked (start-up), the
kernels' own share (first launch -> synchronised), and Triton's compile events
(cache hits and misses, from triton.knobs.compilation.listener where available).
TRITON_CACHE_DIR must be set by the caller.
"""

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

T_IMPORT = time.perf_counter()

EVENTS = {"hit": 0, "miss": 0, "names": []}


def _listener(*args, **kw):
    try:  # Triton 3.6 calls it with keywords: src, metadata, metadata_group, times, cache_hit
        EVENTS["hit" if kw.get("cache_hit") else "miss"] += 1
        md = kw.get("metadata")
        EVENTS["names"].append(md.get("name", "?") if isinstance(md, dict) else "?")
    except Exception:
        pass


try:
    triton.knobs.compilation.listener = _listener
    LISTENER = True
except Exception:  # an older Triton without knobs: the file counts still tell
    LISTENER = False


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * out_stride + cols, num / tl.sum(num, axis=0), mask=mask)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        am = (rm[:, None] < M) & (rk[None, :] + k * BK < K)
        bm = (rk[:, None] + k * BK < K) & (rn[None, :] < N)
        acc += tl.dot(tl.load(a, mask=am, other=0.0), tl.load(b, mask=bm, other=0.0))
        a += BK * sak
        b += BK * sbk
    c = c_ptr + rm[:, None] * scm + rn[None, :] * scn
    tl.store(c, acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


def vadd(dtype, block):
    n = 1 << 20
    x = torch.rand(n, device="cuda", dtype=dtype)
    y = torch.rand(n, device="cuda", dtype=dtype)
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block)
    return torch.allclose(out, x + y)


def softmax():
    x = torch.randn(512, 1000, device="cuda", dtype=torch.float32)
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](out, x, x.stride(0), out.stride(0), x.shape[1],
                                  BLOCK=triton.next_power_of_2(x.shape[1]))
    return torch.allclose(out, torch.softmax(x, dim=1), atol=1e-5)


def matmul(bm, bn, bk, warps, stages):
    m, n, k = 512, 512, 512
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1), BM=bm, BN=bn, BK=bk, num_warps=warps,
                        num_stages=stages)
    return torch.allclose(c.float(), (a.float() @ b.float()), atol=0.5, rtol=1e-2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--miss", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not os.environ.get("TRITON_CACHE_DIR"):
        sys.exit("triton_workload: TRITON_CACHE_DIR is not set")
    torch.cuda.init()
    torch.empty(1, device="cuda")  # the CUDA context, outside the kernels' share
    t_k = time.perf_counter()
    checks = {
        "add": vadd(torch.float32, 1024),
        "softmax": softmax(),
        "matmul_64x64": matmul(64, 64, 32, 4, 3),
        "matmul_128x64": matmul(128, 64, 64, 4, 4),
    }
    if a.miss:
        checks["add_fp16_512"] = vadd(torch.float16, 512)
        checks["matmul_32x32"] = matmul(32, 32, 32, 2, 2)
    torch.cuda.synchronize()
    t_end = time.perf_counter()
    r = {
        "workload": "triton", "miss": a.miss, "ok": all(checks.values()), "checks": checks,
        "import_s": round(T_IMPORT - T0, 4), "kernels_s": round(t_end - t_k, 4),
        "startup_s": round(t_end - T0, 4), "listener": LISTENER,
        "compile_hits": EVENTS["hit"], "compile_misses": EVENTS["miss"],
        "compiled_names": EVENTS["names"],
        "triton": triton.__version__, "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0), "cache_dir": os.environ["TRITON_CACHE_DIR"],
    }
    line = json.dumps(r, sort_keys=True)
    print(line)
    if a.json:
        with open(a.json, "w") as f:
            f.write(line + "\n")
    sys.exit(0 if r["ok"] else 1)


if __name__ == "__main__":
    main()
