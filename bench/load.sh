#!/usr/bin/env bash
# bench/load.sh [BLOCKS] - time reading a `cleave gen chain` model into the IR and verifying it.
#
# BLOCKS defaults to 200000 (5 nodes a block: 1,000,002 nodes, 275 MB). In one run, on the same
# file, it times:
#   - cleave: readOnnx (parse + IR build) + verifyGraph, peak memory (bench_load);
#   - the floor: protobuf parsing alone into onnx::ModelProto (what any libonnx reader pays);
#   - Python's onnx.load (PyPI's onnx, the virtual environment's) of the same file, for scale;
# and prints time per node, bytes per node and the ratios. Goal (issue 2): <= 3 s, <= 2 GiB.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
blocks="${1:-200000}"
"$root/scripts/setup"
"$root/scripts/build" "$root/build/release"
model="${TMPDIR:-/tmp}/cleave_bench_chain_${blocks}.onnx"
[ -f "$model" ] || "$root/build/release/cleave" gen chain "$blocks" -o "$model"

echo "model: $model ($(stat -c %s "$model") bytes)"
cleave_out="$("$root/build/release/bench_load" "$model")"
floor_out="$("$root/build/release/bench_load" "$model" --parse-only-first | head -1)"
echo "$cleave_out"
echo "$floor_out"
python_s="$("$root/.venv/bin/python3" - "$model" <<'PY'
import sys, time, onnx
t = time.perf_counter(); m = onnx.load(sys.argv[1]); print(f"{time.perf_counter() - t:.3f}")
PY
)"
echo "python onnx.load: ${python_s} s"
total_s="$(echo "$cleave_out" | sed -n 's/^total: \([0-9.]*\) s.*/\1/p')"
floor_s="$(echo "$floor_out" | sed -n 's/^protobuf parse only: \([0-9.]*\) s.*/\1/p')"
awk -v t="$total_s" -v f="$floor_s" -v p="$python_s" 'BEGIN {
  printf "ratio cleave total / protobuf parse alone: %.2f\n", t / f;
  printf "ratio python onnx.load / cleave total: %.2f\n", p / t }'
