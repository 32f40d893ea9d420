"""bench/real_exports.py - accelerator splits of real exports, with shape folding and without.

Exports (PyTorch 2.x's TorchScript exporter, random weights, opset 17): swin_t, vit_b_16 and
maxvit_t from torchvision at batch 1, a 12-layer transformer encoder (d 768, 12 heads,
(16, 2, 768) input) with static shapes and with dynamic batch and sequence, and a 4-layer
GPT-style decoder (token ids (2, 64)) with static shapes and with a dynamic batch. Each is split with
examples/profiles/gpu.json by `cleave split --preview --json`, folded (the default) and as read
(--no-simplify), ROUNDS interleaved rounds (order alternating). Printed per model and way: acc and
cpu submodules, CPU nodes, the CPU nodes that are int64 shape arithmetic (Shape, Size, and
integer Gather/Mul/Add/Sub/Div/Concat/Unsqueeze/Cast outputs), folding's rounds, and the median
wall time of the split with the [min, max] of the per-round ratios folded / as read. A third row
per model splits ONNX Runtime's basic optimization of the export (constant folding and redundant
node elimination, written by ORT) as read: the folding to match (issue 60).

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


class GptDecoder(torch.nn.Module):
    """A GPT-style decoder: token and position embeddings, pre-norm blocks of causal attention
    (the mask made in forward from the sequence length) and a GELU MLP, a tied head."""

    def __init__(self, vocab=1000, d=256, heads=8, layers=4, context=128):
        super().__init__()
        self.heads = heads
        self.embed, self.position = torch.nn.Embedding(vocab, d), torch.nn.Embedding(context, d)
        self.blocks = torch.nn.ModuleList(torch.nn.ModuleDict({
            "norm1": torch.nn.LayerNorm(d), "qkv": torch.nn.Linear(d, 3 * d), "proj": torch.nn.Linear(d, d),
            "norm2": torch.nn.LayerNorm(d), "up": torch.nn.Linear(d, 4 * d), "down": torch.nn.Linear(4 * d, d)})
            for _ in range(layers))
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, ids):
        b, s = ids.shape
        h = self.embed(ids) + self.position(torch.arange(s, device=ids.device))
        mask = torch.triu(torch.full((s, s), float("-inf")), diagonal=1)
        for block in self.blocks:
            q, k, v = block["qkv"](block["norm1"](h)).view(b, s, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            scores = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5) + mask
            attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, -1)
            h = h + block["proj"](attended)
            h = h + block["down"](torch.nn.functional.gelu(block["up"](block["norm2"](h))))
        return self.norm(h) @ self.embed.weight.t()


MODELS = {
    "swin_t": (lambda: torchvision.models.swin_t(), (1, 3, 224, 224), None),
    "vit_b_16": (lambda: torchvision.models.vit_b_16(), (1, 3, 224, 224), None),
    "encoder12_static": (encoder, (16, 2, 768), None),
    "encoder12_dynamic": (encoder, (16, 2, 768), {"x": {0: "seq", 1: "batch"}, "y": {0: "seq", 1: "batch"}}),
    "maxvit_t": (lambda: torchvision.models.maxvit_t(), (1, 3, 224, 224), None),
    "gpt_static": (GptDecoder, (2, 64), None),
    "gpt_dynamic": (GptDecoder, (2, 64), {"x": {0: "batch"}, "y": {0: "batch"}}),
}


def export(name, folder):
    make, shape, axes = MODELS[name]
    path = os.path.join(folder, name + ".onnx")
    if not os.path.exists(path):
        torch.manual_seed(0)
        example = torch.randint(0, 1000, shape) if make is GptDecoder else torch.randn(*shape)
        torch.onnx.export(make().eval(), (example,), path, input_names=["x"], output_names=["y"],
                          opset_version=17, dynamic_axes=axes, dynamo=False)
    return path


def split(cleave, model, folded):
    args = [cleave, "split", model, "--profile", GPU, "--preview", "--json"] + ([] if folded else ["--no-simplify"])
    start = time.perf_counter()
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - start, json.loads(out)


def ort_basic(model):
    """The model after ONNX Runtime's basic graph optimizations (constant folding, redundant node
    elimination), as ORT writes it; beside the model."""
    import onnxruntime
    out = model[:-len(".onnx")] + ".ort_basic.onnx"
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = out
    onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return out


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
            ort = ort_basic(model)
            _, report = split(args.cleave, ort, False)
            print(f"| {name} | ONNX Runtime's basic folding, as read | {report['acc_subgraphs']} | "
                  f"{report['cpu_subgraphs']} | {len(report['cpu_nodes'])} | {shape_nodes(report, int64_nodes(ort))} | - | - | |")


if __name__ == "__main__":
    main()
