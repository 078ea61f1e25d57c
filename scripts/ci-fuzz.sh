#!/usr/bin/env bash
# Fuzzing in CI (issue 5, docs/RELIABILITY.md): builds the libFuzzer targets of fuzz/ with clang,
# AddressSanitizer and UndefinedBehaviorSanitizer, and runs each for a bounded time from its
# seed corpus (fuzz/corpus/<target>). Any finding (a crash, a sanitizer report, a broken check,
# an allocation over the limit) fails the run and leaves the input under $build/artifacts/.
#
#   GDN_FUZZ_SECONDS   seconds per target (default 30: two targets, about a minute)
#   GDN_FUZZ_BUILD     build folder (default build-fuzz)
#   GDN_CI_JOBS        parallel build jobs (default: nproc)
#
# Needs clang with compiler-rt's libFuzzer (Debian: clang, libclang-rt-dev); installs them with
# apt-get when missing and this runs as root (or with sudo), else says why it skips.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${GDN_FUZZ_SECONDS:-30}
build=${GDN_FUZZ_BUILD:-build-fuzz}
jobs=${GDN_CI_JOBS:-$(nproc)}

libfuzzer_works() {
  local dir
  dir=$(mktemp -d)
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char *, unsigned long) { return 0; }\n' >"$dir/t.cpp"
  local ok=0
  clang++ -fsanitize=fuzzer,address,undefined "$dir/t.cpp" -o "$dir/t" >/dev/null 2>&1 || ok=1
  rm -rf "$dir"
  return $ok
}

if ! command -v clang++ >/dev/null || ! libfuzzer_works; then
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  if [[ $(id -u) -eq 0 ]] || sudo -n true 2>/dev/null; then
    echo "ci-fuzz: installing clang and libclang-rt-dev (libFuzzer)"
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq clang libclang-rt-dev
  fi
  if ! command -v clang++ >/dev/null || ! libfuzzer_works; then
    echo "ci-fuzz: SKIPPED: clang with libFuzzer (compiler-rt) is not available and cannot be installed here"
    exit 0
  fi
fi

start=$SECONDS
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# The library itself is instrumented (coverage for libFuzzer, ASan, UBSan); only the fuzz
# targets link the libFuzzer driver.
CC=clang CXX=clang++ cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g" \
  "-DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
  "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" \
  -DGDN_CUDA=OFF -DGDN_BUILD_TESTS=OFF -DGDN_BUILD_TOOLS=OFF -DGDN_BUILD_BENCH=OFF -DGDN_BUILD_EXAMPLES=OFF \
  -DGDN_FUZZ=ON >/dev/null
cmake --build "$build" -j "$jobs" --target fuzz_api fuzz_gguf
echo "ci-fuzz: built in $((SECONDS - start)) s"

mkdir -p "$build/artifacts"
export ASAN_OPTIONS=detect_leaks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
total=0
for target in fuzz_api fuzz_gguf; do
  work=$(mktemp -d)  # new inputs go here, not into the repository's corpus
  log="$build/$target.log"
  # -malloc_limit_mb: a single allocation over 512 MiB is a finding (no input here is large).
  if ! "$build/fuzz/$target" "$work" "fuzz/corpus/${target#fuzz_}" -max_total_time="$seconds" -max_len=4096 \
      -timeout=10 -rss_limit_mb=3072 -malloc_limit_mb=512 -print_final_stats=1 \
      -artifact_prefix="$build/artifacts/$target-" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "ci-fuzz: $target FOUND A PROBLEM; the input is in $build/artifacts/ (replay: $build/fuzz/$target FILE)" >&2
    exit 1
  fi
  runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)
  total=$((total + runs))
  echo "ci-fuzz: $target: $runs executions in ${seconds} s, no findings; $(grep -E 'tally' "$log" | tail -1)"
  rm -rf "$work"
done
echo "ci-fuzz: $total executions, no findings, in $((SECONDS - start)) s"
