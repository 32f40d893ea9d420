# bench/zoo_models.sh - sourced by the runtime benchmarks (runtime.sh, memory.sh): sets up and
# builds cleave, exports the full-size zoo models they time (tools/export_zoo.py; MODELS, default
# resnet50 and the BERT-base-sized encoder; also mobilenet_v3_large and vit_b_16; kept in
# CLEAVE_ZOO_DIR between runs) and sets `root`, `zoo` and `models`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup"
"$root/scripts/build" "$root/build/release"
zoo="${CLEAVE_ZOO_DIR:-${TMPDIR:-/tmp}/cleave_zoo}"
models="${MODELS:-resnet50 bert_base}"
# shellcheck disable=SC2086 # a list of names
"$root/.venv/bin/python3" "$root/tools/export_zoo.py" "$zoo" $models >/dev/null
