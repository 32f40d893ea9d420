#!/usr/bin/env python3
"""bench/train_modes.py - what training options cost and save (issue 46): `cleave train` of one
model in float32 and in bf16 mixed precision (--precision bf16), with PyTorch eager doing the same
(torch.autocast(\"cpu\", bfloat16)) as the reference, and a 4-stage plan with and without
activation recomputation when the build has it (--recompute).

Model: an MLP of 4 Linear layers (WIDTH -> 4 WIDTH -> WIDTH, twice) with GELU and an MSE loss,
ROWS rows a step, SGD; exported by Debian's PyTorch. Every side runs STEPS steps in its own
process, the sides interleaved per round with the order flipped every round. Per side: the
median step time (each run's first step dropped as warm-up), the process's peak resident memory
(ru_maxrss from wait4), and the ratio to its pair (bf16 / fp32 step time, per round) as median
[min, max] over rounds.

usage: /usr/bin/python3 bench/train_modes.py CLEAVE [--rounds R] [--steps K] [--width W] [--rows N]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import torch

TORCH_SIDE = r'''
import json, sys, time, torch
torch.set_num_threads(int(sys.argv[5]))
model, data, steps, bf16 = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "bf16"
module = torch.load(model)
tensors = torch.load(data)
optimizer = torch.optim.SGD(module.parameters(), lr=0.01)
for step in range(steps):
    start = time.perf_counter()
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = module(tensors["x"], tensors["target"])
    loss.backward()
    optimizer.step()
    print(json.dumps({"step": step + 1, "loss": loss.item(), "seconds": time.perf_counter() - start}), flush=True)
'''


class Mlp(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width),
                                           torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)])

    def forward(self, x, target):
        for layer in self.layers:
            x = torch.nn.functional.gelu(layer(x))
        return ((x - target) ** 2).mean()


def timed(argv):
    """Runs argv; returns (median step seconds after the first, the process's peak RSS in MiB)."""
    proc = subprocess.Popen(list(map(str, argv)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        sys.exit(f"{' '.join(map(str, argv))} failed: {err}")
    seconds = []
    for line in out.splitlines():
        line = line.split("] ", 1)[-1]
        if line.startswith("{"):
            seconds.append(json.loads(line)["seconds"])
    return statistics.median(seconds[1:]), usage.ru_maxrss / 1024.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cleave")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    work = tempfile.mkdtemp(prefix="cleave_train_modes_")
    module = Mlp(args.width)
    x, target = torch.randn(args.rows, args.width), torch.randn(args.rows, args.width)
    model = os.path.join(work, "mlp.onnx")
    torch.onnx.export(module, (x, target), model, input_names=["x", "target"], output_names=["loss"],
                      opset_version=13, do_constant_folding=False)
    np.savez(os.path.join(work, "data.npz"), x=x.numpy(), target=target.numpy())
    torch.save(module, os.path.join(work, "mlp.pt"))
    torch.save({"x": x, "target": target}, os.path.join(work, "data.pt"))
    script = os.path.join(work, "torch_side.py")
    with open(script, "w") as f:
        f.write(TORCH_SIDE)
    common = [args.cleave, "train", model, "--data", os.path.join(work, "data.npz"), "--batch", args.rows,
              "--steps", args.steps, "--optimizer", "sgd", "--lr", 0.01, "--json", "--timing"]
    sides = {
        "torch fp32": [sys.executable, script, os.path.join(work, "mlp.pt"), os.path.join(work, "data.pt"),
                       args.steps, "fp32", args.threads],
        "torch bf16 autocast": [sys.executable, script, os.path.join(work, "mlp.pt"), os.path.join(work, "data.pt"),
                                args.steps, "bf16", args.threads],
        "cleave fp32": common + ["--precision", "fp32"],
        "cleave bf16": common + ["--precision", "bf16"],
    }
    pairs = [("torch bf16 autocast", "torch fp32"), ("cleave bf16", "cleave fp32"), ("cleave fp32", "torch fp32"),
             ("cleave bf16", "torch bf16 autocast")]
    results = {name: [] for name in sides}
    names = list(sides)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    for round_index in range(args.rounds):
        for name in (names if round_index % 2 == 0 else names[::-1]):
            results[name].append(timed(sides[name]))
    print(f"MLP {args.width}->{4 * args.width}->{args.width} x2, {args.rows} rows, SGD, {args.steps} steps, "
          f"{args.rounds} rounds, {args.threads} threads")
    print(f"{'side':22} {'step_ms':>9} {'peak_rss_MiB':>13}")
    for name in names:
        step = statistics.median(r[0] for r in results[name]) * 1e3
        rss = statistics.median(r[1] for r in results[name])
        print(f"{name:22} {step:9.2f} {rss:13.1f}")
    print(f"{'ratio (step time)':42} {'median [min, max]':>20}")
    for a, b in pairs:
        ratios = [ra[0] / rb[0] for ra, rb in zip(results[a], results[b])]
        print(f"{a + ' / ' + b:42} {statistics.median(ratios):6.3f} [{min(ratios):.3f}, {max(ratios):.3f}]")


if __name__ == "__main__":
    main()
