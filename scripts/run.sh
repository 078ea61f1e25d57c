#!/usr/bin/env bash
# The main job: builds gdn-ops and runs the harness at the Qwen3.5-27B shape (q/k/v as views
# into the packed conv buffer) on every available backend: test against REF, grad against
# finite differences, and perf (ggml's own forward beside gdn's: the GGML backend, with the
# pinned ggml of scripts/setup-ggml.sh).
#   GDN_BUILD_DIR, GDN_CMAKE_ARGS as in scripts/test.sh; extra arguments go to every gdn-ops call.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
ggml_dir=$(scripts/setup-ggml.sh)
build=${GDN_BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGDN_GGML=ON -DGDN_GGML_DIR="$ggml_dir" ${GDN_CMAKE_ARGS:-}
cmake --build "$build" -j "$(nproc)" --target gdn-ops
ops="$build/tools/gdn-ops/gdn-ops"
status=0
for mode in test grad perf; do
  echo "== gdn-ops $mode --preset qwen3.5-27b $*"
  "$ops" "$mode" --preset qwen3.5-27b "$@" || status=1
done
exit $status
