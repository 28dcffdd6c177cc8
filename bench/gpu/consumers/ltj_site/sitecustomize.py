"""sitecustomize for the libtriton_jit runs of bench/gpu/consumers-proof.sh.

libtriton_jit embeds Python (Py_InitializeEx, which imports site and so this module when its
folder is on PYTHONPATH) and imports its scripts/standalone_compile.py to compile a kernel. This
module counts without changing what it does:
  - every call of standalone_compile.compile_a_kernel (the compile script's entry point, called
    once per new kernel signature in a process), with the cache dir it returned;
  - every triton.compile() outcome through Triton's own compile listener (cache_hit true/false).
Each event is one JSON line appended to $TKM_LTJ_EVENTS. $TKM_LTJ_SITE (the Python environment's
site-packages, with torch and Triton) is added with site.addsitedir, as that environment's own
interpreter would (an embedded interpreter starts from the system prefix, not the venv's).
"""

import json
import os
import sys
import time

_LOG = os.environ.get("TKM_LTJ_EVENTS")
_SITE = os.environ.get("TKM_LTJ_SITE")

if _SITE:
    import site

    site.addsitedir(_SITE)


def _emit(**kw):
    with open(_LOG, "a") as f:
        f.write(json.dumps(kw, sort_keys=True) + "\n")


def _listener(*, src=None, metadata=None, cache_hit=None, **_):
    name = metadata.get("name", "?") if isinstance(metadata, dict) else "?"
    _emit(event="triton.compile", name=name, cache_hit=bool(cache_hit))


def _wrap(mod):
    inner = mod.compile_a_kernel

    def compile_a_kernel(source_path, fn_name, signature, *args, **kw):
        t0 = time.perf_counter()
        cache_dir = inner(source_path, fn_name, signature, *args, **kw)
        _emit(event="compile_a_kernel", fn=str(fn_name), signature=str(signature),
              cache_dir=str(cache_dir), seconds=round(time.perf_counter() - t0, 4))
        return cache_dir

    mod.compile_a_kernel = compile_a_kernel
    import triton  # standalone_compile imported it already

    triton.knobs.compilation.listener = _listener
    _emit(event="loaded", module=mod.__name__, triton=triton.__version__, python=sys.version.split()[0])


if _LOG:
    import importlib.abc
    import importlib.machinery

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "standalone_compile":
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None or spec.loader is None:
                return spec
            run = spec.loader.exec_module

            def exec_module(mod):
                run(mod)
                _wrap(mod)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _Finder())
