#!/usr/bin/env bash
# bench/pipeline.sh - the pipeline planner's optimal policy on a 100,002-node model into 64 stages,
# and the schedule simulator on 64 ranks x 512 microbatches (generate + add communication +
# validate-and-simulate). Goals (issue 6): both at most 1 s.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup"
"$root/scripts/build" "$root/build/release"
model="${TMPDIR:-/tmp}/cleave_bench_chain_20000.onnx"
[ -f "$model" ] || "$root/build/release/cleave" gen chain 20000 -o "$model" 2>/dev/null
"$root/build/release/bench_pipeline" "$model" --stages 64 --repeat 3
