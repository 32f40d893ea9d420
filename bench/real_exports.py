"""bench/real_exports.py - accelerator splits of real exports, with shape folding and without.

Exports (PyTorch 2.x's TorchScript exporter, random weights, opset 17): swin_t and
vit_b_16 from torchvision at batch 1, and a 12-layer transformer encoder (d 768, 12 heads,
(16, 2, 768) input) with static shapes and with dynamic batch and sequence. Each is split with
examples/profiles/gpu.json by `cleave split --preview --json`, folded (the default) and as read
(--no-simplify), ROUNDS interleaved rounds (order alternating). Printed per model and way: acc and
cpu submodules, CPU nodes, the CPU nodes that are int64 shape arithmetic (Shape, Size, and
integer Gather/Mul/Add/Sub/Div/Concat/Unsqueeze/Cast outputs), folding's rounds, and the median
wall time of the split with the [min, max] of the per-round ratios folded / as read.

usage: .venv/bin/python3 bench/real_exports.py CLEAVE [--rounds R] [--keep DIR] [MODEL ...]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

import onnx
import torch
import torchvision

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPU = os.path.join(ROOT, "examples", "profiles", "gpu.json")
SHAPE_OPS = {"Shape", "Size", "Gather", "Mul", "Add", "Sub", "Div", "Concat", "Unsqueeze", "Cast", "Squeeze"}


def encoder():
    layer = torch.nn.TransformerEncoderLayer(d_model=768, nhead=12, dim_feedforward=3072)
    return torch.nn.TransformerEncoder(layer, num_layers=12)


MODELS = {
    "swin_t": (lambda: torchvision.models.swin_t(), (1, 3, 224, 224), None),
    "vit_b_16": (lambda: torchvision.models.vit_b_16(), (1, 3, 224, 224), None),
    "encoder12_static": (encoder, (16, 2, 768), None),
    "encoder12_dynamic": (encoder, (16, 2, 768), {"x": {0: "seq", 1: "batch"}, "y": {0: "seq", 1: "batch"}}),
}


def export(name, folder):
    make, shape, axes = MODELS[name]
    path = os.path.join(folder, name + ".onnx")
    if not os.path.exists(path):
        torch.manual_seed(0)
        torch.onnx.export(make().eval(), (torch.randn(*shape),), path, input_names=["x"], output_names=["y"],
                          opset_version=17, dynamic_axes=axes, dynamo=False)
    return path


def split(cleave, model, folded):
    args = [cleave, "split", model, "--profile", GPU, "--preview", "--json"] + ([] if folded else ["--no-simplify"])
    start = time.perf_counter()
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - start, json.loads(out)


def int64_nodes(model):
    """Names of the model's nodes whose first output is int64 (shape arithmetic), by onnx's inference."""
    inferred = onnx.shape_inference.infer_shapes(onnx.load(model, load_external_data=False))
    types = {v.name: v.type.tensor_type.elem_type for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    return {n.name for n in inferred.graph.node if n.output and types.get(n.output[0]) == onnx.TensorProto.INT64}


def shape_nodes(report, int64):
    return sum(1 for node in report["cpu_nodes"] if node["node"] in int64)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cleave")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", help="export into (and reuse) this folder")
    parser.add_argument("models", nargs="*", default=list(MODELS))
    args = parser.parse_intermixed_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or scratch
        os.makedirs(folder, exist_ok=True)
        print("| model | way | acc | cpu | CPU nodes | of them shape arithmetic | rounds | split s (median) | folded / as read [min, max] |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for name in args.models:
            model = export(name, folder)
            int64 = int64_nodes(model)
            times = {True: [], False: []}
            reports = {}
            ratios = []
            for r in range(args.rounds):
                order = (True, False) if r % 2 == 0 else (False, True)
                seconds = {}
                for folded in order:
                    seconds[folded], reports[folded] = split(args.cleave, model, folded)
                    times[folded].append(seconds[folded])
                ratios.append(seconds[True] / seconds[False])
            for folded in (False, True):
                report = reports[folded]
                rounds = report.get("simplify", {}).get("rounds", "-") if folded else "-"
                ratio = f"{statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]" if folded else ""
                print(f"| {name} | {'folded' if folded else 'as read'} | {report['acc_subgraphs']} | "
                      f"{report['cpu_subgraphs']} | {len(report['cpu_nodes'])} | {shape_nodes(report, int64)} | {rounds} | "
                      f"{statistics.median(times[folded]):.2f} | {ratio} |")


if __name__ == "__main__":
    main()
