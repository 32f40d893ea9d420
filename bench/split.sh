#!/usr/bin/env bash
# bench/split.sh - cleave's accelerator/CPU splitter against PyTorch's (_SplitterBase), same work.
#
# For chain and wide graphs of about 1k and 10k nodes (shared/bench/reference/graphs.py, exported
# to FX JSON by tools/cleave_fx.py), in one run: PyTorch's time_splitter.py (set-up incl.
# ShapeProp, acc-node finding and fusion, plus the split) and cleave's support decisions + split
# on the very same graph and support set (every call_function except torch.sigmoid). Prints both
# and the ratio. Then cleave alone on `cleave gen chain` ONNX models of 100k and 1M nodes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup"
"$root/scripts/build" "$root/build/release"
ref="$root/../shared/bench/reference"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo '{"name": "no-sigmoid (fx)", "ops": ["torch.matmul", "torch.relu", "torch.tanh", "torch.add", "torch.cat"]}' >"$tmp/fx.json"
echo '{"name": "no-sigmoid (onnx)", "ops": ["MatMul", "Relu", "Tanh", "Add", "Concat"]}' >"$tmp/onnx.json"

printf '%-7s %8s %8s %14s %14s %10s\n' family n nodes torch_s cleave_s ratio
for case in "chain 200" "chain 2000" "wide 250" "wide 2500"; do
  set -- $case
  family=$1 n=$2
  torch_line="$(cd "$ref" && "$root/.venv/bin/python3" time_splitter.py "$family" "$n" | tail -1)"
  setup_s="$(echo "$torch_line" | sed -n 's/.*setup_s=\([0-9.]*\).*/\1/p')"
  split_s="$(echo "$torch_line" | sed -n 's/.*split_s=\([0-9.]*\).*/\1/p')"
  "$root/.venv/bin/python3" "$root/tools/cleave_fx.py" family "$family" "$n" -o "$tmp/g.json"
  cleave_line="$("$root/build/release/bench_split" "$tmp/g.json" "$tmp/fx.json" --repeat 5)"
  nodes="$(echo "$cleave_line" | sed -n 's/.*nodes=\([0-9]*\).*/\1/p')"
  cleave_s="$(echo "$cleave_line" | sed -n 's/.*split_median_s=\([0-9.]*\).*/\1/p')"
  awk -v f="$family" -v n="$n" -v nodes="$nodes" -v a="$setup_s" -v b="$split_s" -v c="$cleave_s" \
    'BEGIN { t = a + b; printf "%-7s %8d %8d %14.4f %14.6f %9.0fx\n", f, n, nodes, t, c, t / c }'
done
echo
echo "cleave alone (ONNX chain, support + split, no submodels written):"
for blocks in 20000 200000; do
  model="${TMPDIR:-/tmp}/cleave_bench_chain_${blocks}.onnx"
  [ -f "$model" ] || "$root/build/release/cleave" gen chain "$blocks" -o "$model" 2>/dev/null
  "$root/build/release/bench_split" "$model" "$tmp/onnx.json" --repeat 3
done
