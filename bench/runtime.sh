#!/usr/bin/env bash
# bench/runtime.sh - cleave's ATen executor against ONNX Runtime on the CPU, and the cost of
# running a model cut into submodels, on the same inputs in one run.
#
# Models (tools/export_zoo.py, full size, random weights): torchvision resnet50 (224x224) and a
# BERT-base-sized torch.nn.TransformerEncoder (12 layers, 768 wide, 12 heads, sequence 128); with
# MODELS="mobilenet_v3_large vit_b_16 dcgan" also those (torchvision, 224x224; DCGAN's generator,
# batch 16: five ConvTranspose layers), and any other model tools/export_zoo.py writes (r3d_18:
# 3-D convolutions; ssdlite, fasterrcnn, retinanet, fcos, ssd300 and maskrcnn: detectors with TopK, NonMaxSuppression, RoiAlign, Loop).
#   1. latency: ORT (PyPI onnxruntime, default threads, all graph optimizations) vs
#      `cleave run --repeat N` (median of N; the first run included), ratio cleave / ORT;
#   2. cut overhead: the model split by a profile that leaves Relu/Softmax/Erf on the CPU, run
#      by `cleave run OUT_DIR` (both sides on aten-cpu, so the submodels run joined: cut_ms), and
#      with `--no-join` (every submodel its own module: seams_ms), against the whole model. Both
#      sides run in one process, run by run (`--baseline MODEL`: pairs in alternating order), so
#      each round's overhead is the median of paired ratios, not of two processes' medians.
#   3. what each executor optimization gives: the whole model by default against itself with
#      --no-fusion, --no-blocked-layout, --no-packed-weights and --no-blocked-convolutions
#      (docs/runtime.md), each pair in one process (`--baseline MODEL --baseline-options FLAG`):
#      default / without, the median per-round ratio with its range (below 1: the optimization
#      is faster).
# Interleaved rounds (ROUNDS, default 5): each round times every side once (one block of REPEAT
# runs, its median), alternating the order between rounds. Printed: each side's median over the
# rounds, and for cleave / ORT and the cut's overhead the median of the per-round ratios with
# their [min, max] over the rounds: a range that straddles the goal is noise, not a result.
# Goals (issue 16): cleave <= 1.0x ORT on every model; cut overhead <= 3%.
# SIDES picks the sides after ORT and the whole model (e.g. SIDES="cut seams"; unset: all);
# IMAGE=64 times the image models at 64x64 (bench/zoo_models.sh).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/zoo_models.sh" # root, zoo
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cleave="$root/build/release/cleave"
repeat="${REPEAT:-20}" rounds="${ROUNDS:-5}"
# SIDES: which sides to time besides ORT and the whole model (unset: all; SIDES= times the
# latency alone; a side left out prints "-").
sides_wanted="ort whole ${SIDES-cut seams nofusion dense unpacked channelslast}"
sides_wanted="$(tr ' ' '\n' <<<"$sides_wanted" | awk 'NF && !seen[$0]++' | tr '\n' ' ')"
printf '%-18s %9s %9s %20s %9s %20s %9s %20s %10s %18s %18s %18s %18s\n' model ort_ms cleave_ms "cleave/ORT [range]" \
  cut_ms "overhead [range]" seams_ms "overhead [range]" submodels "/ no-fusion" "/ dense" "/ unpacked" \
  "/ channels-last"
for model in $models; do
  onnx="$zoo/$model.onnx" inputs="$zoo/$model.inputs.json"
  "$root/.venv/bin/python3" - "$onnx" "$tmp/profile.json" <<'PY'
