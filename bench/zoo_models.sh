# bench/zoo_models.sh - sourced by the runtime benchmarks (runtime.sh, memory.sh): sets up and
# builds cleave, exports the full-size zoo models they time (tools/export_zoo.py: resnet50 and
# the BERT-base-sized encoder; kept in CLEAVE_ZOO_DIR between runs) and sets `root` and `zoo`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup"
"$root/scripts/build" "$root/build/release"
zoo="${CLEAVE_ZOO_DIR:-${TMPDIR:-/tmp}/cleave_zoo}"
/usr/bin/python3 "$root/tools/export_zoo.py" "$zoo" resnet50 bert_base >/dev/null
