"""summary.py OUT MODE [--fake] [--check]: csi-proof.sh's table from OUT/runs.tsv.

Medians of N per part and mode (cold, warm-local, tkm-mounted) side by side, the
verdicts, and OUT/summary.json (what bench/gpu/check-results.sh checks against
runs.tsv and the other files).
"""

import csv
import hashlib
import json
import os
import statistics
import sys


def med(rows, k):
    v = [float(r[k]) for r in rows if r[k] not in ("nan", "")]
    return round(statistics.median(v), 3) if v else None


def main():
    out, mode, fake = sys.argv[1], sys.argv[2], "--fake" in sys.argv[3:]
    with open(os.path.join(out, "runs.tsv")) as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    fxrows = []
    if os.path.exists(os.path.join(out, "fx.tsv")):  # part full: torch's counters per run
        with open(os.path.join(out, "fx.tsv")) as f:
            fxrows = list(csv.DictReader(f, delimiter="\t"))
    s = {"mode": mode, "fake": fake, "parts": {}}
    lines = []
    if fake:
        lines.append("FAKE WORKLOAD (bench/gpu/fake_workload.py on the CPU): the tkm path is real, "
                     "the timings are not GPU timings")
    if mode != "overlay":
        lines.append("NO OVERLAY on this machine (see preflight.txt): tkm-mounted = tkmctl extract "
                     "--mount-path straight to the mount path (a private copy), not tkm-csi")
    for part in dict.fromkeys(r["part"] for r in rows):
        pr = [r for r in rows if r["part"] == part]
        if not os.path.exists(os.path.join(out, part, "store-after.sha256")):
            lines.append(f"\n{part}: not finished")
            continue
        p = {}
        for m in ("cold", "warm-local", "tkm-mounted"):
            mr = [r for r in pr if r["mode"] == m]
            p[m] = {"n": len(mr), "wall_s": med(mr, "wall_s"), "startup_s": med(mr, "startup_s"),
                    "kernels_s": med(mr, "kernels_s"),
                    "new_cubins_max": max((int(r["new_cubins"]) for r in mr), default=None),
                    "rc_max": max((int(r["rc"]) for r in mr), default=None)}
        miss = [r for r in pr if r["mode"] == "tkm-miss"]
        strict = [r for r in pr if r["mode"] == "strict-miss"]
        with open(os.path.join(out, part, "store-before.sha256"), "rb") as f:
            before = f.read()
        with open(os.path.join(out, part, "store-after.sha256"), "rb") as f:
            after = f.read()
        w, t = p["warm-local"]["wall_s"], p["tkm-mounted"]["wall_s"]
        p["tkm_over_warm"] = round(t / w, 4) if w and t else None
        p["within_5pct"] = bool(w and t and t <= 1.05 * w)
        p["tkm_no_new_cubins"] = p["tkm-mounted"]["new_cubins_max"] == 0
        p["miss_rc"] = int(miss[0]["rc"]) if miss else None
        p["miss_new_cubins"] = int(miss[0]["new_cubins"]) if miss else None
        p["miss_ok"] = bool(miss and p["miss_rc"] == 0 and p["miss_new_cubins"] > 0)
        p["strict_miss_rc"] = int(strict[0]["rc"]) if strict else None
        p["store_files"] = before.count(b"\n")
        p["store_sha256_of_list"] = hashlib.sha256(before).hexdigest()
        p["store_unchanged"] = before == after and len(before) > 0
        s["parts"][part] = p
        lines.append(f"\n{part}: median of {p['cold']['n']} fresh processes each "
                     f"(wall = process start to every kernel run and checked)")
        lines.append(f"  {'':<13}{'cold':>10}{'warm-local':>12}{'tkm-mounted':>13}")
        for k, label in (("wall_s", "wall s"), ("startup_s", "in-proc s"), ("kernels_s", "kernels s"),
                         ("new_cubins_max", "new cubins")):
            lines.append(f"  {label:<13}{p['cold'][k]!s:>10}{p['warm-local'][k]!s:>12}"
                         f"{p['tkm-mounted'][k]!s:>13}")
        lines.append(f"  tkm/warm wall {p['tkm_over_warm']}: within 5%: "
                     f"{'MET' if p['within_5pct'] else 'MISSED'}; no kernel compiled: "
                     f"{'MET' if p['tkm_no_new_cubins'] else 'MISSED'}")
        lines.append(f"  miss in a fresh pod: rc {p['miss_rc']}, {p['miss_new_cubins']} new cubins in "
                     f"its scratch: {'MET' if p['miss_ok'] else 'MISSED'}; store ({p['store_files']} "
                     f"files) sha256 before == after: {'MET' if p['store_unchanged'] else 'MISSED'}")
        pub = [float(r["publish_ms"]) for r in pr if r["mode"] == "tkm-mounted"]
        p["publish_ms_median"] = round(statistics.median(pub), 1) if pub else None
        how = "NodePublishVolume + bind mount" if mode == "overlay" else "tkmctl extract to the mount path"
        lines.append(f"  a pod's volume before its process starts ({how}): "
                     f"median {p['publish_ms_median']} ms, not in the wall times above")
        fr = [r for r in fxrows if r["part"] == part]
        if fr:
            def fxmax(prefix, k):
                v = [int(r[k]) for r in fr if r["run"].startswith(prefix) and r[k].isdigit()]
                return max(v) if v else None
            p["fx"] = {m: {"fx_miss_max": fxmax(pre, "fx_miss"), "fx_hit_max": fxmax(pre, "fx_hit"),
                           "compile_misses_max": fxmax(pre, "compile_misses")}
                       for m, pre in (("cold", "cold-"), ("warm-local", "warm-"),
                                      ("tkm-mounted", "tkm-"), ("tkm-miss", "miss"))}
            t = p["fx"]["tkm-mounted"]
            p["tkm_no_fx_miss"] = t["fx_miss_max"] == 0 and (t["fx_hit_max"] or 0) > 0
            p["tkm_no_triton_compile"] = t["compile_misses_max"] == 0
            lines.append(f"  {'fx miss max':<13}{p['fx']['cold']['fx_miss_max']!s:>10}"
                         f"{p['fx']['warm-local']['fx_miss_max']!s:>12}{t['fx_miss_max']!s:>13}")
            lines.append(f"  {'fx hit max':<13}{p['fx']['cold']['fx_hit_max']!s:>10}"
                         f"{p['fx']['warm-local']['fx_hit_max']!s:>12}{t['fx_hit_max']!s:>13}")
            lines.append(f"  {'compiles max':<13}{p['fx']['cold']['compile_misses_max']!s:>10}"
                         f"{p['fx']['warm-local']['compile_misses_max']!s:>12}"
                         f"{t['compile_misses_max']!s:>13}")
            lines.append(f"  through tkm: no FX graph cache miss: "
                         f"{'MET' if p['tkm_no_fx_miss'] else 'MISSED'}; no Triton compile "
                         f"(listener): {'MET' if p['tkm_no_triton_compile'] else 'MISSED'}")
        if strict:
            lines.append(f"  the same miss under readOnly \"true\" (strict): rc {p['strict_miss_rc']} "
                         f"(expected non-zero: EROFS)")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(s, f, indent=1, sort_keys=True)
        f.write("\n")
    print("\n".join(lines))
    if "--check" in sys.argv[3:]:  # exit 1 when a run says tkm broke something (not the 5%)
        bad = [k for k, p in s["parts"].items()
               if not (p["tkm_no_new_cubins"] and p["miss_ok"] and p["store_unchanged"]
                       and p.get("tkm_no_fx_miss", True))]
        sys.exit(1 if bad or not s["parts"] else 0)


if __name__ == "__main__":
    main()
