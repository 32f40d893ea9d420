#!/usr/bin/env bash
# bench/fold.sh [BLOCKS] [ROUNDS] - what folding shape arithmetic (simplify/shape_folding.h) costs
# next to reading the model, on a `cleave gen chain` model (5 nodes a block; 200000 blocks:
# 1,000,002 nodes). Each round reads the model, then plans the folding and applies it, on the
# same file (bench_fold); the ratios fold / read come with their spread over the rounds.
# Goal (issue 44): planning the folding, which split/partition/pipeline pay on every ONNX model,
# costs at most 10% of reading it. Applying runs only when something folds.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
blocks="${1:-200000}"
rounds="${2:-5}"
"$root/scripts/setup"
"$root/scripts/build" "$root/build/release"
model="${TMPDIR:-/tmp}/cleave_bench_chain_${blocks}.onnx"
[ -f "$model" ] || "$root/build/release/cleave" gen chain "$blocks" -o "$model"
echo "model: $model ($(stat -c %s "$model") bytes)"
"$root/build/release/bench_fold" "$model" --rounds "$rounds"
