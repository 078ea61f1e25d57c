#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU: builds gdn with the CUDA backend for this GPU,
# then runs, each under a time limit,
#   1. the cuda unit tests (ctest -L cuda: parity with ref, determinism, stream, refusals),
#      then on their own the serving ones (packed decode batches in one launch chain on state
#      pools in place, value-major and key-major states giving the same bits),
#   2. gdn-ops test -b CUDA0, 3. gdn-ops grad -b CUDA0,
#   4. gdn-ops perf -b CUDA0 and cuda_bench at the Qwen3.5-27B shape, T = 1, 512, 4096,
#   5. bf16: cuda_precision_bench at the 27B shape, T = 512, 4096 (F32 tensors, BF16 tensors
#      EXACT, BF16 tensors with GDN_PRECISION_BF16: times, and errors against ref at T = 512),
#      and scripts/check-cuda-sass.sh (bf16 mma instructions in the chunked kernels' SASS),
#   6. compute-sanitizer memcheck and racecheck on the small test cases,
# and prints a table of the results last. Exit status: non-zero when any step failed.
# Budget: under 8 minutes on an H200 (GDN_GPU_CHECK_SECONDS, default 460, caps every step).
#
#   scripts/gpu-check.sh [build-dir]        (default: build-gpu)
set -uo pipefail

cd "$(dirname "$0")/.."
BUILD=${1:-build-gpu}
LOG=$BUILD/gpu-check-logs
mkdir -p "$LOG"
export PATH=/usr/local/cuda/bin:$PATH
JOBS=$(nproc 2>/dev/null || echo 4)

# Every step gets at most what is left of the whole budget (7 min 40 s), so the script ends in time.
BUDGET=${GDN_GPU_CHECK_SECONDS:-460}
declare -a NAMES RESULTS SECONDS_TAKEN
record() { NAMES+=("$1"); RESULTS+=("$2"); SECONDS_TAKEN+=("$3"); }

# run NAME LIMIT_SECONDS COMMAND...: runs a step with a time limit, logs to $LOG/NAME.log.
run() {
    local name=$1 limit=$2
    shift 2
    local left=$((BUDGET - SECONDS))
    [ "$limit" -le "$left" ] || limit=$left
    if [ "$limit" -lt 5 ]; then record "$name" "SKIP: out of time" 0; return 1; fi
    local start=$SECONDS
    echo "== $name: $*"
    timeout --signal=KILL "$limit" "$@" >"$LOG/$name.log" 2>&1
    local rc=$?
    local took=$((SECONDS - start))
    tail -n 15 "$LOG/$name.log"
    if [ $rc -eq 0 ]; then record "$name" PASS "$took"
    elif [ $rc -eq 137 ]; then record "$name" "TIMEOUT(${limit}s)" "$took"
    else record "$name" "FAIL(rc=$rc)" "$took"; fi
    return $rc
}

skip() { echo "== $1: skipped ($2)"; record "$1" "SKIP: $2" 0; }

# The GPU's architecture, e.g. 90 for an H100/H200 (nvidia-smi knows it; else CMake's native).
ARCH=${GDN_CUDA_ARCH:-}
[ -n "$ARCH" ] || ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')
[ -n "$ARCH" ] || ARCH=native
nvidia-smi >/dev/null 2>&1 || echo "gpu-check: WARNING: nvidia-smi sees no GPU; the device steps will fail or skip"
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)

if ! run configure 120 cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DGDN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH"; then
    # No GoogleTest on this machine: build the library and tools only.
    rm -rf "$BUILD/CMakeCache.txt" "$BUILD/CMakeFiles"
    run configure-no-tests 120 cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DGDN_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DGDN_BUILD_TESTS=OFF -DGDN_BUILD_BENCH=OFF -DGDN_BUILD_EXAMPLES=OFF
fi
run build 240 cmake --build "$BUILD" -j "$JOBS"

TESTS=$BUILD/tests/cuda/cuda_backend_test
OPS=$(find "$BUILD" -type f -name gdn-ops -perm -u+x 2>/dev/null | head -n1)
BENCH=$BUILD/tests/cuda/cuda_bench
PRECISION_BENCH=$BUILD/tests/cuda/cuda_precision_bench
if [ ! -x "$BENCH" ] && [ -f "$BUILD/src/libgdn.a" ]; then
    # Tests were not configured (no GoogleTest): build the bench by hand against the static library.
    g++ -O2 -std=c++17 tests/cuda/cuda_bench.cpp -Iinclude -I/usr/local/cuda/include "$BUILD/src/libgdn.a" \
        -L/usr/local/cuda/lib64 -lcudart_static -lpthread -ldl -lrt -o "$BUILD/cuda_bench" && BENCH=$BUILD/cuda_bench
