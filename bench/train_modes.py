#!/usr/bin/env python3
"""bench/train_modes.py - what training options cost and save (issue 46): `cleave train` of one
model in float32 and in bf16 mixed precision (--precision bf16), with PyTorch eager doing the same
(torch.autocast("cpu", bfloat16)) as the reference, and a 4-stage plan with and without
activation recomputation (--recompute stage), and a 4-stage plan of attention blocks held, with
selective recomputation (--recompute selective: attention's scores and softmax recomputed) and with
stage recomputation, whose peak step bytes (--timing's rank_peak_step_bytes: ATen's CPU allocator
above the step's start) are printed too, beside the peak `cleave schedule --simulate` predicts for
them from the bytes per stage and microbatch --timing measured (stage_forward_bytes and
stage_backward_bytes of the held run; of the recomputing run, what a forward holds).

Model: an MLP of 4 Linear layers (WIDTH -> 4 WIDTH -> WIDTH, twice) with GELU and an MSE loss,
ROWS rows a step, SGD; exported by PyTorch's TorchScript exporter. Attention: 4 pre-norm blocks (d 64, 4 heads,
sequences of 256, a Tanh MLP 4x wide), 16 sequences a step in 8 microbatches. Every side runs STEPS steps in its own
process, the sides interleaved per round with the order flipped every round. Per side: the
median step time (each run's first step dropped as warm-up), for the plans the peak step bytes,
and the ratio to its pair (bf16 / fp32 step time, per round) as median
[min, max] over rounds.

usage: .venv/bin/python3 bench/train_modes.py CLEAVE [--rounds R] [--steps K] [--width W] [--rows N]
"""
import argparse
import inspect
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
{mlp_source}
state = torch.load(model)
module = Mlp(state["layers.0.weight"].shape[1])
module.load_state_dict(state)
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


class Blocks(torch.nn.Module):
    """4 blocks WIDTH/8 wide at their ends and WIDTH inside: a 4-stage plan cuts at the narrow ends."""

    def __init__(self, width):
        super().__init__()
        narrow = width // 8
        self.blocks = torch.nn.ModuleList([torch.nn.Sequential(
            torch.nn.Linear(narrow, width), torch.nn.Tanh(), torch.nn.Linear(width, width), torch.nn.Tanh(),
            torch.nn.Linear(width, narrow), torch.nn.Tanh()) for _ in range(4)])

    def forward(self, x, target):
        for block in self.blocks:
            x = block(x)
        return ((x - target) ** 2).mean()


