"""cleave against ONNX Runtime on a LLaMA-style decoder written at opset 24 with the ops opset 23
added: RMSNormalization, RotaryEmbedding, Attention (grouped-query, causal) and Swish, each a
cleave kernel (before session 46, Attention ran as its ONNX function body). ONNX Runtime runs all
of them as its own kernels. Random weights; batch 1, sequence 64, width 256, 8 query and 2
key/value heads (--batch: more sequences of 64).

usage: bench/new_opsets.py CLEAVE [--layers N] [--batch B] [--rounds R] [--repeat K]

Per round, both sides time one block of K runs each (median), in alternating order; printed: each
side's median over the rounds and cleave / ORT per round with its [min, max]; the largest
difference of the outputs relative to their largest magnitude.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORACLE = [sys.executable, os.path.join(ROOT, "tests", "oracle", "onnxruntime_oracle.py"), "run"]
SEQ, HEADS, KV_HEADS, HEAD = 64, 8, 2, 32
WIDTH = HEADS * HEAD


def decoder(layers, batch):
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def weight(name, shape):
        data = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        inits.append(helper.make_tensor(name, TensorProto.FLOAT, shape, data.ravel()))

    angles = np.outer(np.arange(SEQ), 1.0 / 10000 ** (np.arange(HEAD // 2) * 2 / HEAD)).astype(np.float32)
    inits += [helper.make_tensor("cos", TensorProto.FLOAT, [SEQ, HEAD // 2], np.cos(angles).ravel()),
              helper.make_tensor("sin", TensorProto.FLOAT, [SEQ, HEAD // 2], np.sin(angles).ravel()),
              helper.make_tensor("ids", TensorProto.INT64, [batch, SEQ], np.tile(np.arange(SEQ), batch))]
    x = "x"
    for layer in range(layers):
        p = f"layer{layer}."
        shapes = {"norm1": [WIDTH], "norm2": [WIDTH], "wq": [WIDTH, WIDTH], "wk": [WIDTH, KV_HEADS * HEAD],
                  "wv": [WIDTH, KV_HEADS * HEAD], "wo": [WIDTH, WIDTH], "gate": [WIDTH, 2 * WIDTH],
                  "up": [WIDTH, 2 * WIDTH], "down": [2 * WIDTH, WIDTH]}
        for name, shape in shapes.items():
            weight(p + name, shape)
        n = lambda op, ins, out, **attrs: nodes.append(helper.make_node(op, ins, [p + out], **attrs))  # noqa: E731
        n("RMSNormalization", [x, p + "norm1"], "h")
        n("MatMul", [p + "h", p + "wq"], "q0")
        n("MatMul", [p + "h", p + "wk"], "k0")
        n("MatMul", [p + "h", p + "wv"], "v")
        n("RotaryEmbedding", [p + "q0", "cos", "sin", "ids"], "q", num_heads=HEADS)
        n("RotaryEmbedding", [p + "k0", "cos", "sin", "ids"], "k", num_heads=KV_HEADS)
        n("Attention", [p + "q", p + "k", p + "v"], "a", q_num_heads=HEADS, kv_num_heads=KV_HEADS, is_causal=1)
        n("MatMul", [p + "a", p + "wo"], "o")
        n("Add", [x, p + "o"], "r")
        n("RMSNormalization", [p + "r", p + "norm2"], "h2")
        n("MatMul", [p + "h2", p + "gate"], "g")
        n("MatMul", [p + "h2", p + "up"], "u")
        n("Swish", [p + "g"], "sg")
        n("Mul", [p + "sg", p + "u"], "m")
        n("MatMul", [p + "m", p + "down"], "d")
        n("Add", [p + "r", p + "d"], "y")
        x = p + "y"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    graph = helper.make_graph(nodes, "decoder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, SEQ, WIDTH])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, SEQ, WIDTH])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)], ir_version=10)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cleave")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "decoder.onnx")
        onnx.save(decoder(args.layers, args.batch), model)
        x = np.random.default_rng(1).standard_normal((args.batch, SEQ, WIDTH)).astype(np.float32)
        inputs = os.path.join(tmp, "inputs.json")
        with open(inputs, "w") as f:
            json.dump({"x": {"dtype": "float32", "dims": list(x.shape), "data": x.ravel().tolist()}}, f)
        times = {"ort": [], "cleave": []}
        for round_ in range(args.rounds):
            for side in (("ort", "cleave") if round_ % 2 == 0 else ("cleave", "ort")):
                if side == "ort":
                    out = subprocess.run([*ORACLE, model, inputs, os.path.join(tmp, "ort.json"), "--repeat", str(args.repeat)],
                                         capture_output=True, text=True, check=True).stdout
                    times["ort"].append(json.loads(out.strip().splitlines()[-1])["median_s"])
                else:
                    out = subprocess.run([args.cleave, "run", model, "--inputs", inputs, "--repeat", str(args.repeat),
                                          "--json", "--save-outputs", os.path.join(tmp, "cleave.json")],
                                         capture_output=True, text=True, check=True).stdout
                    times["cleave"].append(json.loads(out)["timing"]["median_s"])
        ratios = [c / o for c, o in zip(times["cleave"], times["ort"])]
        with open(os.path.join(tmp, "ort.json")) as f:
            want = np.array(json.load(f)["y"]["data"])
        with open(os.path.join(tmp, "cleave.json")) as f:
            got = np.array(json.load(f)["y"]["data"])
        error = float(np.abs(want - got).max() / np.abs(want).max())
        print(f"layers {args.layers}, batch {args.batch}: ORT {np.median(times['ort']) * 1e3:.2f} ms, cleave {np.median(times['cleave']) * 1e3:.2f} ms, "
              f"cleave/ORT {np.median(ratios):.2f}x [{min(ratios):.2f}, {max(ratios):.2f}] over {args.rounds} rounds; "
              f"largest difference {error:.1e} of the output's scale")


if __name__ == "__main__":
    main()
