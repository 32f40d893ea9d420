#!/usr/bin/env bash
# bench/partition.sh - size-based partitioning against PyTorch's Partitioner, same work.
#
# First, in one run on the same graphs (graphs.py linear_chain and diamonds, exported to FX JSON),
# with time_partitioner.py's set-up (4 devices of total/4 + total/8 bytes, NodeLatency(1, 2),
# 1e9 B/s): PyTorch's partition_graph (size_based; it also builds the split module and DAG)
# against cleave's partitionBySize, with both critical paths. Then cleave alone on `cleave gen
# chain` models of 100k and 1M nodes onto 8 devices (estimated latencies).
# Then cost_aware and kl_based against PyTorch on the sizes issue 5 names (PyTorch: about 4 s for
# cost_aware on linear_chain 30, 12 s for kl_based on linear_chain 80), and cleave alone on
# 10,000-node graphs of both families.
# Goals (issue 5): size_based on 1M nodes <= 2 s; cost_aware and kl_based >= 1000x faster with a
# critical path as good or better, and <= 1 s on 10,000 nodes. (Diamonds stay small: PyTorch's critical-path
# function enumerates every path, which doubles per diamond; at 100 diamonds it never ends.)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup"
"$root/scripts/build" "$root/build/release"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
ref="$root/../shared/bench/reference"
printf '%-13s %6s %7s %12s %12s %9s %12s %12s\n' family n nodes torch_s cleave_s ratio torch_cp cleave_cp
for case in "linear_chain 100" "linear_chain 1000" "diamonds 8" "diamonds 14"; do
  set -- $case
  torch_line="$(cd "$ref" && "$root/.venv/bin/python3" time_partitioner.py size_based "$1" "$2" | tail -1)"
  "$root/.venv/bin/python3" "$root/tools/cleave_fx.py" family "$1" "$2" -o "$tmp/g.json"
  cleave_line="$("$root/build/release/bench_partition" "$tmp/g.json" --reference --repeat 5)"
  field() { echo "$1" | sed -n "s/.*$2=\([0-9.]*\).*/\1/p"; }
  awk -v f="$1" -v n="$2" -v nodes="$(field "$torch_line" nodes)" -v t="$(field "$torch_line" seconds)" \
      -v c="$(field "$cleave_line" partition_median_s)" -v tcp="$(field "$torch_line" critical_path)" \
      -v ccp="$(field "$cleave_line" critical_path)" \
      'BEGIN { printf "%-13s %6d %7d %12.4f %12.6f %8.0fx %12.1f %12.1f\n", f, n, nodes, t, c, t / c, tcp, ccp }'
done
echo
printf '%-10s %-13s %6s %7s %12s %12s %9s %12s %12s\n' mode family n nodes torch_s cleave_s ratio torch_cp cleave_cp
for case in "cost_aware linear_chain 30" "cost_aware diamonds 8" "kl_based linear_chain 80" "kl_based diamonds 8"; do
  set -- $case
  torch_line="$(cd "$ref" && "$root/.venv/bin/python3" time_partitioner.py "$1" "$2" "$3" | tail -1)"
  "$root/.venv/bin/python3" "$root/tools/cleave_fx.py" family "$2" "$3" -o "$tmp/g.json"
  cleave_line="$("$root/build/release/bench_partition" "$tmp/g.json" --reference --repeat 5 --mode "$1")"
  field() { echo "$1" | sed -n "s/.*$2=\([0-9.]*\).*/\1/p"; }
  awk -v m="$1" -v f="$2" -v n="$3" -v nodes="$(field "$torch_line" nodes)" -v t="$(field "$torch_line" seconds)" \
      -v c="$(field "$cleave_line" partition_median_s)" -v tcp="$(field "$torch_line" critical_path)" \
      -v ccp="$(field "$cleave_line" critical_path)" \
      'BEGIN { printf "%-10s %-13s %6d %7d %12.4f %12.6f %8.0fx %12.4f %12.4f\n", m, f, n, nodes, t, c, t / c, tcp, ccp }'
done
echo
for case in "linear_chain 5000" "diamonds 2500"; do
  set -- $case
  "$root/.venv/bin/python3" "$root/tools/cleave_fx.py" family "$1" "$2" -o "$tmp/g.json"
  for mode in cost_aware kl_based optimal; do
    echo "$1 $2: $("$root/build/release/bench_partition" "$tmp/g.json" --reference --repeat 3 --mode "$mode")"
  done
done
echo
for blocks in 20000 200000; do
  model="${TMPDIR:-/tmp}/cleave_bench_chain_${blocks}.onnx"
  [ -f "$model" ] || "$root/build/release/cleave" gen chain "$blocks" -o "$model" 2>/dev/null
  # 8 devices, each a sixth of the model: every device gets a partition.
  bytes=$(( blocks * 2304 / 6 ))
  printf '{"devices": [%s]}' "$(for i in 0 1 2 3 4 5 6 7; do printf '%s{"logical_id": %d, "available_mem_bytes": %d}' "$([ $i -gt 0 ] && echo ,)" $i $bytes; done)" >"$tmp/devices.json"
  "$root/build/release/bench_partition" "$model" "$tmp/devices.json" --repeat 3
done
