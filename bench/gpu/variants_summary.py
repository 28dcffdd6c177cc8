"""variants_summary.py RUN_DIR [--check]: the summary of one bench/gpu/variants-proof.sh run.

Reads the run's files (runs.tsv, preflight.txt, build-*.json, inspect-*.json, once-*.json/.rc,
check-*.json, extract-multi.json, extract-only80.txt, elf.txt, *.sha256, meta.txt,
csi-published.txt), prints the table and the verdicts, and writes summary.json beside them.
--check: exit 1 when a verdict fails (nothing is written then). Python 3 standard library only:
bench/gpu/check-results.sh runs it on committed runs.
"""

import csv
import json
import os
import re
import sys


def load(run, name, default=None):
    try:
        with open(os.path.join(run, name)) as f:
            return json.load(f) if name.endswith(".json") else f.read()
    except (OSError, ValueError):
        return default


def rows(run):
    with open(os.path.join(run, "runs.tsv")) as f:
        return list(csv.DictReader(f, delimiter="\t"))


def num(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def gpu_arch(run):
    m = re.search(r"^gpu target: cuda (\S+) warp", load(run, "preflight.txt", ""), re.M)
    return m.group(1) if m else "?"


def cubin_targets(run):
    """elf.txt: {"native"|"sm80": [sm_XX of each cubin]} (None when no cuobjdump ran)."""
    out, cur = {}, None
    text = load(run, "elf.txt", "")
    if "(no cuobjdump here)" in text:
        return None
    for line in text.splitlines():
        m = re.match(r"== (\w+)/", line)
        if m:
            cur = out.setdefault(m.group(1), [])
            cur.append(None)
            continue
        m = re.search(r"code for (sm_\w+)", line)
        if m and cur is not None and cur[-1] is None:
            cur[-1] = m.group(1)
    return out


def agent_pick(once, native):
    """(picked native, what) from tkm-agent --once -o json of the two-variant image."""
    c = ((once or {}).get("status") or {}).get("caches", {}).get("image") or {}
    if c.get("error"):
        return False, "error: " + c["error"]
    used = [v.get("digest") for v in c.get("variants") or []]
    compat = c.get("compatibleGPUs") or []
    if native in used and compat:
        return True, "variants %s, compatible GPU groups %s" % (
            used, [(g.get("gpuType"), g.get("reason", "")) for g in compat])
    return False, "variants %s, compatible %s, incompatible %s" % (
        used, compat, c.get("incompatibleGPUs"))


def main():
    run = sys.argv[1]
    check = "--check" in sys.argv[2:]
    r = rows(run)
    arch = gpu_arch(run)
    native = (load(run, "build-native.json") or {}).get("manifest", "?")
    sm80 = (load(run, "build-sm80.json") or {}).get("manifest", "?")
    step = {}
    for x in r:
        step.setdefault(x["step"], []).append(x)
    v = {}

    cold = step.get("native-cold", [{}])[0]
    v["native cold run compiled its kernels"] = (
        cold.get("rc") == "0" and (num(cold.get("misses")) or 0) > 0 and (num(cold.get("new_cubins")) or 0) > 0)
    cross = step.get("sm80-cross", [{}])[0]
    v["sm80 cross-compile wrote cubins"] = cross.get("rc") == "0" and (num(cross.get("new_cubins")) or 0) > 0
    ct = cubin_targets(run)
    if ct is not None:
        v["every sm80 cubin is sm_80 (cuobjdump)"] = bool(ct.get("sm80")) and all(t == "sm_80" for t in ct["sm80"])
        v["every native cubin is sm_%s/sm_%sa (cuobjdump)" % (arch, arch)] = bool(ct.get("native")) and all(
            t in ("sm_" + arch, "sm_%sa" % arch) for t in ct["native"])

    im = load(run, "inspect-multi.json") or {}
    io = load(run, "inspect-only80.json") or {}
    archs = sorted(x.get("arch") for x in im.get("variants") or [])
    v["index multi: 2 variants (this GPU's and sm80)"] = archs == sorted([arch, "80"]) and {
        x.get("digest") for x in im["variants"]} == {native, sm80}
    v["index only80: 1 variant, sm80"] = [x.get("arch") for x in io.get("variants") or []] == ["80"]

    once = load(run, "once-multi.json")
    once_rc = (load(run, "once-multi.rc", "?") or "?").strip()
    a_ok, a_what = agent_pick(once, native)
    chk = load(run, "check-multi.json") or {}
    res = chk.get("results") or []
    c_ok = bool(res) and all(x.get("compatible") and x.get("variant") == native for x in res)
    ex = load(run, "extract-multi.json") or {}
    e_ok = (ex.get("variant") or {}).get("digest") == native
    v["tkm-agent --once picks this GPU's variant"] = a_ok
    v["tkmctl check picks this GPU's variant"] = c_ok
    v["tkmctl extract picks this GPU's variant"] = e_ok
    o80 = load(run, "check-only80.json") or {}
    r80 = o80.get("results") or []
    v["only80: no variant for this GPU (NoVariant)"] = bool(r80) and all(
        not x.get("compatible") and (x.get("reason") or "").startswith("NoVariant") for x in r80) and (
        "NoVariant" in (load(run, "extract-only80.txt", "") or ""))
    v["the store holds the native cache's files"] = (load(run, "native.sha256") or "") == (
        load(run, "store-files.sha256") or "-")

    tkm = step.get("tkm-mounted", [])
    v["tkm-mounted: every run ok, 0 compiles, 0 new cubins"] = bool(tkm) and all(
        x["rc"] == "0" and num(x["misses"]) == 0 and (num(x["hits"]) or 0) > 0 and num(x["new_cubins"]) == 0
        for x in tkm)
    em = step.get("tkm-empty", [{}])[0]
    meta = load(run, "meta.txt", "") or ""
    v["empty volume: the run succeeds and compiles (> 0 misses, cubins in the volume)"] = (
        em.get("rc") == "0" and (num(em.get("misses")) or 0) > 0 and (num(em.get("new_cubins")) or 0) > 0
        and "files in the empty volume at publish: 0" in meta)
    v["tkm-csi published an empty writable volume for only80"] = "empty writable" in (
        load(run, "csi-published.txt", "") or "")
    before, after = load(run, "store-before.sha256"), load(run, "store-after.sha256")
    v["store unchanged, no mount left"] = bool(before) and before == after and "mounts left: 0" in meta

    def med(name, key="wall_s"):
        xs = sorted(float(x[key]) for x in step.get(name, []) if x.get(key) not in (None, "", "-"))
        return xs[len(xs) // 2] if xs else None

    s = {"gpu_arch": arch, "native_variant": native, "sm80_variant": sm80,
         "index_digest": im.get("indexDigest"), "agent_once_rc": once_rc, "agent_pick": a_what,
         "check_reasons": [x.get("reason") for x in res], "only80_reasons": [x.get("reason") for x in r80],
         "wall_s": {k: med(k) for k in ("native-cold", "sm80-cross", "warm-local", "tkm-mounted", "tkm-empty")},
         "runs": r, "verdicts": v}
    # The pick: the agent's own when its --once reads a variant index, else tkmctl's (check + extract).
    required = [k for k in v if k != "tkm-agent --once picks this GPU's variant"]
    ok = all(v[k] for k in required) and (a_ok or (c_ok and e_ok))
    s["ok"] = ok
    if check:
        sys.exit(0 if ok else 1)
    with open(os.path.join(run, "summary.json"), "w") as f:
        json.dump(s, f, indent=1, sort_keys=True)
        f.write("\n")
    print("GPU target: cuda %s; variants: %s (this GPU's), %s (sm80); index %s" % (
        arch, native, sm80, im.get("indexDigest")))
    print("%-12s %4s %3s %8s %5s %7s %9s %7s %10s" % (
        "step", "rep", "rc", "wall_s", "hits", "misses", "new_files", "cubins", "publish_ms"))
    for x in r:
        print("%-12s %4s %3s %8s %5s %7s %9s %7s %10s" % (
            x["step"], x["rep"], x["rc"], x["wall_s"], x["hits"], x["misses"], x["new_files"],
            x["new_cubins"], x["publish_ms"]))
    print("tkm-agent --once (two-variant layout): exit %s: %s" % (once_rc, a_what))
    print("tkmctl check: %s" % [x.get("reason") for x in res])
    print("only80: %s" % [x.get("reason") for x in r80])
    for k, ok1 in v.items():
        print("%-80s %s" % (k, "MET" if ok1 else "NOT MET"))
    print("overall: %s (the pick by %s)" % ("MET" if ok else "NOT MET",
                                          "the agent" if a_ok else "tkmctl check + extract"))


if __name__ == "__main__":
    main()
