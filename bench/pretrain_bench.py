"""bench/pretrain_bench.py - a pretraining step of cleave in one process against the torch loop it
replaces (issue 71, part 3): examples/gpt.py's decoder, exported by torch's default exporter,
trained with AdamW and gradient clipping on windows of a byte-token stream (the standard library's
sources, as examples/pretrain_gpt.py makes it).

Per round, both sides run as separate processes on the same windows, the order flipped every round:
  cleave   `cleave train gpt.onnx --data train.bin --tokens uint16 ... --log`: each step's time is
           --batch over the log's rows_per_s (the step's own wall time)
  torch    the same model and initialization, torch.optim.AdamW and clip_grad_norm_, the windows the
           cleave run's log names, each step timed with time.perf_counter
Both use the machine's cores as intra-op threads (ATen's default; torch.set_num_threads likewise).
Per side the median step time of a round, its first --warmup steps dropped; the ratio cleave / torch
per round, its median and [min, max] over rounds.

usage: .venv/bin/python3 bench/pretrain_bench.py CLEAVE [--rounds R] [--steps K] [--width W] [--layers L]
       [--seq T] [--batch B]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
from gpt import GPT, GPTConfig, export, windows  # noqa: E402
from pretrain_gpt import byte_tokens  # noqa: E402

LR, CLIP = 1e-3, 1.0


def config(args):
    return GPTConfig(vocab=256, width=args.width, heads=args.heads, layers=args.layers, seq=args.seq)


def torch_steps(args, ids, log_path):
    """Runs in its own process (--torch-side): one line per step, its seconds."""
    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)
    module = GPT(config(args)).train()
    optimizer = torch.optim.AdamW(module.parameters(), lr=LR)
    with open(log_path) as f:
        starts = [json.loads(line)["window_starts"] for line in f]
    seconds = []
    for row_starts in starts:
        tokens, targets = windows(ids, row_starts, args.seq)
        began = time.perf_counter()
        optimizer.zero_grad()
        module(tokens, targets).backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), CLIP)
        optimizer.step()
        seconds.append(time.perf_counter() - began)
    return seconds


def cleave_steps(args, model, data, log_path):
    subprocess.run([args.cleave, "train", model, "--data", data, "--tokens", "uint16", "--batch", str(args.batch),
                    "--steps", str(args.steps), "--optimizer", "adamw", "--lr", str(LR), "--clip-grad-norm",
                    str(CLIP), "--log", log_path], check=True, stdout=subprocess.DEVNULL)
    with open(log_path) as f:
        return [args.batch / json.loads(line)["rows_per_s"] for line in f]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cleave")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--torch-side", nargs=2, metavar=("TOKENS", "LOG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_side:
        print(json.dumps(torch_steps(args, np.fromfile(args.torch_side[0], dtype=np.uint16), args.torch_side[1])))
        return

    work = tempfile.mkdtemp(prefix="cleave_pretrain_bench_")
    data, model = os.path.join(work, "train.bin"), os.path.join(work, "gpt.onnx")
    byte_tokens(4).tofile(data)
    torch.manual_seed(0)
    export(GPT(config(args)).train(), model)
    parameters = sum(p.numel() for p in GPT(config(args)).parameters())
    print(f"GPT {parameters / 1e6:.2f} M parameters, {args.layers} layers of width {args.width}, {args.batch} x "
          f"{args.seq} tokens a step, AdamW, {os.cpu_count()} threads; {args.rounds} rounds of {args.steps} steps "
          f"(first {args.warmup} dropped)")
    windows_log = os.path.join(work, "windows.jsonl")  # the windows every run reads (a warm-up run)
    cleave_steps(args, model, data, windows_log)
    medians = {"cleave": [], "torch": []}
    for round_index in range(args.rounds):
        log = os.path.join(work, f"log{round_index}.jsonl")
        order = ["cleave", "torch"] if round_index % 2 == 0 else ["torch", "cleave"]
        for side in order:
            if side == "cleave":
                seconds = cleave_steps(args, model, data, log)
            else:
                out = subprocess.run([sys.executable, __file__, args.cleave, "--torch-side", data, windows_log,
                                      *sum(([f"--{k}", str(getattr(args, k))] for k in
                                            ("width", "heads", "layers", "seq", "batch")), [])],
                                     check=True, capture_output=True, text=True).stdout
                seconds = json.loads(out)
            medians[side].append(statistics.median(seconds[args.warmup:]))
        print(f"round {round_index + 1}: cleave {medians['cleave'][-1] * 1e3:.1f} ms, torch "
              f"{medians['torch'][-1] * 1e3:.1f} ms", flush=True)
    ratios = [c / t for c, t in zip(medians["cleave"], medians["torch"])]
    print(f"| side | median step | |\n| --- | --- | --- |")
    print(f"| torch | {statistics.median(medians['torch']) * 1e3:.1f} ms | |")
    print(f"| cleave | {statistics.median(medians['cleave']) * 1e3:.1f} ms | "
          f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}, {max(ratios):.2f}] |")


if __name__ == "__main__":
    main()
