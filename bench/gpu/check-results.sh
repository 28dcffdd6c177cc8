#!/usr/bin/env bash
# bench/gpu/check-results.sh [RUN_DIR...] - checks that committed outputs of
# bench/gpu/csi-proof.sh say what their summaries claim (default: every run in
# bench/gpu/results/, bench/gpu/results-full/ and, for bench/gpu/variants-proof.sh,
# bench/gpu/results-variants/). A results check, not a test:
# it reads recorded files and runs no tkm code. What runs tkm's code on the same
# files is unit.gpu_proof / unit.gpu_full_proof (the published group files are
# what tkm's rewrite makes of the store's for the mount path).
#
# Per run directory:
#   - summary.json is what bench/gpu/summary.py makes of runs.tsv (and fx.tsv)
#     today, byte for byte as JSON, and its verdicts hold (summary.py --check:
#     no cubin written through tkm, the miss ok, the store unchanged, for part
#     full no FX graph cache miss through tkm);
#   - per part: store-before.sha256 == store-after.sha256, not empty, lines of
#     "<sha256>  ./<path>"; part full's store holds triton/ and both inductor/
#     caches;
#   - runs.tsv: every run exited 0 (but the strict miss), cold runs compiled,
#     warm-local and tkm-mounted runs wrote no cubin, one tkm-miss that wrote one;
#     miss-upper.txt (not for full) lists at least one cubin and no store file;
#   - fx.tsv (part full): cold runs missed the FX graph cache and hit nothing,
#     warm-local and tkm-mounted runs hit it with no miss and no Triton compile,
#     as many tkm as warm runs, one miss run that missed.
# A variants-proof.sh run (it has index-multi.json): summary.json is what
# bench/gpu/variants_summary.py makes of the run's files today, and its verdicts hold
# (variants_summary.py --check).
# A capture-proof.sh run (it has releases.txt): summary.txt is what
# bench/gpu/capture_summary.py prints of the run's files today, byte for byte, and its
# verdicts hold (capture_summary.py --check); and the raw files agree with runs.tsv:
# one Release line per pod, whose triton=/fxgraph= are the row's csi_count_triton/
# csi_count_fxgraph and whose files= is the number of files in the pod's scratch listing
# (logs/upper-<pod>.txt), whose cubins are the row's scratch_cubins; the files
# tkmctl capture printed per part add up to extract.json's files and to the lines of
# store-before.sha256. Every file named here must exist.
# Checks every run directory given; exits 1 if one fails, naming what.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if (($# == 0)); then
  set -- "$here"/results/*/ "$here"/results-full/*/ "$here"/results-variants/*/ "$here"/results-capture/*/
fi
bad=0
for run in "$@"; do
  run=${run%/}
  if [[ -f $run/index-multi.json ]]; then # bench/gpu/variants-proof.sh
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/tkm-gpu-check-XXXXXX")
    cp -r "$run/." "$tmp/"
    if python3 "$here/variants_summary.py" "$tmp" >/dev/null && python3 "$here/variants_summary.py" "$tmp" --check &&
      python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1])) != json.load(open(sys.argv[2])))' \
        "$run/summary.json" "$tmp/summary.json"; then
      echo "check-results: $run: what its summary says holds"
    else
      echo "check-results: $run: summary.json is not what variants_summary.py makes, or a verdict failed" >&2
      bad=1
    fi
    rm -rf "$tmp"
    continue
  fi
  if [[ -f $run/releases.txt ]]; then # bench/gpu/capture-proof.sh
    if python3 "$here/capture_summary.py" "$run" --check >/dev/null &&
      python3 "$here/capture_summary.py" "$run" | cmp -s - "$run/summary.txt" &&
      python3 - "$run" <<'EOF'; then
import csv, json, os, re, sys
run = sys.argv[1]
def fail(msg):
    sys.exit(f"check-results: {run}: {msg}")
rows = list(csv.DictReader(open(os.path.join(run, "runs.tsv")), delimiter="\t"))
pods = [r for r in rows if r["step"] in ("tkm-mounted", "tkm-miss")]
rel = {}
for line in open(os.path.join(run, "releases.txt")).read().splitlines():
    m = re.match(r"Release vol-(\S+) released scratch triton=(\d+) fxgraph=(\d+) .* files=(\d+) ", line)
    if not m:
        fail(f"releases.txt: not a Release line with counts: {line[:80]!r}")
    rel[m.group(1)] = tuple(int(x) for x in m.group(2, 3, 4))
if len(rel) != len(pods) or not pods:
    fail(f"{len(rel)} Release lines for {len(pods)} pods")
for r in pods:
    name = "pod-miss" if r["step"] == "tkm-miss" else f"pod-{r['rep']}"
    if name not in rel:
        fail(f"no Release line for {name}")
    triton, fx, files = rel[name]
    upper = open(os.path.join(run, "logs", f"upper-{name}.txt")).read().splitlines()
    if (triton, fx) != (int(r["csi_count_triton"]), int(r["csi_count_fxgraph"])):
        fail(f"{name}: the Release says triton={triton} fxgraph={fx}, runs.tsv otherwise")
    if files != len(upper):
        fail(f"{name}: the Release says files={files}, the scratch listing has {len(upper)}")
    if sum(u.endswith(".cubin") for u in upper) != int(r["scratch_cubins"]):
        fail(f"{name}: runs.tsv's scratch_cubins is not the listing's cubins")
captured = sum(int(n) for n in re.findall(r"^  \S+ +\S+: (\d+) files",
                                          open(os.path.join(run, "capture.txt")).read(), re.M))