fi
if [ ! -x "$PRECISION_BENCH" ] && [ -f "$BUILD/src/libgdn.a" ]; then
    g++ -O2 -std=c++17 tests/cuda/cuda_precision_bench.cpp -Iinclude -Isrc -I/usr/local/cuda/include "$BUILD/src/libgdn.a" \
        -L/usr/local/cuda/lib64 -lcudart_static -lpthread -ldl -lrt -o "$BUILD/cuda_precision_bench" && PRECISION_BENCH=$BUILD/cuda_precision_bench
fi

if [ -x "$TESTS" ]; then
    run unit-tests 120 "$TESTS" --gtest_brief=1
    run serving 60 "$TESTS" --gtest_brief=1 --gtest_filter='CudaServing.*'
else
    skip unit-tests "not built"; skip serving "not built"
fi
if [ -n "$OPS" ]; then
    run ops-test 90 "$OPS" test -b CUDA0
    run ops-grad 90 "$OPS" grad -b CUDA0
    run ops-perf 90 "$OPS" perf -b CUDA0 -p 'Hv=48,T=(1|512|4096),.*gate=scalar' --min-time 0.5
else
    skip ops-test "gdn-ops not built"; skip ops-grad "gdn-ops not built"; skip ops-perf "gdn-ops not built"
fi
if [ -x "$BENCH" ]; then run bench-27b 60 "$BENCH" 1 512 4096; else skip bench-27b "cuda_bench not built"; fi
if [ -x "$PRECISION_BENCH" ]; then run bf16-27b 90 "$PRECISION_BENCH" 512 4096; else skip bf16-27b "cuda_precision_bench not built"; fi
if command -v cuobjdump >/dev/null; then run sass-bf16 30 scripts/check-cuda-sass.sh "$BUILD"; else skip sass-bf16 "cuobjdump missing"; fi

# Small cases of every kernel: per-token (case0-2, 5-7), chunked forward and backward (case8), tile ops,
# the sequence tables on pools (decode batches) and the state copy between layouts.
SMALL='CudaContract.*:TileOpsGpu.*:CudaServing.EmptySequenceStateMovesBetweenLayouts:CudaServing.DecodeBatchesUpdateAPoolInPlace:Shapes/CudaParity.*/case0:Shapes/CudaParity.*/case1:Shapes/CudaParity.*/case2:Shapes/CudaParity.*/case5:Shapes/CudaParity.*/case6:Shapes/CudaParity.*/case7:Shapes/CudaParity.*/case8'
if command -v compute-sanitizer >/dev/null && [ -x "$TESTS" ]; then
    run memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 1 "$TESTS" --gtest_brief=1 --gtest_filter="$SMALL"
    run racecheck 90 compute-sanitizer --tool racecheck --error-exitcode 1 "$TESTS" --gtest_brief=1 \
        --gtest_filter="TileOpsGpu.*:Shapes/CudaParity.BackwardMatchesRef/case1:Shapes/CudaParity.BackwardMatchesRef/case5:Shapes/CudaParity.BackwardMatchesRef/case8:Shapes/CudaParity.ForwardMatchesRef/case1"
else
    skip memcheck "compute-sanitizer or the tests missing"; skip racecheck "compute-sanitizer or the tests missing"
fi

echo
echo "== timings (cuda_bench, 27B shape, B = 1; targets at T = 4096: fwd < 0.35 ms, bwd < 1.1 ms)"
[ -f "$LOG/bench-27b.log" ] && grep -E '^(op|fwd|fwd-tok|bwd|bwd-tok) ' "$LOG/bench-27b.log"
echo
echo "== bf16 (cuda_precision_bench, 27B shape, B = 1: F32 tensors / BF16 tensors EXACT / BF16 tensors with bf16 mma)"
[ -f "$LOG/bf16-27b.log" ] && grep -E '^(mode|f32|bf16|bf16-mma) ' "$LOG/bf16-27b.log"
echo
echo "== gpu-check summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1), sm_$ARCH; logs in $LOG)"
printf '%-20s %-46s %8s\n' step result seconds
failed=0
for i in "${!NAMES[@]}"; do
    printf '%-20s %-46s %8s\n' "${NAMES[$i]}" "${RESULTS[$i]}" "${SECONDS_TAKEN[$i]}"
    case "${RESULTS[$i]}" in PASS|"SKIP: gdn-ops"*|"SKIP: cuda_bench"*|"SKIP: cuda_precision_bench"*|"SKIP: cuobjdump"*|"SKIP: compute-sanitizer"*) ;;
        *) [ "${NAMES[$i]}" = configure ] || failed=1 ;; esac
done
exit $failed
