#!/bin/sh
# The numbers of docs/PERF.md: medians over repetitions of gdn_bench (the cpu backend at model
# shapes, chunked and per-token) and gemm_bench (the small-GEMM kernel choices).
#   bench/perf_report.sh [BUILD_DIR] [THREADS] [REPETITIONS]
set -e
build=${1:-build}
threads=${2:-2}
reps=${3:-5}
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bench/gdn_bench" --threads="$threads" --benchmark_repetitions="$reps" \
    --benchmark_report_aggregates_only=true --benchmark_min_time=1 \
    --benchmark_filter="${GDN_BENCH_FILTER:-^(fwd|bwd)}" 2>/dev/null | grep -E '_(median|cv|min) '
"$build/bench/gemm_bench" --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true \
    --benchmark_min_time=0.2 2>/dev/null | grep -E '_median '
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
