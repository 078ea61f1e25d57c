#!/usr/bin/env bash
# Sanitizer runs of CI (issue 5, docs/RELIABILITY.md). Fails on any report.
#
#   scripts/ci-sanitizers.sh [asan] [tsan] [valgrind]     (no argument: all three)
#
#   asan      AddressSanitizer + UndefinedBehaviorSanitizer build (GDN_SANITIZE=ON, -O1) of the
#             library, the tests and gdn-ops: every CTest test except the labels slow, harness
#             and cuda, then `gdn-ops test -p fd` and `gdn-ops grad -p fd`. LeakSanitizer is on.
#   tsan      ThreadSanitizer build of the multithreaded tests only: the reliability
#             concurrency test (8 threads on 8 contexts; on the cpu backend when it is built,
#             else ref), the cpu backend's tests when they exist, and the emulated cuda
#             kernels (each CUDA thread a host thread: a shared-memory access that no
#             __syncthreads/__syncwarp orders is a reported race, racecheck without a GPU).
#             The emulation runs a host thread per CUDA thread and TSan slows it about tenfold,
#             so TSan takes one shape per kernel path (GDN_TSAN_CUDA_TESTS, a CTest regex):
#             every kernel, its multi-slice, staged-tile and windowed paths, and the 27B head
#             size; the plain test run covers every shape's numbers.
#   valgrind  memcheck with full leak checking on the leak-cycle test and `gdn-ops grad -p fd`,
#             from the plain build GDN_BUILD_DIR (default build; scripts/test.sh makes it).
#
#   GDN_ASAN_BUILD / GDN_TSAN_BUILD   build folders (default build-asan / build-tsan)
#   GDN_CI_JOBS                       parallel jobs (default: nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=${GDN_CI_JOBS:-$(nproc)}
modes=("$@")
((${#modes[@]})) || modes=(asan tsan valgrind)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# Lean builds: -O1 keeps the sanitizers fast enough and the build short; no CUDA, benchmarks
# or examples.
common=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g"
        -DGDN_CUDA=OFF -DGDN_BUILD_BENCH=OFF -DGDN_BUILD_EXAMPLES=OFF)

# Any sanitizer report in a log fails the run even when the process exited 0.
check_logs() {
  if grep -lE "runtime error:|ERROR: (AddressSanitizer|LeakSanitizer|ThreadSanitizer)|WARNING: ThreadSanitizer|SUMMARY: (Address|Undefined|Thread|Leak)" "$@" 2>/dev/null; then
    echo "ci-sanitizers: sanitizer reports in the logs above" >&2
    return 1
  fi
}

run_asan() {
  local build=${GDN_ASAN_BUILD:-build-asan} start=$SECONDS
  cmake -S . -B "$build" "${generator[@]}" "${common[@]}" -DGDN_SANITIZE=ON >/dev/null
  cmake --build "$build" -j "$jobs"
  export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  ctest --test-dir "$build" -LE "slow|harness|cuda" --no-tests=error -j "$jobs" --output-on-failure --timeout 900 2>&1 | tee "$logs/asan-ctest.log"
  local ops="$build/tools/gdn-ops/gdn-ops"
  "$ops" test -p fd --no-fork 2>&1 | tee "$logs/asan-ops-test.log"
  "$ops" grad -p fd --no-fork 2>&1 | tee "$logs/asan-ops-grad.log"
  check_logs "$logs"/asan-*.log "$build"/Testing/Temporary/LastTest.log
  unset ASAN_OPTIONS UBSAN_OPTIONS
  echo "ci-sanitizers: asan+ubsan clean in $((SECONDS - start)) s"
}

# The emulated kernels under TSan: the tile operations and workspace plans; the per-token forward
# and backward at one row per lane (Sk 16), four rows per lane (Sk 96), and KDA with snapshots
# and Bq < B (Sk 40); the per-token forward's column slices (Sv 70) and staged tiles (Sk 130);
# the chunked forward and backward at the 27B head size (Sk 128), with two column slices (Sv 64)
# and with windows (T 150); sequences that share q/k rows (B 4, Bq 2: the per-token kernels, the
# chunked forward); packed sequences with KDA and K = 2.
tsan_cuda_default='EmulatedTileOps|WorkspacePlan|Shapes/Emulated(\.Forward|Backward\.)MatchesRef/Sk=(16,Sv=16,Hk=1,Hv=2,T=5,|96,|40,)'\
'|Shapes/Emulated\.ForwardMatchesRef/Sk=(8,Sv=70|130,)|Shapes/Emulated(\.Forward|Backward\.)MatchesRef/Sk=16,Sv=16,Hk=1,Hv=1,T=3,B=4,Bq=2,K=2,gda'\
'|Shapes/EmulatedChunkForward\.MatchesRef/Sk=16,Sv=32,Hk=1,Hv=1,T=40,B=4'\
'|Shapes/EmulatedChunkForward\.MatchesRef/Sk=(128|16,Sv=64)|Shapes/EmulatedChunkBackward\.MatchesRef/Sk=(128|16,Sv=32,Hk=1,Hv=1,T=150)'\
'|Shapes/EmulatedVarlen\.(Forward|Backward)MatchesRef/Sk=16,Sv=16'

run_tsan() {
  local build=${GDN_TSAN_BUILD:-build-tsan} start=$SECONDS
  cmake -S . -B "$build" "${generator[@]}" "${common[@]}" \
    "-DCMAKE_CXX_FLAGS=-fsanitize=thread" "-DCMAKE_C_FLAGS=-fsanitize=thread" \
    "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread" "-DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread" >/dev/null
  # Only the multithreaded tests: the reliability concurrency test and the cpu tests. Only
  # these targets are built here, so -L reliability selects the concurrency test alone.
  local targets=(gdn_reliability_concurrency cuda_emulated_test)
  # shellcheck disable=SC2207
  targets+=($(cmake --build "$build" --target help | grep -oE '\bcpu_[a-z_]*test\b' | sort -u || true))
  cmake --build "$build" -j "$jobs" --target "${targets[@]}"
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
  local cuda_tests=${GDN_TSAN_CUDA_TESTS:-$tsan_cuda_default}
  ctest --test-dir "$build" -L "reliability|cpu" --no-tests=error -j 1 --output-on-failure --timeout 900 2>&1 | tee "$logs/tsan-ctest.log"
  check_logs "$logs"/tsan-*.log "$build"/Testing/Temporary/LastTest.log
  ctest --test-dir "$build" -L cuda -R "$cuda_tests" --no-tests=error -j 1 --output-on-failure --timeout 900 2>&1 | tee "$logs/tsan-cuda-ctest.log"
  check_logs "$logs"/tsan-*.log "$build"/Testing/Temporary/LastTest.log
  unset TSAN_OPTIONS
  echo "ci-sanitizers: tsan clean (${targets[*]}) in $((SECONDS - start)) s"
}

run_valgrind() {
  local build=${GDN_BUILD_DIR:-build} start=$SECONDS
  if ! command -v valgrind >/dev/null; then
    echo "ci-sanitizers: installing valgrind"
    local sudo_cmd=()
    [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq && DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq valgrind
  fi
  cmake --build "$build" -j "$jobs" --target gdn_reliability_leaks gdn-ops
  local vg=(valgrind --leak-check=full --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible --error-exitcode=99 -q)
  "${vg[@]}" "$build/tests/reliability/gdn_reliability_leaks"
  # The project's own backends only: valgrind does not decode AVX-512, and the pip-installed ggml's
  # CPU library runs AVX-512 code on hosts that have it (SIGILL under valgrind on a Zen 4 host);
  # the library's own kernels pick by what the CPU reports, which valgrind masks.
  "${vg[@]}" "$build/tools/gdn-ops/gdn-ops" grad -p fd -b REF,CPU --no-fork >/dev/null
  echo "ci-sanitizers: valgrind clean in $((SECONDS - start)) s"
}

for mode in "${modes[@]}"; do
  case $mode in
    asan) run_asan ;;
    tsan) run_tsan ;;
    valgrind) run_valgrind ;;
    *) echo "ci-sanitizers: unknown mode $mode (asan, tsan, valgrind)" >&2; exit 2 ;;
  esac
done
