# bench/zoo_models.sh - sourced by the runtime benchmarks (runtime.sh, memory.sh): sets up and
# builds cleave, exports the full-size zoo models they time (tools/export_zoo.py; MODELS, default
# resnet50 and the BERT-base-sized encoder; also mobilenet_v3_large, vit_b_16, convnext_tiny and
# resnext50_32x4d; kept in CLEAVE_ZOO_DIR between runs) and sets `root`, `zoo` and `models`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup"
"$root/scripts/build" "$root/build/release"
# IMAGE=SIZE: the image models exported at SIZE x SIZE (tools/export_zoo.py --image), in a folder
# of their own.
zoo="${CLEAVE_ZOO_DIR:-${TMPDIR:-/tmp}/cleave_zoo${IMAGE:+_$IMAGE}}"
models="${MODELS:-resnet50 bert_base}"
# shellcheck disable=SC2086 # a list of names
"$root/.venv/bin/python3" "$root/tools/export_zoo.py" "$zoo" $models ${IMAGE:+--image=$IMAGE} >/dev/null
