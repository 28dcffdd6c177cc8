#!/usr/bin/env bash
# shellcheck disable=SC2030,SC2031 # the background phases count in a subshell on purpose (run_phase)
# Runs every test tkm has, the way CI does (`make test`, `.ci/run`):
#
#   1. Debian packages (hack/deps.sh) and the Go-built test binaries
#      (hack/testbin/build.sh: etcd, kube-apiserver, kubectl, cosign, crane,
#      prometheus, promtool, ...;
#      cached in ${TKM_CACHE:-~/.cache/tkm}, built only the first time)
#   2. build/          gcc, -Werror: unit tests, lint, and the end-to-end tests
#                      against a real etcd + kube-apiserver + registry and a
#                      real node that the ctest fixtures start and stop, on
#                      Kubernetes 1.37; then the e2e subset labelled k8s-oldest
#                      again on Kubernetes 1.35. A running `make demo` is
#                      stopped first (one kubelet node per host), and says so.
#   3. build-arm64/    the linux/arm64 cross build (Debian's aarch64 cross gcc and
#                      :arm64 -dev packages, hack/deps.sh --arm64): the unit tests
#                      labelled arm64 under qemu-aarch64-static, and images.multiarch
#                      (every image as one linux/amd64 + linux/arm64 index, checked with
#                      crane, readelf and --help from each root filesystem); needs
#                      build/ (phase main) and root (chroot)
#   3b. build-debug/, build-release/   gcc -Werror, CMAKE_BUILD_TYPE Debug and
#                      Release: configure + build everything (libraries, tkmctl,
#                      tests, examples, bench), nothing run; each build type
#                      counts as one test ("buildtypes")
#   4. build-asan/     ASan + UBSan (no recovery): unit tests
#   5. build-valgrind/ unit tests under valgrind memcheck (leaks are errors)
#   6. build-fuzz/     clang libFuzzer targets, each for TKM_FUZZ_SECONDS (20)
#
# Phases 3-6 run in the background beside phase 2 once build/ is built, at the
# lowest CPU and I/O priority (below: start_background; docs/development.md);
# TKM_TEST_BACKGROUND=0 runs them after it instead.
#
# Ends with one line "N passed, N failed" summing every phase; exit 0 only if
# nothing failed. TKM_TEST_PHASES limits the phases, e.g. "main asan".
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
# shellcheck source=hack/lib.sh
source hack/lib.sh # running_node_owner, stop_cluster_of
phases=${TKM_TEST_PHASES:-main arm64 buildtypes asan valgrind fuzz}
jobs=${JOBS:-2}
total_pass=0 total_fail=0
failed_phases=()
failed_tests=()
t_start=$SECONDS

say() { printf '\n===== %s (%ds)\n' "$*" $((SECONDS - t_start)); }

# run_ctest PHASE BUILD_DIR CTEST_ARGS...: runs ctest, adds its counts to the totals.
run_ctest() {
  local phase=$1 dir=$2
  shift 2
  local log="$root/$dir/ctest-$phase.log"
  (cd "$dir" && ctest --output-on-failure "$@") 2>&1 | tee "$log"
  local line pass=0 fail=0 total
  line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -1)
  if [[ -n $line ]]; then
    fail=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
    total=$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$line")
    pass=$((total - fail))
  elif grep -q "No tests were found" "$log"; then
    echo "test.sh: phase $phase found no tests" >&2
    fail=1
  else
    echo "test.sh: phase $phase: ctest printed no summary" >&2
    fail=1
  fi
  total_pass=$((total_pass + pass))
  total_fail=$((total_fail + fail))
  ((fail == 0)) || failed_phases+=("$phase")
  # The names ctest lists after "The following tests FAILED:", kept for the
  # summary: CI shows only the tail of this output.
  local t
  while IFS= read -r t; do
    [[ -n $t ]] && failed_tests+=("$phase: $t")
  done < <(sed -n '/The following tests FAILED:/,$p' "$log" | sed -nE 's/^[[:space:]]+[0-9]+ - (.*)$/\1/p')
}

# build_dir DIR CMAKE_ARGS...: configures and builds; a failure counts as one failed test.
build_dir() {
  local dir=$1
  shift
  if ! cmake -S . -B "$dir" -G Ninja "$@" >"/tmp/tkm-cmake-$BASHPID.log" 2>&1; then
    cat "/tmp/tkm-cmake-$BASHPID.log"
    echo "test.sh: cmake failed for $dir" >&2
    return 1
  fi
  if ! ninja -C "$dir" -j "$jobs"; then
    echo "test.sh: build failed in $dir" >&2
    return 1
  fi
}

