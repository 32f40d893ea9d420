"""What sequence lengths that change cost a pipeline step (issue 75): cleave's pipeline training on
windows of lengths that change every step or every microbatch (--seq-lens) against the same plan
on fixed windows of their mean length (the same tokens a step) and on fixed windows of the longest
(what padding every row to it costs), on CPU ranks over Gloo.

The model is tests/variable_shapes_test.py's decoder, made larger here (--width, --layers,
--longest). Four sides run interleaved in rounds, the order rotating every round: fixed
(--seq-len MEAN), padded (--seq-len LONGEST of the list), per step and per microbatch (--seq-lens
LIST); a side's time is the mean of its steps' seconds after the first two (`train --json
--timing`; keep --steps - 2 a multiple of the list's length, so that each length counts alike).
Printed: each side's mean per round, the ratio of each varying side to fixed and to padded with its
[min, max] over the rounds, and the receive-buffer peaks.

  .venv/bin/python3 bench/variable_shapes.py [--schedule 1f1b] [--ranks 2] [--rounds 3] [--steps 24]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CLEAVE = os.path.join(ROOT, "build", "release", "cleave")
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.argv, argv = [sys.argv[0], CLEAVE], sys.argv  # testlib reads sys.argv[1] as the binary
import numpy as np  # noqa: E402
import variable_shapes_test as shapes  # noqa: E402
from testlib import free_port  # noqa: E402
sys.argv = argv


def train(plan, data, args, flags):
    """Per-step seconds (after the first two) and the last step's receive-buffer peaks."""
    proc = subprocess.run([CLEAVE, "launch", "--nproc", str(args.ranks), "--master-port", str(free_port()), "--",
                           "cleave", "train", plan, "--data", data, "--tokens", "uint16", "--batch", str(args.batch),
                           "--microbatches", str(args.microbatches), "--steps", str(args.steps), "--schedule",
                           args.schedule, "--json", "--timing", *flags], capture_output=True, text=True, check=True)
    steps = [json.loads(line.split("] ", 1)[-1]) for line in proc.stdout.splitlines() if '"step"' in line]
    return [s["seconds"] for s in steps[2:]], steps[-1]["rank_receive_buffer_peak_bytes"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--schedule", default="1f1b")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--longest", type=int, default=128)
    parser.add_argument("--lengths", default="64,128,96")
    args = parser.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]
    mean = sum(lengths) // len(lengths)
    shapes.WIDTH, shapes.LAYERS, shapes.LONGEST, shapes.HEADS = args.width, args.layers, args.longest, 4
    work = tempfile.mkdtemp(prefix="cleave_bench_")
    model, data, plan = (os.path.join(work, n) for n in ("decoder.onnx", "train.bin", "plan"))
    shapes.export(model)
    np.random.default_rng(3).integers(0, shapes.VOCAB, 400000).astype(np.uint16).tofile(data)
    stages = args.ranks * (2 if args.schedule in shapes.TWO_A_RANK else 1)
    subprocess.run([CLEAVE, "pipeline", model, "--stages", str(stages), "-o", plan], capture_output=True, check=True)
    sides = {"fixed": ["--seq-len", str(mean)], "padded": ["--seq-len", str(max(lengths))], "per step": ["--seq-lens", args.lengths],
             "per microbatch": ["--seq-lens", args.lengths, "--seq-len-per", "microbatch"]}
    medians = {side: [] for side in sides}
    peaks = {}
    names = list(sides)
    for r in range(args.rounds):
        for side in names[r % len(names):] + names[:r % len(names)]:
            seconds, peaks[side] = train(plan, data, args, sides[side])
            medians[side].append(statistics.fmean(seconds))
    print(f"{args.schedule} on {args.ranks} ranks, {stages} stages, batch {args.batch} in {args.microbatches} "
          f"microbatches, width {args.width}, {args.layers} layers; lengths {args.lengths} against fixed {mean}")
    for side in sides:
        print(f"  {side:15s} mean step {statistics.median(medians[side]) * 1e3:8.2f} ms (median of rounds)  rounds "
              + " ".join(f"{m * 1e3:.2f}" for m in medians[side]) + f"  receive-buffer peaks {peaks[side]}")
    for side in names[2:]:
        for against in ("fixed", "padded"):
            ratios = [v / f for v, f in zip(medians[side], medians[against])]
            print(f"  {side} / {against}: {statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]")


if __name__ == "__main__":
    main()
