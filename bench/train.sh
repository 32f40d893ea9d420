#!/usr/bin/env bash
# bench/train.sh - pipeline training across 2 ranks on c10d against PyTorch eager on the same
# model and data (bench/train_bench.py), and cleave's send/recv against Gloo's own round trip
# (bench/bench_comm.cpp). Issue 15's performance section; first, float32 against bf16 mixed
# precision and a plan with and without activation recomputation (bench/train_modes.py), then the V
# schedules and data-parallel replicas on 2 ranks (bench/train_schedules.py; both issue 46).
#   ROUNDS=3 STEPS=6 bench/train.sh
#   BASELINE=/path/to/other/cleave ROUNDS=5 STEPS=8 bench/train.sh   # also A/B against another build
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup"
"$root/scripts/build" "$root/build/release"
cleave="$root/build/release/cleave"
"$root/.venv/bin/python3" "$root/bench/train_modes.py" "$cleave" --rounds "${ROUNDS:-3}" --steps "${STEPS:-6}"
"$root/.venv/bin/python3" "$root/bench/train_schedules.py" "$cleave" --rounds "${ROUNDS:-3}" --steps "${STEPS:-6}"
"$root/.venv/bin/python3" "$root/bench/train_bench.py" "$cleave" "$root/build/release/bench_comm" --rounds "${ROUNDS:-3}" \
  --steps "${STEPS:-6}" ${BASELINE:+--baseline-cleave "$BASELINE"}
"$cleave" launch --nproc 2 --master-port 29650 -- "$root/build/release/bench_comm" --rows 8 --cols 1024 \
  --iters "${ITERS:-1000}" --rounds "${ROUNDS:-3}"