extracted = json.load(open(os.path.join(run, "extract.json")))["files"]
store = len(open(os.path.join(run, "store-before.sha256")).read().splitlines())
if not captured or not captured == extracted == store:
    fail(f"files: captured {captured}, extracted {extracted}, in the store {store}")
EOF
      echo "check-results: $run: what its summary says holds"
    else
      echo "check-results: $run: summary.txt is not what capture_summary.py prints, a verdict failed, or the files disagree" >&2
      bad=1
    fi
    continue
  fi
  [[ -f $run/summary.json && -f $run/runs.tsv ]] || { echo "check-results: $run: no summary.json or runs.tsv" >&2; bad=1; continue; }
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/tkm-gpu-check-XXXXXX")
  cp -r "$run/." "$tmp/"
  read -r mode fake < <(python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); print(s["mode"], "--fake" if s["fake"] else "")' "$run/summary.json")
  fake_flag=()
  [[ -z ${fake:-} ]] || fake_flag=(--fake)
  if ! python3 "$here/summary.py" "$tmp" "$mode" "${fake_flag[@]}" --check >"$tmp/.summary.out"; then
    echo "check-results: $run: a verdict failed (summary.py --check):" >&2
    cat "$tmp/.summary.out" >&2
    bad=1
  fi
  if ! python3 - "$run" "$tmp/summary.json" <<'EOF'; then
import csv, json, os, sys
run, regen = sys.argv[1], sys.argv[2]
def fail(msg):
    sys.exit(f"check-results: {run}: {msg}")
if json.load(open(os.path.join(run, "summary.json"))) != json.load(open(regen)):
    fail("summary.json is not what bench/gpu/summary.py makes of runs.tsv")
rows = list(csv.DictReader(open(os.path.join(run, "runs.tsv")), delimiter="\t"))
parts = json.load(open(os.path.join(run, "summary.json")))["parts"]
if not parts:
    fail("no part in summary.json")
for part in parts:
    before = open(os.path.join(run, part, "store-before.sha256")).read()
    after = open(os.path.join(run, part, "store-after.sha256")).read()
    if not before or before != after:
        fail(f"{part}: the store's sha256 list is empty or changed")
    store = set()
    for line in before.splitlines():
        if len(line) < 69 or line[64:68] != "  ./":
            fail(f"{part}: store-before.sha256 line not '<sha256>  ./<path>': {line!r}")
        store.add(line[66:])  # "./<path>", as miss-upper.txt names files
    if part == "full":
        for want in ("triton/", "inductor/fxgraph/", "inductor/aotautograd/"):
            if not any(p.startswith("./" + want) for p in store):
                fail(f"full: the store holds nothing under {want}")
    pr = [r for r in rows if r["part"] == part]
    n = {m: 0 for m in ("cold", "warm-local", "tkm-mounted", "tkm-miss")}
    for r in pr:
        m, rc, cubins = r["mode"], int(r["rc"]), int(r["new_cubins"])
        if m != "strict-miss" and rc != 0:
            fail(f"{part}: a {m} run exited {rc}")
        if m in n:
            n[m] += 1
        if m in ("cold", "tkm-miss") and cubins < 1:
            fail(f"{part}: a {m} run compiled no kernel")
        if m in ("warm-local", "tkm-mounted") and cubins != 0:
            fail(f"{part}: a {m} run wrote {cubins} cubins")
    if n["cold"] < 1 or n["tkm-mounted"] < 1 or n["tkm-miss"] != 1:
        fail(f"{part}: runs per mode {n}: want cold and tkm-mounted runs and one tkm-miss")
    if part != "full":
        upper = open(os.path.join(run, part, "miss-upper.txt")).read().splitlines()
        if not any(u.endswith(".cubin") for u in upper):
            fail(f"{part}: the miss wrote no cubin into its scratch (miss-upper.txt)")
        if any(u in store for u in upper):
            fail(f"{part}: miss-upper.txt names a store file")
if os.path.exists(os.path.join(run, "fx.tsv")):
    fx = list(csv.DictReader(open(os.path.join(run, "fx.tsv")), delimiter="\t"))
    k = {"cold": 0, "warm": 0, "tkm": 0, "miss": 0}
    for r in fx:
        name, rc = r["run"], int(r["rc"])
        hit, miss, compiles = int(r["fx_hit"]), int(r["fx_miss"]), int(r["compile_misses"])
        if r["part"] != "full" or rc != 0:
            fail(f"fx.tsv: run {name} of part {r['part']} exited {rc}")
        if name.startswith("cold-"):
            k["cold"] += 1
            if miss <= 0 or hit != 0:
                fail(f"fx.tsv: {name}: a cold run hit the FX graph cache or did not miss")
        elif name.startswith(("warm-", "tkm-")):
            k["warm" if name[0] == "w" else "tkm"] += 1
            if hit <= 0 or miss != 0 or compiles != 0 or r.get("missed", "-") != "-":
                fail(f"fx.tsv: {name}: missed the FX graph cache or compiled a Triton kernel")
        elif name == "miss":
            k["miss"] += 1
            if miss <= 0:
                fail("fx.tsv: the miss run did not miss")
        else:
            fail(f"fx.tsv: unknown run {name}")
    if k["cold"] < 1 or k["warm"] < 1 or k["tkm"] != k["warm"] or k["miss"] != 1:
        fail(f"fx.tsv: runs {k}: want cold and warm runs, as many tkm as warm, one miss")
EOF
    bad=1
  else
    echo "check-results: $run: what its summary says holds"
  fi
  rm -rf "$tmp"
done
exit "$bad"
