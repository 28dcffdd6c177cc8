"""gen_cache.py SEED OUT SIZE SALT: a Triton cache dir OUT of about SIZE bytes (suffix
k, M or G) made of copies of the real cache SEED (an extracted fixture: Triton 3.6,
sm90), for benchmarks that need caches of a given size with many small files, as
real caches have (a kernel dir holds 8 files: cubin, ptx, llir, ttir, ttgir, source,
metadata JSON, group file; launcher .so dirs one).

Copy i of a kernel dir gets its own key (base32 of sha256(SALT, i, key), the length of
Triton's) and its group file names the new paths under the same root as SEED's
(/tmp/tcache). Each file's bytes go through a byte permutation of its own (seeded
by SALT, i and the name; metadata JSON gets the new hash), so copies are distinct to gzip (no match within its 32 KiB
window, as a real cache of different kernels has none) while each file keeps its
own compressibility: the layer compresses about as the fixture does. SALT makes
every generated cache, and so every layer digest, different: a benchmark round
that must start cold uses a new SALT. Deterministic for the same arguments.
"""

import base64
import hashlib
import json
import os
import random
import sys


def size_arg(s):
    mult = {"k": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(s)


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: gen_cache.py SEED OUT SIZE SALT")
    seed, out, want, salt = sys.argv[1], sys.argv[2], size_arg(sys.argv[3]), sys.argv[4]
    if os.path.exists(out):
        sys.exit(f"gen_cache: {out} exists")
    root = None  # the absolute dir the seed's group files name
    dirs = []
    for key in sorted(os.listdir(seed)):
        files = {}
        for f in sorted(os.listdir(os.path.join(seed, key))):
            with open(os.path.join(seed, key, f), "rb") as fh:
                files[f] = fh.read()
            if f.startswith("__grp__") and root is None:
                p = next(iter(json.loads(files[f])["child_paths"].values()))
                root = os.path.dirname(os.path.dirname(p))
        dirs.append((key, files))
    os.makedirs(out)
    total = i = 0
    while total < want:
        for key, files in dirs:
            h = hashlib.sha256(f"{salt}/{i}/{key}".encode()).digest()
            new = base64.b32encode(h).decode().rstrip("=")[: len(key)]
            d = os.path.join(out, new)
            os.makedirs(d)
            for f, data in files.items():
                if f.startswith("__grp__"):
                    g = json.loads(data)
                    g["child_paths"] = {c: f"{root}/{new}/{c}" for c in g["child_paths"]}
                    data = json.dumps(g).encode()
                elif f.endswith(".json"):  # the kernel's metadata: its own hash
                    m = json.loads(data)
                    m["hash"] = h.hex()
                    data = json.dumps(m).encode()
                else:
                    perm = list(range(256))
                    random.Random(f"{salt}/{i}/{key}/{f}").shuffle(perm)
                    data = data.translate(bytes(perm))
                with open(os.path.join(d, f), "wb") as fh:
                    fh.write(data)
                total += len(data)
            if total >= want:
                break
        i += 1
    print(f"gen_cache: {out}: {total} bytes in {sum(1 for _ in os.scandir(out))} dirs")


main()
