"""cache_retarget.py SRC DST ARCH: DST = a copy of the Triton cache SRC as a build for
another CUDA arch would look to tkm and to Triton's FileCacheManager.

There is no real cache from a second GPU type in tests/fixtures, so the image-volume
comparison (node_imagevol.sh) derives one from the sm90 fixture: every kernel with a
metadata JSON gets the target arch ARCH, a new hash, and a new directory key (Triton's
key hashes the target, so the same source compiled for another GPU lands under another
key); its group file names the new paths. Launcher and utility .so directories (host
code, keyed without the target) stay as they are. Binaries are copied unchanged: the
fake workload and tkm judge by keys and metadata, never by running them.
"""

import base64
import hashlib
import json
import os
import shutil
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: cache_retarget.py SRC DST ARCH")
    src, dst, arch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if os.path.exists(dst):
        sys.exit(f"cache_retarget: {dst} exists")
    os.makedirs(dst)
    for key in sorted(os.listdir(src)):
        sd = os.path.join(src, key)
        metas = [f for f in os.listdir(sd) if f.endswith(".json") and not f.startswith("__grp__")]
        if not metas:  # host code: same key whatever the GPU
            shutil.copytree(sd, os.path.join(dst, key))
            continue
        digest = hashlib.sha256(f"{key}:arch={arch}".encode()).digest()
        new = base64.b32encode(digest).decode().rstrip("=")[:len(key)]
        dd = os.path.join(dst, new)
        os.makedirs(dd)
        for f in sorted(os.listdir(sd)):
            p = os.path.join(sd, f)
            if f in metas:
                with open(p) as fh:
                    m = json.load(fh)
                m["target"]["arch"] = arch
                m["hash"] = digest.hex()
                with open(os.path.join(dd, f), "w") as fh:
                    json.dump(m, fh)
            elif f.startswith("__grp__"):
                with open(p) as fh:
                    g = json.load(fh)
                g["child_paths"] = {c: path.replace(f"/{key}/", f"/{new}/") for c, path in g["child_paths"].items()}
                with open(os.path.join(dd, f), "w") as fh:
                    json.dump(g, fh)
            else:
                shutil.copyfile(p, os.path.join(dd, f))


main()