# stop_demo: the host has one kubelet node (its root, kubepods cgroups and iptables
# chains are host-wide), so the e2e tests' node cannot start beside `make demo`'s.
# A node that runs is stopped first, and this says so: `make demo` (hack/demo.sh
# down of the clone it came from: this one's or another's), or a test node an
# interrupted run left (any clone's build/e2e-cluster). `make demo` brings the demo
# back after the tests. The kubelet root's .tkm-node names the node's cluster dir.
stop_demo() {
  local owner
  owner=$(running_node_owner)
  if [[ $owner == */.tkm/cluster && -x ${owner%/.tkm/cluster}/hack/demo.sh ]]; then
    echo "test.sh: \`make demo\` runs on this host (${owner%/.tkm/cluster}); the tests need its node (one kubelet per host)."
    echo "test.sh: stopping the demo first (make demo-down there); run \`make demo\` again after the tests."
    (cd "${owner%/.tkm/cluster}" && hack/demo.sh down) || echo "test.sh: make demo-down failed (above); the tests' node may not start" >&2
  elif [[ $owner == */e2e-cluster && $owner != "$root/build/e2e-cluster" ]]; then
    echo "test.sh: a test node of another run holds this host ($owner): stopping it (one kubelet per host)."
    stop_cluster_of "$owner"
  fi
}

phase_failed_to_build() {
  total_fail=$((total_fail + 1))
  failed_phases+=("$1(build)")
}

say "dependencies"
if ! hack/deps.sh; then
  echo "test.sh: hack/deps.sh failed" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
say "Go-built test binaries"
KUBE_OLDEST=1.35.4 # the oldest supported minor; hack/testbin/build.sh builds it on request
if ! hack/testbin/build.sh ||
  ! TKM_KUBE_VERSION=$KUBE_OLDEST hack/testbin/build.sh kube-apiserver kubectl kubelet kube-scheduler kube-controller-manager >/dev/null; then
  echo "test.sh: building the test binaries failed (see the log path above)" >&2
  echo "0 passed, 1 failed"
  exit 1
fi

# run_phase PHASE: one phase, its counts added to the totals.
run_phase() {
  local phase=$1 bt lc
  case $phase in
    main)
      say "build/ (gcc -Werror): unit, lint, e2e"
      if build_dir build -DCMAKE_BUILD_TYPE=RelWithDebInfo; then
        start_background
        stop_demo
        # A control plane left over from an interrupted run is stopped first.
        TKM_CLUSTER_DIR=$root/build/e2e-cluster hack/cluster.sh down >/dev/null 2>&1 || true
        run_ctest main build -j "$jobs"
        # The oldest supported Kubernetes minor: the subset labelled k8s-oldest
        # (docs/development.md says which and why), on its own control plane
        # and node of that version.
        say "build/: e2e subset on Kubernetes $KUBE_OLDEST (label k8s-oldest)"
        TKM_CLUSTER_DIR=$root/build/e2e-cluster hack/cluster.sh down >/dev/null 2>&1 || true
        TKM_KUBE_VERSION=$KUBE_OLDEST run_ctest "main-k8s-$KUBE_OLDEST" build -L k8s-oldest -j "$jobs"
      else phase_failed_to_build main; fi
      ;;
    arm64)
      say "build-arm64/ (aarch64 cross build): unit subset and images under qemu"
      if hack/deps.sh --arm64 && JOBS=$jobs hack/cross-arm64.sh build-arm64; then
        run_ctest arm64 build-arm64 -L arm64 -j "$jobs"
      else phase_failed_to_build arm64; fi
      ;;
    buildtypes)
      # Warnings differ with the optimization level (-O0 vs -O3), so a build
      # type a user picks must compile with -Werror too. Build only: the
      # RelWithDebInfo, ASan and valgrind phases run the tests.
      for bt in Debug Release; do
        lc=$(tr '[:upper:]' '[:lower:]' <<<"$bt")
        say "build-$lc/ (gcc -Werror, $bt): configure + build"
        if build_dir "build-$lc" -DCMAKE_BUILD_TYPE="$bt" -DTKM_E2E=OFF; then
          total_pass=$((total_pass + 1))
        else phase_failed_to_build "buildtypes-$lc"; fi
      done
      ;;
    asan)
      say "build-asan/ (ASan+UBSan): unit"
      if build_dir build-asan -DCMAKE_BUILD_TYPE=Debug -DTKM_ASAN=ON -DTKM_UBSAN=ON -DTKM_E2E=OFF; then
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
          run_ctest asan build-asan -L unit -j "$jobs"
      else phase_failed_to_build asan; fi
      ;;
    valgrind)
      say "build-valgrind/ (memcheck): unit"
      if build_dir build-valgrind -DCMAKE_BUILD_TYPE=Debug -DTKM_VALGRIND=ON -DTKM_E2E=OFF; then
        run_ctest valgrind build-valgrind -L unit -j "$jobs"
      else phase_failed_to_build valgrind; fi
      ;;
    fuzz)
      say "build-fuzz/ (clang libFuzzer): ${TKM_FUZZ_SECONDS:-20}s per target"
      if build_dir build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTKM_FUZZ=ON \
        -DTKM_E2E=OFF -DTKM_FUZZ_SECONDS="${TKM_FUZZ_SECONDS:-20}"; then
        run_ctest fuzz build-fuzz -L fuzz -j "$jobs" # one libFuzzer process per target
      else phase_failed_to_build fuzz; fi
      ;;
    *) echo "test.sh: unknown phase '$phase'" >&2; total_fail=$((total_fail + 1)) ;;
  esac
}

