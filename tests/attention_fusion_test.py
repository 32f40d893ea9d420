"""Attention as PyTorch's two ONNX exporters spell it runs fused (runtime/engine/fusion.h, the
Attention group): nn.MultiheadAttention, scaled_dot_product_attention causal and with boolean
and additive masks, a BERT-style block with its padding mask, and the zoo's GPT-2- and
LLaMA-style decoders (tools/export_zoo.py), each exported with the TorchScript exporter (opset 17)
and torch 2.x's default (dynamo) exporter. For every export: `cleave run --profile` shows the
fused group and no Softmax left alone, its outputs equal ONNX Runtime's within 1e-4 of the
largest, `--no-fused-attention` computes the same within 1e-5, and with host and device memory
apart (aten-cpu-as-gpu) a second run copies nothing between them."""
import json
import math
import os
import subprocess
import sys
import warnings

import torch
from torch import nn

from testlib import ORACLE, SOURCE_DIR, TempDirTest, main, run

sys.path.insert(0, os.path.join(SOURCE_DIR, "tools"))
from export_zoo import Gpt2, LlamaDecoder, randomize  # noqa: E402

GROUP = "Attention(MatMul,Softmax,MatMul)"


class MultiheadSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, x):
        return self.attention(x, x, x, need_weights=False)[0]


def heads(x, count=4):
    rows, steps, dim = x.shape
    return x.view(rows, steps, count, dim // count).transpose(1, 2)


class ScaledDotProduct(nn.Module):
    """F.scaled_dot_product_attention over Q, K, V made from x, with `mask` ("causal", "bool",
    "additive" or None)."""

    def __init__(self, mask):
        super().__init__()
        self.mask = mask
        self.qkv = nn.Linear(32, 96)

    def forward(self, x, mask):
        q, k, v = (heads(t) for t in self.qkv(x).chunk(3, dim=-1))
        if self.mask == "causal":
            y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.mask == "bool":
            y = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask > 0)
        else:
            y = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return y.transpose(1, 2).reshape(x.shape)


class BertStyleAttention(nn.Module):
    """BERT's eager attention: Q K^T / sqrt(d) plus (1 - padding mask) * -10000, softmax, V."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 32)

    def forward(self, x, padding):
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(8)
        scores = scores + (1.0 - padding[:, None, None, :]) * -10000.0
        return torch.matmul(torch.softmax(scores, dim=-1), v).transpose(1, 2).reshape(x.shape)


def token_inputs(vocab, steps):
    return lambda: {"ids": torch.randint(0, vocab, (2, steps), generator=torch.Generator().manual_seed(3))}


def hidden_inputs(with_mask):
    def make():
        g = torch.Generator().manual_seed(5)
        inputs = {"x": torch.randn(2, 7, 32, generator=g)}
        if with_mask == "padding":
            inputs["padding"] = torch.tensor([[1.0] * 7, [1.0] * 5 + [0.0] * 2])
        elif with_mask:
            inputs["mask"] = torch.randn(2, 1, 7, 7, generator=g)
        return inputs
    return make


# name: (the module, its inputs)
MODELS = {
    "multihead": (MultiheadSelfAttention, hidden_inputs(None)),
    "sdpa_causal": (lambda: ScaledDotProduct("causal"), hidden_inputs("mask")),
    "sdpa_bool": (lambda: ScaledDotProduct("bool"), hidden_inputs("mask")),
    "sdpa_additive": (lambda: ScaledDotProduct("additive"), hidden_inputs("mask")),
    "bert": (BertStyleAttention, hidden_inputs("padding")),
    "gpt2": (lambda: Gpt2(vocab=200, context=16, dim=32, heads=4, layers=2), token_inputs(200, 12)),
    "llama": (lambda: LlamaDecoder(vocab=200, dim=32, heads=4, layers=2, hidden=64), token_inputs(200, 12)),
}


def export(module, inputs, path, dynamo):
    names = list(inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            torch.onnx.export(module, tuple(inputs.values()), path, input_names=names, dynamo=True, verbose=False)
        else:
            torch.onnx.export(module, tuple(inputs.values()), path, input_names=names, opset_version=17,
                              dynamo=False)


def exported(make, make_inputs, directory, name, dynamo):
    """(module, its inputs, model path, inputs path): `make()` with random weights (seed 0), in eval
    mode, exported to DIRECTORY/NAME_DYNAMO.onnx and its inputs written beside it."""
    torch.manual_seed(0)
    module = randomize(make()).eval()
    inputs = make_inputs()
    model = os.path.join(directory, f"{name}_{dynamo}.onnx")
    feeds = os.path.join(directory, f"{name}.inputs.json")
    export(module, inputs, model, dynamo)
    write_inputs(inputs, feeds)
    return module, inputs, model, feeds


def write_inputs(inputs, path):
    with open(path, "w") as f:
        json.dump({name: {"dtype": str(t.dtype).replace("torch.", ""), "dims": list(t.shape),
                          "data": t.flatten().tolist()} for name, t in inputs.items()}, f)


def largest_error(want, got):
    scale = max((abs(v) for v in want), default=0.0)
    return max((abs(a - b) for a, b in zip(want, got)), default=0.0) / (scale or 1.0)


class AttentionFusion(TempDirTest):
    def run_profiled(self, model, inputs, *flags):
        code, stdout, err = run("run", model, "--inputs", inputs, "--profile", "--json", *flags)
        self.assertEqual(code, 0, err)
        return json.loads(stdout)

    def test_every_exporters_attention_runs_fused_and_equals_onnx_runtime(self):
        for name, (make, make_inputs) in MODELS.items():
            for dynamo in (False, True):
                with self.subTest(model=name, exporter="dynamo" if dynamo else "torchscript"):
                    _, _, model, feeds = exported(make, make_inputs, self.tmp, name, dynamo)
                    profiled = self.run_profiled(model, feeds, "--save-outputs", self.path("fused.json"))
                    ops = {entry["op"] for entry in profiled["profile"]}
                    self.assertIn(GROUP, ops)
                    self.assertNotIn("Softmax", ops)
                    self.run_profiled(model, feeds, "--no-fused-attention", "--save-outputs", self.path("nodes.json"))
                    # Host and device memory apart (as on a GPU): the second run copies nothing, so a
                    # CUDA-graph recording meets no crossing.
                    apart = self.run_profiled(model, feeds, "--backend", "aten-cpu-as-gpu", "--repeat", "2")
                    self.assertEqual(apart["host_device_copies_by_value"], {})
                    proc = subprocess.run([*ORACLE, "run", model, feeds, self.path("ort.json")], capture_output=True,
                                          text=True, timeout=300)
                    self.assertEqual(proc.returncode, 0, proc.stderr)
                    fused, nodes, ort = (json.load(open(self.path(f"{side}.json"))) for side in ("fused", "nodes", "ort"))
                    for output, want in ort.items():
                        self.assertEqual(fused[output]["dims"], want["dims"])
                        self.assertLessEqual(largest_error(want["data"], fused[output]["data"]), 1e-4, output)
                        self.assertLessEqual(largest_error(nodes[output]["data"], fused[output]["data"]), 1e-5, output)


if __name__ == "__main__":
    main()
