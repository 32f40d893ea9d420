"""Fused attention (runtime/engine/fusion.h, the Attention group) against the same model run with
--no-fused-attention, on the zoo's transformers at full size, interleaved in one run.

    .venv/bin/python3 bench/attention.py CLEAVE [--models NAME ...] [--rounds N] [--repeat N] [--dir DIR]

For each model (tools/export_zoo.py, exported into DIR once): ROUNDS rounds, each running
`cleave run --repeat REPEAT --json` once fused and once not (the order alternating), the ratio of
their median run times per round; then one `--profile` run each way, to show the attention's own
kernel time (the group's, against the batched MatMuls and Softmaxes it replaces). Prints one line
per model: the median ratio with its range, and the kernel times.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

SOURCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
GROUP = "Attention(MatMul,Softmax,MatMul)"


def cleave_run(cleave, model, inputs, flags):
    args = [cleave, "run", model, "--inputs", inputs, "--json", *flags]
    return json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)


def attention_kernel_seconds(report):
    """The group's kernel time, or the nodes' it replaces: batched MatMuls (no weight: named
    MatMul in the profile) and Softmax."""
    ops = {entry["op"]: entry["seconds"] for entry in report["profile"]}
    if GROUP in ops:
        return ops[GROUP]
    return ops.get("MatMul", 0.0) + ops.get("Softmax", 0.0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cleave")
    parser.add_argument("--models", nargs="+", default=["vit_b_16", "bert_base", "gpt2", "transformer_encoder"])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--repeat", type=int, default=8)
    parser.add_argument("--dir", default="/tmp/cleave_attention_zoo")
    args = parser.parse_args()
    missing = [m for m in args.models if not os.path.exists(os.path.join(args.dir, f"{m}.onnx"))]
    if missing:
        subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "tools", "export_zoo.py"), args.dir, *missing],
                       check=True)
    for name in args.models:
        model, inputs = (os.path.join(args.dir, f"{name}{suffix}") for suffix in (".onnx", ".inputs.json"))
        ratios = []
        for r in range(args.rounds):
            seconds = {}
            for fused in ([True, False] if r % 2 == 0 else [False, True]):
                flags = ["--repeat", str(args.repeat)] + ([] if fused else ["--no-fused-attention"])
                seconds[fused] = cleave_run(args.cleave, model, inputs, flags)["timing"]["median_s"]
            ratios.append(seconds[True] / seconds[False])
        kernel = {fused: attention_kernel_seconds(cleave_run(args.cleave, model, inputs,
                                                             ["--repeat", "3", "--profile"] +
                                                             ([] if fused else ["--no-fused-attention"])))
                  for fused in (True, False)}
        print(f"{name}: fused {statistics.median(ratios):.3f}x [{min(ratios):.3f}, {max(ratios):.3f}] the time "
              f"unfused ({args.rounds} rounds); attention kernels {kernel[True] * 1e3:.2f} ms fused, "
              f"{kernel[False] * 1e3:.2f} ms as nodes (last run)", flush=True)


if __name__ == "__main__":
    main()