# The phases other than main run beside it, in the background, once build/ is
# built (arm64 packs its binaries into the images): one after the other, at the
# lowest CPU and I/O priority (nice 19, ionice idle), so that they take only
# what main leaves idle (its end-to-end tests mostly wait on the apiserver, the
# kubelet and the registry) and never slow its tests down. Their output goes
# to build/test-background.log, printed here when they end; their counts join
# the totals. TKM_TEST_BACKGROUND=0 runs every phase in the foreground, in order.
bg_phases=() fg_phases=()
for phase in $phases; do
  if [[ $phase != main && ${TKM_TEST_BACKGROUND:-1} != 0 && " $phases " == *" main "* ]]; then
    bg_phases+=("$phase")
  else
    fg_phases+=("$phase")
  fi
done
bg_pid='' bg_log=$root/build/test-background.log bg_state=$root/build/test-background.state
start_background() {
  ((${#bg_phases[@]})) || return 0
  [[ -z $bg_pid ]] || return 0
  rm -f "$bg_state"
  echo "test.sh: phases ${bg_phases[*]} run in the background beside main (nice 19, ionice idle): $bg_log"
  (
    renice -n 19 -p "$BASHPID" >/dev/null 2>&1 || true
    ionice -c 3 -p "$BASHPID" >/dev/null 2>&1 || true
    total_pass=0 total_fail=0 failed_phases=() failed_tests=()
    for p in "${bg_phases[@]}"; do run_phase "$p"; done
    {
      echo "$total_pass $total_fail"
      for p in "${failed_phases[@]}"; do echo "P $p"; done
      for p in "${failed_tests[@]}"; do echo "T $p"; done
    } >"$bg_state"
  ) >"$bg_log" 2>&1 &
  bg_pid=$!
}

for phase in "${fg_phases[@]}"; do run_phase "$phase"; done
if ((${#bg_phases[@]})); then
  if [[ -z $bg_pid ]]; then
    # main did not build: the other phases in the foreground after all.
    for phase in "${bg_phases[@]}"; do run_phase "$phase"; done
  else
    say "waiting for the background phases (${bg_phases[*]})"
    wait "$bg_pid"
    say "the background phases' output ($bg_log)"
    cat "$bg_log"
    if [[ -s $bg_state ]]; then
      read -r p f <"$bg_state"
      total_pass=$((total_pass + p)) total_fail=$((total_fail + f))
      while IFS= read -r line; do
        case $line in
          "P "*) failed_phases+=("${line#P }") ;;
          "T "*) failed_tests+=("${line#T }") ;;
        esac
      done <"$bg_state"
    else
      echo "test.sh: the background phases ended without their counts" >&2
      total_fail=$((total_fail + 1))
      failed_phases+=("background")
    fi
  fi
fi

say "summary"
echo "phases: $phases; took $((SECONDS - t_start))s"
[[ ${#failed_phases[@]} -eq 0 ]] || echo "failures in: ${failed_phases[*]}"
for t in "${failed_tests[@]}"; do echo "  failed: $t"; done
echo "$total_pass passed, $total_fail failed"
[[ $total_fail -eq 0 ]]
