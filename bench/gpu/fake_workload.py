"""fake_workload.py KIND [--miss] [--json FILE]: a CPU-only stand-in for the workloads.

For rehearsing csi-proof.sh (--fake) on a machine without a GPU, torch or Triton:
it treats TRITON_CACHE_DIR exactly as Triton 3.6's FileCacheManager does, with
the kernels of a seed cache (FAKE_SEED: an extracted fixture) as "its" kernels:
  - a kernel with a group file (__grp__<name>.json) hits when the group file
    exists and every child path in it exists (Triton drops missing children and
    then recompiles); a file without a group file (launcher .so) hits when it exists;
  - a miss "compiles" (sleeps FAKE_COMPILE_S) and writes the seed's files into
    <cache>/<key>/ through a tmp.pid_* dir and rename, then the group file with
    absolute child paths, as Triton does; on a read-only cache dir this raises
    OSError (EROFS), as Triton does;
  - --miss adds one kernel the seed lacks (a new key);
  - --probe only counts: what would hit and what would miss, compiling nothing
    (what a read-only mount would serve, before the first miss raises).
KIND full (csi-proof.sh --parts full) also treats TORCHINDUCTOR_CACHE_DIR as
Inductor does with its FX graph cache, with the files of FAKE_INDUCTOR_SEED (the
extracted Inductor fixture) as "its" entries: a file present is a hit (counted
for fxgraph/ entries as fxgraph_cache_hit), a missing one is written through a
temporary file and rename (fxgraph_cache_miss); --miss adds one FX graph entry.
Prints one JSON line shaped like triton_workload.py's. Proves nothing about GPUs;
it exercises tkm's extraction, publish and overlay with Triton's file behaviour.
"""

import argparse
import json
import os
import shutil
import sys
import time
import uuid

T0 = time.perf_counter()


def kernels(seed):
    """(key, group name or None, [files]) for every dir of the seed cache."""
    out = []
    for key in sorted(os.listdir(seed)):
        d = os.path.join(seed, key)
        if not os.path.isdir(d):
            continue
        files = sorted(f for f in os.listdir(d) if not f.startswith("__grp__"))
        grps = [f[len("__grp__"):-len(".json")] for f in os.listdir(d) if f.startswith("__grp__")]
        out.append((key, grps[0] if grps else None, files))
    return out


def hit(cache, key, grp, files):
    d = os.path.join(cache, key)
    if grp is None:
        return all(os.path.exists(os.path.join(d, f)) for f in files)
    g = os.path.join(d, f"__grp__{grp}.json")
    if not os.path.exists(g):
        return False
    with open(g) as f:
        child = json.load(f).get("child_paths") or {}
    present = {c for c, p in child.items() if os.path.exists(p)}
    return all(f in present for f in files)


def compile_into(cache, seed, key, grp, files, src_key=None):
    time.sleep(float(os.environ.get("FAKE_COMPILE_S", "0.05")))
    d = os.path.join(cache, key)
    os.makedirs(d, exist_ok=True)
    paths = {}
    for f in files:
        tmp = os.path.join(d, f"tmp.pid_{os.getpid()}_{uuid.uuid4().hex}")
        os.makedirs(tmp)
        shutil.copyfile(os.path.join(seed, src_key or key, f), os.path.join(tmp, f))
        os.replace(os.path.join(tmp, f), os.path.join(d, f))
        os.rmdir(tmp)
        paths[f] = os.path.join(d, f)
    if grp is not None:
        tmp = os.path.join(d, f"tmp.pid_{os.getpid()}_{uuid.uuid4().hex}")
        os.makedirs(tmp)
        with open(os.path.join(tmp, f"__grp__{grp}.json"), "w") as f:
            json.dump({"child_paths": paths}, f)
        os.replace(os.path.join(tmp, f"__grp__{grp}.json"), os.path.join(d, f"__grp__{grp}.json"))
        os.rmdir(tmp)


def inductor(cache, seed, miss):
    """(fx hits, fx misses) over the seed's files, as the FX graph cache does."""
    hits = misses = 0
    todo = []
    for dp, _, fs in os.walk(seed):
        for f in fs:
            rel = os.path.relpath(os.path.join(dp, f), seed)
            todo.append((rel, rel))
    if miss:
        fx = sorted(r for r, _ in todo if r.startswith("fxgraph/"))[0]
        todo.append(("fxgraph/zz/fakemiss/" + os.path.basename(fx), fx))
    for rel, src in sorted(todo):
        dst = os.path.join(cache, rel)
        is_fx = rel.startswith("fxgraph/")
        if os.path.exists(dst):
            hits += is_fx
            continue
        misses += is_fx
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        tmp = dst + f".tmp{os.getpid()}"
        shutil.copyfile(os.path.join(seed, src), tmp)
        os.replace(tmp, dst)
    return hits, misses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind")
    ap.add_argument("--miss", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--probe", action="store_true")
    a = ap.parse_args()
    cache, seed = os.environ.get("TRITON_CACHE_DIR"), os.environ.get("FAKE_SEED")
    if not cache or not seed:
        sys.exit("fake_workload: TRITON_CACHE_DIR and FAKE_SEED must be set")
    t_k = time.perf_counter()
    hits = misses = 0
    ks = kernels(seed)
    if a.miss:  # a new key: the first grouped kernel's files under another name
        key, grp, files = next(k for k in ks if k[1] is not None)
        ks.append(("FAKEMISS" + key[8:], grp, files, key))
    for k in ks:
        key, grp, files = k[0], k[1], k[2]
        if hit(cache, key, grp, files):
            hits += 1
        else:
            misses += 1
            if a.probe:
                continue
            compile_into(cache, seed, key, grp, files, k[3] if len(k) > 3 else None)
    fx = (0, 0)
    if a.kind == "full":
        ind, iseed = os.environ.get("TORCHINDUCTOR_CACHE_DIR"), os.environ.get("FAKE_INDUCTOR_SEED")
        if not ind or not iseed:
            sys.exit("fake_workload full: TORCHINDUCTOR_CACHE_DIR and FAKE_INDUCTOR_SEED must be set")
        fx = inductor(ind, iseed, a.miss)
    t_end = time.perf_counter()
    r = {"fxgraph_cache_hit": fx[0], "fxgraph_cache_miss": fx[1], "workload": a.kind, "fake": True, "miss": a.miss, "probe": a.probe, "ok": True,
         "import_s": 0.0, "kernels_s": round(t_end - t_k, 4), "startup_s": round(t_end - T0, 4),
         "listener": True, "compile_hits": hits, "compile_misses": misses,
         "triton": "fake", "torch": "fake", "device": "cpu (fake workload)", "cache_dir": cache}
    line = json.dumps(r, sort_keys=True)
    print(line)
    if a.json:
        with open(a.json, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
