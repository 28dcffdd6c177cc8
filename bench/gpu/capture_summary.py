"""capture_summary.py RUN_DIR [--check]: the verdicts of bench/gpu/capture-proof.sh.

Reads RUN_DIR/runs.tsv (one row per process), capture.txt, releases.txt and the
store's sha256 lists; prints one line per verdict ("ok"/"FAIL"). --check exits 1
when a verdict fails:
  - capture exited 0 and its workload compiled (Triton compiles > 0, FX misses > 0);
  - every tkm-mounted run: 0 Triton compiles, 0 FX graph misses, > 0 FX hits,
    0 cubins in its scratch, and tkm-csi's count at unpublish triton=0;
  - the tkm-miss run compiled (> 0 Triton compiles, > 0 cubins in its scratch) and
    tkm-csi's count at unpublish equals the cubins found in its scratch;
  - the store is unchanged by every run.
"""
import csv
import os
import sys


def verdicts(run):
    rows = list(csv.DictReader(open(os.path.join(run, "runs.tsv")), delimiter="\t"))
    res = []

    def v(ok, what):
        res.append((bool(ok), what))

    num = lambda r, k: int(r[k]) if r[k] not in ("-", "") else None
    cap = [r for r in rows if r["step"] == "capture"]
    v(len(cap) == 1 and cap[0]["rc"] == "0" and (num(cap[0], "triton_compiles") or 0) > 0
      and (num(cap[0], "fx_miss") or 0) > 0,
      "capture: the workload ran cold under tkmctl capture (compiled Triton kernels and FX graphs)")
    mounted = [r for r in rows if r["step"] == "tkm-mounted"]
    v(mounted, "tkm-mounted: at least one run from the captured image")
    for r in mounted:
        v(r["rc"] == "0" and num(r, "triton_compiles") == 0 and num(r, "fx_miss") == 0
          and (num(r, "fx_hit") or 0) > 0 and num(r, "scratch_cubins") == 0
          and num(r, "csi_count_triton") == 0,
          f"tkm-mounted {r['rep']}: 0 Triton compiles, 0 FX misses ({r['fx_hit']} hits), "
          f"0 cubins in the scratch, tkm-csi counted triton={r['csi_count_triton']}")
    miss = [r for r in rows if r["step"] == "tkm-miss"]
    for r in miss:
        v(r["rc"] == "0" and (num(r, "triton_compiles") or 0) > 0 and (num(r, "scratch_cubins") or 0) > 0
          and num(r, "csi_count_triton") == num(r, "scratch_cubins"),
          f"tkm-miss: {r['triton_compiles']} Triton compiles, {r['scratch_cubins']} cubins in the "
          f"scratch, tkm-csi counted triton={r['csi_count_triton']} (equal)")
    v(miss, "tkm-miss: one run with a new sequence length")
    b = open(os.path.join(run, "store-before.sha256")).read()
    a = open(os.path.join(run, "store-after.sha256")).read()
    v(b and a == b, "the store is unchanged")
    return res


def main():
    run = sys.argv[1]
    res = verdicts(run)
    for ok, what in res:
        print(("ok   " if ok else "FAIL ") + what)
    if "--check" in sys.argv[2:] and not all(ok for ok, _ in res):
        sys.exit(1)


if __name__ == "__main__":
    main()