class AttentionBlock(torch.nn.Module):
    def __init__(self, d=64, heads=4):
        super().__init__()
        self.heads, self.norm = heads, torch.nn.LayerNorm(d)
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.Tanh(), torch.nn.Linear(4 * d, d))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (t.reshape(b, s, self.heads, -1).transpose(1, 2) for t in self.qkv(self.norm(x)).chunk(3, dim=-1))
        attention = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.out((attention @ v).transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(x)


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.Sequential(*[AttentionBlock() for _ in range(4)])

    def forward(self, x, target):
        return ((self.blocks(x) - target) ** 2).mean()


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
    """Runs argv; returns (median step seconds after the first, the largest rank-0 peak step bytes
    --timing reported, in MiB, or 0, and the last step's JSON line). (Not the process's peak RSS:
    ru_maxrss keeps the forking Python's RSS across exec, so every side would report PyTorch's.)"""
    proc = subprocess.Popen(list(map(str, argv)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    err = proc.stderr.read()
    if proc.wait() != 0:
        sys.exit(f"{' '.join(map(str, argv))} failed: {err}")
    seconds, step_bytes, parsed = [], [0], {}
    for line in out.splitlines():
        line = line.split("] ", 1)[-1]
        if line.startswith("{"):
            parsed = json.loads(line)
            seconds.append(parsed["seconds"])
            step_bytes.append(parsed.get("rank_peak_step_bytes", [0])[0])
    return statistics.median(seconds[1:]), max(step_bytes) / 2**20, parsed


def predicted_peak(cleave, work, held, timing, recompute):
    """The peak step bytes (MiB) cleave schedule --simulate predicts for a plan's run under
    `recompute`, from the bytes per stage --timing measured: held (a run without recomputation)
    gives what a forward holds, a backward adds and gradients take; `timing` (the run itself) what a forward holds
    with stage recomputation, or no longer holds with selective. The schedule: the order it ran."""
    order = os.path.join(work, f"order_{recompute}.csv")
    with open(order, "w") as f:
        f.write(",".join(action["action"] for action in timing["actions"]) + "\n")
    joined = lambda values: ",".join(str(v) for v in values)
    command = [cleave, "schedule", "--from-csv", order, "--stages", len(held["stage_forward_bytes"]),
               "--microbatches", len(timing["actions"]) // (2 * len(held["stage_forward_bytes"])), "--simulate",
               "--json", "--recompute", recompute, "--activation-bytes", joined(held["stage_forward_bytes"]),
               "--backward-bytes", joined(held["stage_backward_bytes"]),
               "--gradient-bytes", joined(held["stage_gradient_bytes"])]
    if recompute == "stage":
        command += ["--input-bytes", joined(timing["stage_forward_bytes"])]
    if recompute == "selective":
        command += ["--dropped-bytes",
                    joined(a - b for a, b in zip(held["stage_forward_bytes"], timing["stage_forward_bytes"]))]
    out = subprocess.run(list(map(str, command)), check=True, capture_output=True, text=True).stdout
    return json.loads(out)["simulation"]["peak_activation_bytes"][0] / 2**20


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
                      opset_version=13, do_constant_folding=False, dynamo=False)
    np.savez(os.path.join(work, "data.npz"), x=x.numpy(), target=target.numpy())
    torch.save(module.state_dict(), os.path.join(work, "mlp.pt"))
    torch.save({"x": x, "target": target}, os.path.join(work, "data.pt"))
    script = os.path.join(work, "torch_side.py")
    with open(script, "w") as f:
        f.write(TORCH_SIDE.replace("{mlp_source}", inspect.getsource(Mlp)))
    blocks = os.path.join(work, "blocks.onnx")
    narrow = torch.randn(args.rows * 4, args.width // 8)
    torch.onnx.export(Blocks(args.width), (narrow, narrow), blocks, input_names=["x", "target"],
                      output_names=["loss"], opset_version=13, do_constant_folding=False, dynamo=False)
    np.savez(os.path.join(work, "blocks.npz"), x=narrow.numpy(), target=torch.randn_like(narrow).numpy())
    plan = os.path.join(work, "blocks_plan")
    subprocess.run([args.cleave, "pipeline", blocks, "--stages", "4", "-o", plan], check=True,
                   stdout=subprocess.DEVNULL)
    staged = [args.cleave, "train", plan, "--data", os.path.join(work, "blocks.npz"), "--batch", args.rows * 4,
              "--microbatches", 16, "--steps", args.steps, "--optimizer", "sgd", "--lr", 0.01, "--json", "--timing"]
    attention = os.path.join(work, "attention.onnx")
    sequences = torch.randn(16, 256, 64)
    torch.onnx.export(Attention(), (sequences, sequences), attention, input_names=["x", "target"],
                      output_names=["loss"], opset_version=13, do_constant_folding=False,
                      dynamic_axes={"x": {0: "n"}, "target": {0: "n"}}, dynamo=False)  # reshapes follow the microbatch
    np.savez(os.path.join(work, "attention.npz"), x=sequences.numpy(), target=torch.randn_like(sequences).numpy())
    attention_plan = os.path.join(work, "attention_plan")
    subprocess.run([args.cleave, "pipeline", attention, "--stages", "4", "-o", attention_plan], check=True,
                   stdout=subprocess.DEVNULL)
    attended = [args.cleave, "train", attention_plan, "--data", os.path.join(work, "attention.npz"), "--batch", 16,
                "--microbatches", 8, "--steps", args.steps, "--optimizer", "sgd", "--lr", 0.01, "--json", "--timing"]
    common = [args.cleave, "train", model, "--data", os.path.join(work, "data.npz"), "--batch", args.rows,
              "--steps", args.steps, "--optimizer", "sgd", "--lr", 0.01, "--json", "--timing"]
    sides = {
        "torch fp32": [sys.executable, script, os.path.join(work, "mlp.pt"), os.path.join(work, "data.pt"),
                       args.steps, "fp32", args.threads],
        "torch bf16 autocast": [sys.executable, script, os.path.join(work, "mlp.pt"), os.path.join(work, "data.pt"),
                                args.steps, "bf16", args.threads],
        "cleave fp32": common + ["--precision", "fp32"],
        "cleave bf16": common + ["--precision", "bf16"],
        "plan, held": staged + ["--recompute", "none"],
        "plan, recomputed": staged + ["--recompute", "stage"],
        "attention, held": attended + ["--recompute", "none"],
        "attention, selective": attended + ["--recompute", "selective"],
        "attention, stage": attended + ["--recompute", "stage"],
    }
    pairs = [("torch bf16 autocast", "torch fp32"), ("cleave bf16", "cleave fp32"), ("cleave fp32", "torch fp32"),
             ("cleave bf16", "torch bf16 autocast"), ("plan, recomputed", "plan, held"),
             ("attention, selective", "attention, held"), ("attention, stage", "attention, held")]
    results = {name: [] for name in sides}
    names = list(sides)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    for round_index in range(args.rounds):
        for name in (names if round_index % 2 == 0 else names[::-1]):
            results[name].append(timed(sides[name]))
    print(f"MLP {args.width}->{4 * args.width}->{args.width} x2, {args.rows} rows, SGD, {args.steps} steps, "
          f"{args.rounds} rounds, {args.threads} threads")
    print(f"plan: 4 blocks ({args.width // 8} -> {args.width} -> {args.width} -> {args.width // 8}) as 4 stages in "
          f"one process (GPipe's order), {args.rows * 4} rows in 16 microbatches")
    print("attention: 4 blocks (d 64, 4 heads, seq 256) as 4 stages in one process, 16 sequences in 8 microbatches")
    print(f"{'side':22} {'step_ms':>9} {'peak_step_MiB':>14} {'simulated_MiB':>14}")
    modes = {"plan, held": ("plan, held", "none"), "plan, recomputed": ("plan, held", "stage"),
             "attention, held": ("attention, held", "none"),
             "attention, selective": ("attention, held", "selective"),
             "attention, stage": ("attention, held", "stage")}  # (the run without recomputation, the mode)
    for name in names:
        step = statistics.median(r[0] for r in results[name]) * 1e3
        step_bytes = statistics.median(r[1] for r in results[name])
        simulated = ""
        if name in modes:  # from the last round's runs
            held, recompute = modes[name]
            simulated = f"{predicted_peak(args.cleave, work, results[held][-1][2], results[name][-1][2], recompute):14.2f}"
        print(f"{name:22} {step:9.2f} {step_bytes:14.2f} {simulated}")
    print(f"{'ratio (step time)':42} {'median [min, max]':>20}")
    for a, b in pairs:
        ratios = [ra[0] / rb[0] for ra, rb in zip(results[a], results[b])]
        print(f"{a + ' / ' + b:42} {statistics.median(ratios):6.3f} [{min(ratios):.3f}, {max(ratios):.3f}]")


if __name__ == "__main__":
    main()
