"""summary.py OUT: consumers-proof.sh's table and verdicts from OUT/runs.tsv (and OUT/summary.json).

Per part and mode: the number of processes, their exit codes, median wall seconds, and the sums
of new files, new cubins, compile-script calls, Triton compile hits and misses, and TCE's
verified and refused groups; then the verdicts the issue asks for.
"""

import csv
import json
import os
import statistics
import sys


def num(v):
    try:
        return float(v)
    except ValueError:
        return None


def total(rows, k):
    v = [num(r[k]) for r in rows if num(r[k]) is not None]
    return int(sum(v)) if v else "-"


def same_store(out, part):
    try:
        a = open(os.path.join(out, part, "store-before.sha256")).read()
        b = open(os.path.join(out, part, "store-after.sha256")).read()
    except OSError:
        return None
    return a == b and a != ""


def main():
    out = sys.argv[1]
    with open(os.path.join(out, "runs.tsv")) as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    s = {"parts": {}, "verdicts": {}}
    lines = []
    for part in dict.fromkeys(r["part"] for r in rows):
        lines.append(f"{part}:")
        lines.append("  mode                prog             n  rc      wall  files cubins calls hits miss"
                     " verif refus  result")
        groups = {}
        for r in rows:
            if r["part"] == part:
                groups.setdefault((r["mode"], r["prog"]), []).append(r)
        s["parts"][part] = {}
        for (mode, prog), g in groups.items():
            walls = [num(r["wall_s"]) for r in g if num(r["wall_s"]) is not None]
            e = {
                "n": len(g), "rc": [r["rc"] for r in g],
                "wall_median_s": round(statistics.median(walls), 3) if walls else None,
                **{k: total(g, k) for k in ("new_files", "new_cubins", "compile_calls", "hits", "misses",
                                            "verified", "refused")},
                "results": sorted(set(r["result"] for r in g)),
            }
            s["parts"][part][f"{mode}/{prog}"] = e
            lines.append(f"  {mode:19} {prog:15} {e['n']:2}  {','.join(e['rc']):6} {e['wall_median_s']!s:>6}"
                         f" {e['new_files']!s:>6} {e['new_cubins']!s:>6} {e['compile_calls']!s:>5}"
                         f" {e['hits']!s:>4} {e['misses']!s:>4} {e['verified']!s:>5} {e['refused']!s:>5}"
                         f"  {' | '.join(e['results'])}")
    v = s["verdicts"]
    ltj = [r for r in rows if r["part"] == "ltj"]
    if ltj:
        tkm = [r for r in ltj if r["mode"] == "tkm-mounted"]
        cold = [r for r in ltj if r["mode"] == "cold"]
        sums = {r["result"] for r in ltj if r["prog"] == "tkm_ltj_add"}
        v["ltj_tkm_compiles_nothing"] = bool(tkm) and all(
            r["rc"] == "0" and r["new_cubins"] == "0" and r["misses"] == "0" and num(r["hits"]) and
            num(r["hits"]) >= 1 for r in tkm)
        v["ltj_cold_compiled"] = bool(cold) and all(num(r["misses"]) and num(r["new_cubins"]) for r in cold)
        v["ltj_same_result"] = len(sums) == 1 and "-" not in sums and bool(sums)
        v["ltj_store_unchanged"] = same_store(out, "ltj")
    tce = [r for r in rows if r["part"] == "tce"]
    if tce:
        per = [r for r in tce if r["mode"] == "tce-per-key"]
        cold = [r for r in tce if r["mode"] == "cold"]
        kernels = num(cold[0]["misses"]) if cold else None
        v["tce_per_key_hits_every_kernel"] = bool(per) and all(
            r["rc"] == "0" and r["misses"] == "0" and num(r["hits"]) == kernels and r["new_cubins"] == "0" and
            num(r["verified"]) == kernels and r["refused"] == "0" for r in per)
        flip = [r for r in tce if r["mode"] == "tce-flipped"]
        v["tce_flipped_refused"] = bool(flip) and all(
            r["rc"] != "0" and num(r["refused"]) and "Invalid signature" in r["result"] for r in flip)
        asis = [r for r in tce if r["mode"] == "tce-as-is"]
        v["tce_as_is"] = [f"rc {r['rc']}: {r['hits']} hits, {r['misses']} misses, {r['verified']} groups verified,"
                          f" {r['new_cubins']} new cubins; {r['result']}" for r in asis]
        unp = [r for r in tce if r["mode"] == "tce-epath-unported"]
        v["tce_epath_unported"] = [f"rc {r['rc']}: {r['result']}" for r in unp]
        v["tce_store_unchanged"] = same_store(out, "tce")
    lines.append("verdicts:")
    for k, val in v.items():
        lines.append(f"  {k}: {val}")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(s, f, indent=1, sort_keys=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
