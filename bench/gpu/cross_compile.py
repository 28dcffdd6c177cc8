"""cross_compile.py --target cuda:80:32 --method compile|warmup [--json FILE]

Compiles the kernels of triton_workload.py (add_kernel fp32 BLOCK 1024, softmax_kernel,
matmul_kernel in two tile configs: the launches of its main()) for a GPU target that need
not be the one in the machine, into TRITON_CACHE_DIR. Nothing is launched.

--method compile  Triton's cross-compilation API: for each launch, the JIT's own
                  specialisation of the arguments (signature, constexprs, attrs) is
                  recorded without compiling (JITFunction._do_compile is wrapped and
                  returns None), then triton.compile(ASTSource(fn, signature, constexprs,
                  attrs), target=GPUTarget(backend, arch, warp), options=the launch's
                  num_warps/num_stages) writes the entry.
--method warmup   The JIT itself with the driver's current target replaced: what
                  Triton's JIT would compile on a GPU of that target (run(warmup=True)).

Both methods run in a fresh process each; bench/gpu/cross-compile.sh compares the kernel
directories they write (same names = same cache keys). The kernels are imported from
triton_workload.py, so their source text and line numbers (both in the key) are that
file's.
"""

import argparse
import json
import os
import pathlib
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

import triton_workload as tw  # noqa: E402

LAUNCHES = [
    ("add", lambda: tw.vadd(torch.float32, 1024)),
    ("softmax", tw.softmax),
    ("matmul_64x64", lambda: tw.matmul(64, 64, 32, 4, 3)),
    ("matmul_128x64", lambda: tw.matmul(128, 64, 64, 4, 4)),
]
USER_OPTIONS = ("num_warps", "num_stages", "num_ctas", "debug")


def parse_target(s):
    backend, arch, warp = s.split(":")
    return GPUTarget(backend, int(arch) if arch.isdigit() else arch, int(warp))


def never_launch():
    """Every kernel[grid](...) becomes a warmup: compiled (or recorded), not run."""
    orig = JITFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        return orig(self, *args, grid=grid, warmup=True, **kwargs)

    JITFunction.run = run


def record():
    """The JIT's own (signature, constexprs, attrs, launch options) of each launch."""
    recs = []

    def do_compile(self, key, signature, device, constexprs, options, attrs, warmup):
        recs.append((self, dict(signature), dict(constexprs), dict(attrs), options))
        return None  # run() returns None: nothing compiled, nothing launched

    orig = JITFunction._do_compile
    JITFunction._do_compile = do_compile
    try:
        for _, launch in LAUNCHES:
            launch()
    finally:
        JITFunction._do_compile = orig
    return recs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True, help="backend:arch:warp, e.g. cuda:80:32")
    ap.add_argument("--method", choices=("compile", "warmup"), required=True)
    ap.add_argument("--json")
    a = ap.parse_args()
    cache = os.environ.get("TRITON_CACHE_DIR")
    if not cache:
        sys.exit("cross_compile: TRITON_CACHE_DIR is not set")
    target = parse_target(a.target)
    never_launch()
    out = []
    if a.method == "compile":
        # The record phase creates the driver (its cuda_utils .so goes to a scratch cache:
        # TRITON_CACHE_DIR holds only what triton.compile writes).
        os.environ["TRITON_CACHE_DIR"] = cache + ".record"
        recs = record()
        os.environ["TRITON_CACHE_DIR"] = cache
        triton.knobs.cache.dir = cache
        for fn, signature, constexprs, attrs, options in recs:
            src = triton.compiler.ASTSource(fn, signature, constexprs, attrs)
            user = {k: getattr(options, k) for k in USER_OPTIONS if hasattr(options, k)}
            k = triton.compile(src, target=target, options=user)
            md = k.metadata
            out.append({
                "name": getattr(md, "name", "?"), "hash": getattr(k, "hash", "?"),
                "target": [md.target.backend, md.target.arch, md.target.warp_size],
                "options": user, "signature": {str(x): str(y) for x, y in signature.items()},
                "constexprs": {str(x): str(y) for x, y in constexprs.items()},
                "attrs": {str(x): str(y) for x, y in attrs.items()},
                "cubin_bytes": len(k.asm.get("cubin", b"")),
            })
    else:
        from triton.backends.nvidia.driver import CudaDriver

        CudaDriver.get_current_target = lambda self: target
        for name, launch in LAUNCHES:
            launch()
            out.append({"launch": name})
    r = {"method": a.method, "target": [target.backend, target.arch, target.warp_size],
         "kernels": out, "triton": triton.__version__, "torch": torch.__version__,
         "device": torch.cuda.get_device_name(0), "cache_dir": cache}
    line = json.dumps(r, sort_keys=True) + "\n"
    sys.stdout.write(line)
    if a.json:  # the same line, for cross-compile.sh's results
        pathlib.Path(a.json).write_text(line)


if __name__ == "__main__":
    main()
