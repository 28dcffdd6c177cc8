#!/usr/bin/env bash
# run.sh FUZZER SEED_CORPUS WORK_CORPUS SECONDS
# Runs one libFuzzer target for a bounded time: seeds (committed, may be absent)
# are read, new inputs go to the work corpus in the build tree. Exit status is
# the fuzzer's: non-zero on a crash, leak or sanitizer report.
set -euo pipefail
fuzzer=$1 seeds=$2 work=$3 secs=$4
mkdir -p "$work"
dirs=("$work")
[[ -d $seeds ]] && dirs+=("$seeds")
exec "$fuzzer" -max_total_time="$secs" -timeout=10 -rss_limit_mb=1024 -print_final_stats=1 "${dirs[@]}"
