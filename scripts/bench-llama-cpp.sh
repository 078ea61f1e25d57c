#!/usr/bin/env bash
# llama-bench with and without libggml-gdn, alternated round by round in one run (docs/PERF.md,
# "llama.cpp with libggml-gdn"): one line per round, test and mode with its tokens/s.
#   scripts/bench-llama-cpp.sh MODEL.gguf [ROUNDS] [llama-bench options...]
# default options: -p 512 -n 64 -r 2 -t 2. Builds what it needs with scripts/setup-llama-cpp.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench-llama-cpp.sh MODEL.gguf [ROUNDS] [llama-bench options...]}
rounds=${2:-5}
shift $(( $# >= 2 ? 2 : 1 ))
options=("$@")
((${#options[@]})) || options=(-p 512 -n 64 -r 2 -t 2)
setup=$(scripts/setup-llama-cpp.sh)  # (a failure stops here: eval of a failed substitution would not)
eval "$setup"
for ((round = 1; round <= rounds; ++round)); do
  for mode in without-gdn with-gdn; do
    if [[ $mode == with-gdn ]]; then export GGML_BACKEND_PATH=$GGML_GDN; else unset GGML_BACKEND_PATH; fi
    # csv: n_prompt, n_gen and avg_ts by their header names
    "$LLAMA_CPP_BIN/llama-bench" -m "$model" "${options[@]}" -o csv 2>/dev/null | awk -F'","' -v m=$mode -v r=$round '
      NR == 1 { n = split($0, h, ","); for (i = 1; i <= n; ++i) { gsub(/"/, "", h[i]); col[h[i]] = i }; next }
      { np = $col["n_prompt"]; ng = $col["n_gen"]; ts = $col["avg_ts"]; test = np > 0 ? "pp" np : "tg" ng
        printf "round %d %-12s %-8s %10.2f t/s\n", r, m, test, ts }'
  done
done
