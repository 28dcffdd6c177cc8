"""tkm_tce_shim: how bench/gpu/consumers-proof.sh names TCE's cache manager to Triton.

TRITON_CACHE_MANAGER=tkm_tce_shim:HierarchicalCacheManager is TCE's own class, unchanged (the
same object as triton_cache_extensions.runtime.cache.HierarchicalCacheManager); importing this
module only adds a record of TCE's signature checks: SignedCacheManager._verify_group is wrapped
so that every group it checks (passed or refused) is one JSON line in $TKM_TCE_EVENTS. The check
itself is TCE's (enhanced_pathlib's EPath.read_bytes with signed='sha384', pycryptodome's
pkcs1_15), called exactly as before.

TRITON_CACHE_MANAGER=tkm_tce_shim:PerKeyHierarchicalCacheManager is TCE's class with one change,
said in the results: TCE keeps its list of managers at class level and builds it once, with the
key of the first cache lookup of the process, so every later lookup (another kernel, another
key) reads the directory of that first key. This subclass empties the list before each
construction, so the list is built for the key Triton asked for. Nothing else differs.
"""

import json
import os

from triton_cache_extensions.runtime import cache as _tce

HierarchicalCacheManager = _tce.HierarchicalCacheManager

_LOG = os.environ.get("TKM_TCE_EVENTS")
_verify = _tce.SignedCacheManager._verify_group


def _emit(**kw):
    if _LOG:
        with open(_LOG, "a") as f:
            f.write(json.dumps(kw, sort_keys=True) + "\n")


def _verify_group(self, group):
    if group is None:  # no group for this key in the signed cache: TCE checks nothing
        return _verify(self, group)
    files = sorted(os.path.basename(p) for p in group.values())
    try:
        _verify(self, group)
    except Exception as e:
        _emit(event="verify", ok=False, key=self.key, files=files, error=f"{type(e).__name__}: {e}")
        raise
    _emit(event="verify", ok=True, key=self.key, files=files)


_tce.SignedCacheManager._verify_group = _verify_group


class PerKeyHierarchicalCacheManager(HierarchicalCacheManager):
    """TCE's HierarchicalCacheManager with its manager list built for this key (see above)."""

    def __init__(self, key, override=False, dump=False):
        base = HierarchicalCacheManager
        base.managers = []
        base.rsa_keys = []
        base.needs_init = True
        super().__init__(key, override=override, dump=dump)
