#!/usr/bin/env bash
# bench/binaries.sh BASELINE_CLEAVE - this build's `cleave run` against another build's binary (a
# commit before a refactor: "no slower than before"), on the zoo models (bench/zoo_models.sh:
# MODELS, default resnet50 and the BERT-base-sized encoder), on the same inputs.
# Interleaved: each round times both binaries once (one process each, a block of REPEAT runs, its
# median), alternating which goes first. Printed per model: each side's median over the ROUNDS
# rounds and the ratio this / baseline: the median of the per-round ratios with their [min, max]
# (a range that straddles 1.00 is noise, not a result).
set -euo pipefail
if [ $# -ne 1 ] || [ ! -x "$1" ]; then
  echo "usage: bench/binaries.sh BASELINE_CLEAVE (an executable cleave of another build)" >&2
  exit 2
fi
baseline="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
source "$(dirname "${BASH_SOURCE[0]}")/zoo_models.sh" # root, zoo, models
cleave="$root/build/release/cleave"
repeat="${REPEAT:-20}" rounds="${ROUNDS:-5}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
printf '%-12s %10s %10s %22s\n' model this_ms base_ms "this/base [range]"
for model in $models; do
  : >"$tmp/times"
  for ((round = 0; round < rounds; ++round)); do
    sides=(this base)
    ((round % 2)) && sides=(base this)
    for side in "${sides[@]}"; do
      binary="$cleave"
      [ "$side" = base ] && binary="$baseline"
      echo "$side $round $("$binary" run "$zoo/$model.onnx" --inputs "$zoo/$model.inputs.json" --repeat "$repeat" \
        --json | tr -d '\n')" >>"$tmp/times"
    done
  done
  "$root/.venv/bin/python3" - "$model" "$tmp/times" <<'PY'
import json, statistics, sys
model, medians = sys.argv[1], {}
for line in open(sys.argv[2]):
    side, round_, text = line.split(" ", 2)
    medians.setdefault(side, {})[int(round_)] = json.loads(text)["timing"]["median_s"] * 1e3
rounds = sorted(medians["this"])
ratios = [medians["this"][r] / medians["base"][r] for r in rounds]
print(f"{model:<12} {statistics.median(medians['this'].values()):10.2f} "
      f"{statistics.median(medians['base'].values()):10.2f} "
      f"{statistics.median(ratios):>10.3f}x [{min(ratios):.3f},{max(ratios):.3f}]")
PY
done
