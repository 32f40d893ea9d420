#!/usr/bin/env bash
# bench/memory.sh - peak memory of cleave's executor against ONNX Runtime on the same models and
# inputs (issue 16: "peak memory within 1.2x of ORT's").
#
# Models as bench/runtime.sh (tools/export_zoo.py: resnet50, the BERT-base-sized encoder). Each
# side runs the model REPEAT times in a fresh process: ORT (PyPI onnxruntime through
# tests/oracle/onnxruntime_oracle.py, all graph optimizations) and `cleave run`. Measured: the process's
# peak resident set (getrusage's ru_maxrss, from os.wait4), and the same for a one-op model (a
# Relu on [1, 1]) so each runtime's own libraries can be subtracted: "model" = peak - baseline.
# Rounds (ROUNDS, default 3) alternate the order; printed are the medians over rounds and the
# ratio cleave / ORT of both, with cleave's own peak of live activations and of all ATen tensor
# memory in its last run (parameters included; `--profile`'s peak_tensor_bytes), and the weight
# copies it holds for oneDNN beside them (packed and reordered; onednn_weight_bytes).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/zoo_models.sh" # root, zoo
"$root/.venv/bin/python3" - "$root" "$zoo" "${ROUNDS:-3}" "${REPEAT:-3}" "$models" <<'PY'
import json, os, statistics, subprocess, sys, tempfile
import onnx
from onnx import TensorProto, helper

root, zoo, rounds, repeat, models = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5].split()
cleave = os.path.join(root, "build/release/cleave")
runner = [sys.executable, os.path.join(root, "tests/oracle/onnxruntime_oracle.py"), "run"]
tmp = tempfile.mkdtemp(prefix="cleave_memory_")

# The one-op baseline model and its input.
tiny = os.path.join(tmp, "tiny.onnx")
onnx.save(helper.make_model(helper.make_graph(
    [helper.make_node("Relu", ["x"], ["y"])], "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])]), opset_imports=[helper.make_opsetid("", 13)]), tiny)
with open(os.path.join(tmp, "tiny.inputs.json"), "w") as f:
    json.dump({"x": {"dtype": "float32", "dims": [1, 1], "data": [1.0]}}, f)


def peak_kib(cmd):
    """The command's peak resident set in KiB (its own process; ru_maxrss of wait4)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise RuntimeError(f"{cmd[0]} failed ({status})")
    return usage.ru_maxrss, out


def side(name, onnx_path, inputs):
    if name == "ort":
        return peak_kib([*runner, onnx_path, inputs, os.path.join(tmp, "ort.json"), "--repeat", repeat])[0]
    return peak_kib([cleave, "run", onnx_path, "--inputs", inputs, "--repeat", repeat])[0]


base = {s: statistics.median(side(s, tiny, os.path.join(tmp, "tiny.inputs.json")) for _ in range(rounds))
        for s in ("ort", "cleave")}
print(f"baseline (a one-op model): ORT {base['ort'] / 1024:.0f} MiB, cleave {base['cleave'] / 1024:.0f} MiB")
print(f"{'model':18s} {'ort_MiB':>8s} {'cleave_MiB':>10s} {'ratio':>6s} {'ort-base':>9s} {'cleave-base':>11s} "
      f"{'ratio':>6s} {'cleave_activations_MiB':>22s} {'cleave_tensors_MiB':>18s} {'cleave_onednn_weights_MiB':>25s}")
for model in models:
    onnx_path, inputs = os.path.join(zoo, model + ".onnx"), os.path.join(zoo, model + ".inputs.json")
    peaks = {"ort": [], "cleave": []}
    for r in range(rounds):
        for s in (("ort", "cleave") if r % 2 == 0 else ("cleave", "ort")):
            peaks[s].append(side(s, onnx_path, inputs))
    ort, ours = statistics.median(peaks["ort"]), statistics.median(peaks["cleave"])
    profile = json.loads(subprocess.run([cleave, "run", onnx_path, "--inputs", inputs, "--profile", "--json"],
                                        capture_output=True, text=True, check=True).stdout)
    activations, tensors = profile["peak_activation_bytes"], profile["peak_tensor_bytes"]
    onednn_weights = profile["onednn_weight_bytes"]
    print(f"{model:18s} {ort / 1024:8.0f} {ours / 1024:10.0f} {ours / ort:6.2f} {(ort - base['ort']) / 1024:9.0f} "
          f"{(ours - base['cleave']) / 1024:11.0f} {(ours - base['cleave']) / (ort - base['ort']):6.2f} "
          f"{activations / 2**20:22.1f} {tensors / 2**20:18.1f} {onednn_weights / 2**20:25.1f}")
PY
