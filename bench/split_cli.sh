#!/usr/bin/env bash
# bench/split_cli.sh [BLOCKS] [ROUNDS] - the whole `cleave split --plan-only` of a million-node
# model from the command line (issue 41), against reading the same model alone.
#
# BLOCKS defaults to 200000 (`cleave gen chain`: 1,000,002 nodes), ROUNDS to 5. Each round runs,
# interleaved on the same file, `cleave inspect MODEL --no-infer` (reading the model into the IR
# and counting it: the floor every command pays) and `cleave split MODEL --profile P --plan-only
# -o OUT` (support decisions, the split, the preview, plan.json, report.json and report.txt
# written), then the same split with --json (the report also printed). P leaves Sigmoid on the
# CPU: 40,001 acc and 40,000 CPU submodules. Prints each round's wall seconds and peak resident
# memory, then the medians and [min, max] of the split beyond reading (split - read, per round).
# Goal: at most 1 s beyond reading. BASELINE=PATH (another build's cleave, e.g. an older commit's)
# adds its split of the same model to every round, interleaved, and the per-round ratio
# this split / the baseline's.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
blocks="${1:-200000}"
rounds="${2:-5}"
"$root/scripts/setup"
"$root/scripts/build" "$root/build/release"
cleave="$root/build/release/cleave"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
model="${TMPDIR:-/tmp}/cleave_bench_chain_${blocks}.onnx"
[ -f "$model" ] || "$cleave" gen chain "$blocks" -o "$model" 2>/dev/null
echo '{"name": "no-sigmoid", "ops": ["MatMul", "Relu", "Tanh", "Add"]}' >"$tmp/profile.json"

# Wall seconds and peak RSS (KiB) of one command: "SECONDS KIB".
timed() { /usr/bin/time -f "%e %M" -o "$tmp/time" "$@" >/dev/null 2>&1; cat "$tmp/time"; }

printf '%-6s %10s %10s %10s %10s %12s %12s %10s %8s\n' round read_s split_s json_s beyond_s split_peak_MiB \
  read_peak_MiB base_s ratio
: >"$tmp/rows"
for ((r = 1; r <= rounds; r++)); do
  base_s=0
  if [ -n "${BASELINE:-}" ]; then
    rm -rf "$tmp/out"
    set -- $(timed "$BASELINE" split "$model" --profile "$tmp/profile.json" --plan-only -o "$tmp/out")
    base_s=$1
  fi
  set -- $(timed "$cleave" inspect "$model" --no-infer)
  read_s=$1 read_kib=$2
  rm -rf "$tmp/out"
  set -- $(timed "$cleave" split "$model" --profile "$tmp/profile.json" --plan-only -o "$tmp/out")
  split_s=$1 split_kib=$2
  rm -rf "$tmp/out"
  set -- $(timed "$cleave" split "$model" --profile "$tmp/profile.json" --plan-only -o "$tmp/out" --json)
  json_s=$1
  awk -v r="$r" -v a="$read_s" -v b="$split_s" -v c="$json_s" -v m="$split_kib" -v n="$read_kib" -v z="$base_s" \
    'BEGIN { ratio = 0; if (z > 0) ratio = b / z  # outside printf: there a ">" redirects to a file
             printf "%-6d %10.2f %10.2f %10.2f %10.2f %12.0f %12.0f %10.2f %8.3f\n", r, a, b, c, b - a, m / 1024,
             n / 1024, z, ratio }' | tee -a "$tmp/rows"
done
# Medians and spreads over the rounds (columns: 2 read, 3 split, 4 json, 5 beyond, 6 peak, 8-9 baseline).
columns="2 3 4 5 6"
[ -n "${BASELINE:-}" ] && columns="$columns 8 9"
for column in $columns; do
  sort -g -k"$column","$column" "$tmp/rows" | awk -v c="$column" '{ v[NR] = $c } END {
    split("x read split split_--json beyond_reading split_peak_MiB x baseline_split split_/_baseline", names, " ")
    name = names[c]
    printf "%-16s median %8.3f  [%.3f, %.3f]\n", name, v[int((NR + 1) / 2)], v[1], v[NR] }'
done