import json, sys, onnx
ops = {n.op_type for n in onnx.load(sys.argv[1], load_external_data=False).graph.node}
json.dump({"name": "holes", "ops": sorted(ops - {"Relu", "Softmax", "Erf"})}, open(sys.argv[2], "w"))
PY
  rm -rf "$tmp/cut"
  "$cleave" split "$onnx" --profile "$tmp/profile.json" -o "$tmp/cut" >/dev/null
  : >"$tmp/times"
  time_side() { # SIDE ROUND: one block of $repeat runs, appended as "SIDE ROUND JSON"
    case "$1" in
      ort) echo "ort $2 $("$root/.venv/bin/python3" "$root/tests/oracle/onnxruntime_oracle.py" run "$onnx" "$inputs" \
             "$tmp/ort.json" --repeat "$repeat" 2>/dev/null | tr -d '\n')" ;;
      whole) echo "whole $2 $("$cleave" run "$onnx" --inputs "$inputs" --repeat "$repeat" --json | tr -d '\n')" ;;
      cut) echo "cut $2 $("$cleave" run "$tmp/cut" --inputs "$inputs" --repeat "$repeat" --baseline "$onnx" --json \
             | tr -d '\n')" ;;
      seams) echo "seams $2 $("$cleave" run "$tmp/cut" --inputs "$inputs" --repeat "$repeat" --no-join \
             --baseline "$onnx" --json | tr -d '\n')" ;;
      nofusion | dense | unpacked | channelslast) # the default against itself without one optimization
        local flag
        case "$1" in
          nofusion) flag=--no-fusion ;;
          dense) flag=--no-blocked-layout ;;
          unpacked) flag=--no-packed-weights ;;
          channelslast) flag=--no-blocked-convolutions ;;
        esac
        echo "$1 $2 $("$cleave" run "$onnx" --inputs "$inputs" --repeat "$repeat" --baseline "$onnx" \
             --baseline-options "$flag" --json | tr -d '\n')" ;;
    esac >>"$tmp/times"
  }
  # Interleaved: every round times each side once, in forward order on even rounds and reverse
  # order on odd ones, so a drift in the machine's speed falls on both sides of each comparison.
  read -r -a forward <<<"$sides_wanted"
  reverse=()
  for ((i = ${#forward[@]} - 1; i >= 0; --i)); do reverse+=("${forward[i]}"); done
  for ((round = 0; round < rounds; ++round)); do
    sides=("${forward[@]}")
    ((round % 2)) && sides=("${reverse[@]}")
    for side in "${sides[@]}"; do time_side "$side" "$round"; done
  done
  "$root/.venv/bin/python3" - "$model" "$tmp/times" <<'PY'
import json, statistics, sys
model, per_round, submodules = sys.argv[1], {}, 0
paired = {}  # side -> round -> median of its runs' ratios to the whole model's, run by run
for line in open(sys.argv[2]):
    side, round_, text = line.split(" ", 2)
    run = json.loads(text)
    median = (run["median_s"] if side == "ort" else run["timing"]["median_s"]) * 1e3
    per_round.setdefault(side, {})[int(round_)] = median
    if "baseline" in run:
        paired.setdefault(side, {})[int(round_)] = run["baseline"]["ratio"]["median"]
    if side == "cut":
        submodules = run["submodules"]
rounds = sorted(per_round["ort"])
med = {side: statistics.median(values.values()) for side, values in per_round.items()}
ratios = [per_round["whole"][r] / per_round["ort"][r] for r in rounds]
ratio = f"{statistics.median(ratios):.2f}x [{min(ratios):.2f},{max(ratios):.2f}]"
def gain(side):
    if side not in paired:
        return "-"
    ratios = [paired[side][r] for r in rounds]
    return f"{statistics.median(ratios):.2f}x [{min(ratios):.2f},{max(ratios):.2f}]"
def overhead(side):
    if side not in paired:
        return "-"
    over = [100 * (paired[side][r] - 1) for r in rounds]
    return f"{statistics.median(over):+.1f}% [{min(over):+.1f},{max(over):+.1f}]"
for side in ("cut", "seams"):
    med.setdefault(side, float("nan"))
print(f"{model:<18} {med['ort']:9.2f} {med['whole']:9.2f} {ratio:>20} {med['cut']:9.2f} {overhead('cut'):>20}"
      f" {med['seams']:9.2f} {overhead('seams'):>20} {submodules:10d} {gain('nofusion'):>18} {gain('dense'):>18}"
      f" {gain('unpacked'):>18} {gain('channelslast'):>18}")
PY
done
