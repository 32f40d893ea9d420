#!/usr/bin/env python3
"""bench/train_schedules.py - the V schedules and data-parallel replicas on real ranks (issue 46):
a 4-stage plan of bench/train_modes.py's blocks trained on 2 ranks under interleaved 1F1B, zbv
and dualpipev (4 stages on 2 ranks each: loop placement for interleaved, a V for the others), and
as 2 replicas of a one-rank pipeline (`--pipeline-ranks 1`) against one process on the same batch.

Per side: the median step time (each run's first step dropped), the measured bubble (--timing:
1 - compute / (ranks x schedule seconds)), rank 0's and rank 1's peak step bytes (ATen's CPU
allocator above the step's start) and, for the replicas, the seconds a rank still waited for the
gradient sums after its schedule (rank_replica_wait_s) against the step. Sides are interleaved
per round, the order flipped every round; values are medians over rounds, ratios median [min, max].

usage: .venv/bin/python3 bench/train_schedules.py CLEAVE [--rounds R] [--steps K] [--width W] [--rows N]
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_modes import Blocks  # noqa: E402  (the same blocks as the recomputation bench)


def measured(argv):
    """Runs argv; per step after the first: seconds, bubble, rank peak bytes, replica wait."""
    proc = subprocess.run(list(map(str, argv)), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(map(str, argv))} failed: {proc.stderr}")
    steps = [json.loads(line.split("] ", 1)[-1]) for line in proc.stdout.splitlines()
             if line.split("] ", 1)[-1].startswith("{")]
    steps = steps[1:]
    peaks = [max(s["rank_peak_step_bytes"][r] for s in steps) / 2**20 for r in range(len(steps[0]["rank_peak_step_bytes"]))]
    wait = statistics.median(max(s.get("rank_replica_wait_s", [0.0])) for s in steps)
    return {"step": statistics.median(s["seconds"] for s in steps),
            "bubble": statistics.median(s["bubble"] for s in steps), "peaks": peaks, "wait": wait}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cleave")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--microbatches", type=int, default=8)
    args = parser.parse_args()
    torch.manual_seed(0)
    work = tempfile.mkdtemp(prefix="cleave_train_schedules_")
    blocks = os.path.join(work, "blocks.onnx")
    batch = args.rows * args.microbatches
    narrow = torch.randn(batch * args.steps, args.width // 8)
    torch.onnx.export(Blocks(args.width), (narrow[:batch], narrow[:batch]), blocks, input_names=["x", "target"],
                      output_names=["loss"], opset_version=13, do_constant_folding=False,
                      dynamic_axes={"x": {0: "n"}, "target": {0: "n"}}, dynamo=False)
    np.savez(os.path.join(work, "blocks.npz"), x=narrow.numpy(), target=torch.randn_like(narrow).numpy())
    plan = os.path.join(work, "blocks_plan")
    subprocess.run([args.cleave, "pipeline", blocks, "--stages", "4", "-o", plan], check=True,
                   stdout=subprocess.DEVNULL)
    train = ["train", plan, "--data", os.path.join(work, "blocks.npz"), "--batch", batch, "--steps", args.steps,
             "--optimizer", "sgd", "--lr", 0.01, "--json", "--timing", "--microbatches"]
    launch = [args.cleave, "launch", "--nproc", 2, "--", args.cleave]
    sides = {f"{kind}, 2 ranks": launch + train + [args.microbatches, "--schedule", kind]
             for kind in ("interleaved", "zbv", "dualpipev")}
    # The whole batch in one process, and split between 2 replicas (each its half, in half the
    # microbatches, so both sides run microbatches of the same rows).
    sides["one process"] = [args.cleave] + train + [args.microbatches]
    sides["2 replicas x 1 rank"] = launch + train + [args.microbatches // 2, "--pipeline-ranks", 1]
    os.environ["OMP_NUM_THREADS"] = "1"
    names, results = list(sides), {name: [] for name in sides}
    for round_index in range(args.rounds):
        for name in (names if round_index % 2 == 0 else names[::-1]):
            results[name].append(measured(sides[name]))
    print(f"plan: 4 blocks ({args.width // 8} -> {args.width} -> {args.width} -> {args.width // 8}), {batch} rows "
          f"in {args.microbatches} microbatches of {args.rows}, SGD, {args.steps} steps, {args.rounds} rounds, "
          f"1 thread per rank")
    print(f"{'side':22} {'step_ms':>8} {'bubble':>7} {'rank0_MiB':>10} {'rank1_MiB':>10} {'replica_wait_ms':>16}")
    for name in names:
        rows = results[name]
        peak = [statistics.median(r["peaks"][k] for r in rows) if len(rows[0]["peaks"]) > k else 0.0 for k in (0, 1)]
        print(f"{name:22} {statistics.median(r['step'] for r in rows) * 1e3:8.2f} "
              f"{statistics.median(r['bubble'] for r in rows):7.3f} {peak[0]:10.2f} {peak[1]:10.2f} "
              f"{statistics.median(r['wait'] for r in rows) * 1e3:16.2f}")
    for a, b in [("zbv, 2 ranks", "interleaved, 2 ranks"), ("dualpipev, 2 ranks", "interleaved, 2 ranks"),
                 ("2 replicas x 1 rank", "one process")]:
        ratios = [ra["step"] / rb["step"] for ra, rb in zip(results[a], results[b])]
        print(f"{a + ' / ' + b:46} step {statistics.median(ratios):6.3f} [{min(ratios):.3f}, {max(ratios):.3f}]")


if __name__ == "__main__":
    main()
