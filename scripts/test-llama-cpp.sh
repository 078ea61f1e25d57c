#!/usr/bin/env bash
# llama.cpp's own op test against libggml-gdn: test-backend-ops -o GATED_DELTA_NET with the gdn
# backend loaded through GGML_BACKEND_PATH (each case computed by GDN and by ggml's CPU backend and
# compared); every case must pass, and none may be skipped as unsupported. Then a tiny model's
# logits for a fixed prompt with and without the backend (llama-logits) must agree to F32 rounding:
# GDN_TINY_MODEL, a GGUF, or by default both tiny models of scripts/make-tiny-models.py in
# ~/.cache/gdn/tiny-models, made there when absent with the Python of scripts/test-python.sh's
# environment (GDN_VENV; about ten seconds). Without that environment the comparison is skipped,
# and says so. Builds what it needs with scripts/setup-llama-cpp.sh (cached).
set -euo pipefail
cd "$(dirname "$0")/.."
setup=$(scripts/setup-llama-cpp.sh)  # (a failure stops here: eval of a failed substitution would not)
eval "$setup"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
GGML_BACKEND_PATH=$GGML_GDN timeout 1200 "$LLAMA_CPP_BIN/test-backend-ops" test -b GDN -o GATED_DELTA_NET 2>&1 | tee "$log" \
  | grep -E "GATED_DELTA_NET|tests passed|Backend GDN" >&2
grep -q "loaded GDN backend" "$log" || { echo "test-llama-cpp: the GDN backend was not loaded" >&2; exit 1; }
if grep -qiE "not supported|FAIL" "$log"; then echo "test-llama-cpp: a case failed or was not supported" >&2; exit 1; fi
passed=$(sed -n 's/.* \([0-9]*\)\/\([0-9]*\) tests passed.*/\1 \2/p' "$log")
read -r ok total <<<"${passed:-0 1}"
[[ "$ok" == "$total" && "$total" -gt 0 ]] || { echo "test-llama-cpp: $ok of $total cases passed" >&2; exit 1; }
echo "test-llama-cpp: test-backend-ops GATED_DELTA_NET on GDN: $ok/$total passed"

compare_logits() {
  local model=$1 logits n_vocab result splits
  logits=$(dirname "$GGML_GDN")/llama-logits
  export GGML_BACKEND_DIR=$LLAMA_CPP_BIN
  n_vocab=$("$logits" "$model" "$work/cpu.bin" 2>/dev/null | sed -n 's/^n_vocab //p')
  [[ -n $n_vocab ]] || { echo "test-llama-cpp: llama-logits cannot run $model" >&2; exit 1; }
  GGML_BACKEND_PATH=$GGML_GDN "$logits" "$model" "$work/gdn.bin" >/dev/null 2>"$work/gdn.log" \
    || { cat "$work/gdn.log" >&2; echo "test-llama-cpp: llama-logits with GDN failed" >&2; exit 1; }
  # Proof that GDN computed: it was loaded, and the scheduler split the graph to give it nodes
  # (one split is the CPU backend alone), so the comparison is not the CPU against itself.
  splits=$(sed -n 's/.*graph: nodes = [0-9]*, splits = \([0-9]*\).*/\1/p' "$work/gdn.log" | tail -1)
  if ! grep -q "loaded GDN backend" "$work/gdn.log" || [[ ${splits:-1} -le 1 ]]; then
    echo "test-llama-cpp: $model: the GDN backend computed nothing (graph splits: ${splits:-none})" >&2
    exit 1
  fi
  result=$("$logits" --compare "$work/cpu.bin" "$work/gdn.bin" "$n_vocab") \
    || { echo "test-llama-cpp: $result" >&2; exit 1; }  # exits 1 on a NaN
  echo "test-llama-cpp: $(basename "$model") $result (GDN's graph in $splits splits)"
  # Agreement to F32 rounding: the same top token everywhere, differences within 1e-4 of the largest logit.
  awk '/top token differs at 0 of/ && $0 ~ /relative/ { split($0, a, "relative "); split(a[2], b, ","); exit !(b[1] + 0 < 1e-4) } { exit 1 }' \
    <<<"$result" || { echo "test-llama-cpp: logits differ beyond F32 rounding" >&2; exit 1; }
}

work=$(mktemp -d)
trap 'rm -rf "$log" "$work"' EXIT
if [[ -n ${GDN_TINY_MODEL:-} ]]; then
  compare_logits "$GDN_TINY_MODEL"
  exit 0
fi
models=${HOME:-/root}/.cache/gdn/tiny-models
python=${GDN_VENV:-${HOME:-/root}/.cache/gdn/venv}/bin/python
# The models are remade when the script that makes them or the converter (llama.cpp's version) changes.
key=$( (sha256sum scripts/make-tiny-models.py | cut -c1-16; echo "$LLAMA_CPP_SRC") | sha256sum | cut -c1-16)
for name in qwen35 qwen3next; do
  model=$models/tiny-$name-f32.gguf
  if [[ ! -f $model || "$(cat "$model.key" 2>/dev/null)" != "$key" ]]; then
    if ! "$python" -c "import torch, transformers, tokenizers" 2>/dev/null; then
      echo "test-llama-cpp: SKIPPED the logits: no $model, and no Python with torch and transformers to make it (run scripts/test-python.sh first)"
      exit 0
    fi
    "$python" scripts/make-tiny-models.py --llama-cpp "$LLAMA_CPP_SRC" --out "$models" --only "$name" >"$work/make.log" 2>&1 \
      || { tail -n 30 "$work/make.log" >&2; echo "test-llama-cpp: scripts/make-tiny-models.py failed" >&2; exit 1; }
    grep "^make-tiny-models" "$work/make.log"
    echo "$key" >"$model.key"
  fi
  compare_logits "$model"
done
