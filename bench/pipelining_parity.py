"""Step time of cleave's pipeline training against PyTorch's own (torch.distributed.pipelining),
schedule by schedule, on CPU ranks over Gloo: the models, schedules and rank counts of
tests/pipelining_parity_test.py (whose test checks that both sides train the same parameters).

Both sides run in one process tree here, interleaved: each round runs torch's side then cleave's
(the order flips every round), each for --steps steps; a side's time is the median of its steps
after the first (torch: rank 0's, from a barrier to the optimizer step; cleave: `train --json`'s
per-step seconds). Printed per model and schedule: both medians over the rounds and the ratio
cleave / torch with its [min, max] over the rounds. Process start is not timed on either side.

  .venv/bin/python3 bench/pipelining_parity.py [--models mlp,decoder] [--steps 20] [--rounds 3]
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
import pipelining_parity_test as parity  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
sys.argv = argv


def torch_step_seconds(name, schedule, ranks, steps, work):
    out = os.path.join(work, f"torch_{name}_{schedule}")
    mp.spawn(parity.torch_rank, args=(ranks, name, schedule, parity.free_port(), out, steps), nprocs=ranks)
    with open(f"{out}.0.json") as f:
        return statistics.median(json.load(f)["step_seconds"][1:])


def cleave_step_seconds(name, plan, schedule, ranks, steps, work):
    proc = subprocess.run([CLEAVE, "launch", "--nproc", str(ranks), "--master-port", str(parity.free_port()), "--",
                           "cleave", "train", plan, "--data", os.path.join(work, f"{name}.npz"), "--batch",
                           str(parity.BATCH), "--steps", str(steps), "--microbatches", str(parity.MICROBATCHES),
                           "--optimizer", "sgd", "--lr", str(parity.LR), "--schedule", schedule, "--json", "--timing"],
                          capture_output=True, text=True, check=True)
    lines = [json.loads(l.split("] ", 1)[1]) for l in proc.stdout.splitlines() if l.startswith("[rank 0] {")]
    return statistics.median(step["seconds"] for step in lines[1:])


class Planner(parity.PipeliningParity):
    """The test's export and plan, into a folder of the bench's."""

    def __init__(self, work):
        super().__init__("test_an_mlp_trains_as_torchs_pipelining_trains_it_on_every_schedule")
        self.tmp = work


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,decoder")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"steps {args.steps}, rounds {args.rounds}, batch {parity.BATCH} in {parity.MICROBATCHES} microbatches, "
          f"{parity.LAYERS} stages, width {parity.WIDTH}")
    print(f"{'model':8} {'schedule':12} {'ranks':>9} {'torch_ms':>9} {'cleave_ms':>10} {'cleave/torch [range]':>24}")
    with tempfile.TemporaryDirectory(prefix="cleave_parity_") as work:
        planner = Planner(work)
        for name in args.models.split(","):
            _, plan = planner.cleave_plan(name)
            for ours, our_ranks, theirs, their_ranks in parity.SCHEDULES:
                times = {"torch": [], "cleave": []}
                for round_ in range(args.rounds):
                    sides = ["torch", "cleave"] if round_ % 2 == 0 else ["cleave", "torch"]
                    for side in sides:
                        times[side].append(
                            torch_step_seconds(name, theirs, their_ranks, args.steps, work) if side == "torch" else
                            cleave_step_seconds(name, plan, ours, our_ranks, args.steps, work))
                ratios = [c / t for c, t in zip(times["cleave"], times["torch"])]
                print(f"{name:8} {ours:12} {our_ranks:>4}/{their_ranks:<4} {statistics.median(times['torch']) * 1e3:9.2f} "
                      f"{statistics.median(times['cleave']) * 1e3:10.2f} "
                      f"{statistics.median(ratios):9.2f}x [{min(ratios):.2f}, {max(ratios):.2f}]", flush=True)


if __name__ == "__main__":
    main()
