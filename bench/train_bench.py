"""bench/train_bench.py - pipeline training on c10d against PyTorch eager (issue 15's performance).

A 4-layer MLP with an MSE loss (PyTorch, random weights) trains K steps of SGD on the same
data in five ways, interleaved per round with the order flipped every round:
  torch        PyTorch eager in one process, the whole batch at once (2 intra-op threads)
  torch_mb     the same in cleave's microbatches (gradients accumulated)
  whole        `cleave train MODEL` in one process (microbatches; 2 threads, the machine's cores)
  1f1b         `cleave launch --nproc 2 -- cleave train PLAN2 --schedule 1f1b` (2 stages, 2 ranks)
  zero_bubble  the same plan with --schedule zero_bubble (backward split into I and W)
  interleaved  a 4-stage plan (one Linear each) and --schedule interleaved (2 stages per rank)
  1f1b_bound   1f1b with each rank on its own core (cleave launch --bind-cores)
  interleaved_bound  interleaved likewise
(pipeline ranks get 1 thread each: cleave launch gives cores / ranks). Per side: the median step
time over rounds (each run's first step dropped as warm-up) and the ratio to torch with [min,
max] over rounds. For the pipelines, two bubbles, each against the simulator. First, the measured bubble (cleave train --timing: 1 - compute /
(ranks x the schedule's wall time, before the optimizer step)) against the schedule simulator's
prediction for the same schedule with the measured per-stage F and B (zero bubble: F, I and W)
times, cleave's measured one-way message time for one microbatch's boundary as the transfer
latency, and the time a send() call holds the sender's thread as its send cost (both bench_comm):
`cleave schedule --simulate --costs ... --transfer-latency ... --send-cost ...`. Second, the idle
share (1 - the ranks' time in actions, less their receive waits, / (ranks x the longest rank's
schedule time)) against the simulator given each stage's measured action times (compute plus
each action's bookkeeping and send() calls, so no separate send cost) and the same latency: the
first counts bookkeeping as bubble and the simulator cannot, the second counts only idle time.
Third, the idle share against the simulator given the same action times plus the transport's own
CPU (the run's rank_transport_cpu_s over its rank_receives: Gloo's I/O threads, which share the
cores with the compute) as each message's receive cost (--receive-cost).
The simulator takes each action's cost as fixed. Two figures say how far that holds here: how much
slower each of two single-thread product loops in two processes runs than one alone (the cores
slow each other), and, from the timeline, how much longer an action computes while the other rank
computes than while it does not. And a replay: the simulator given each step's actions with their
own measured times (`--action-costs`), against that step's idle share; and the simulator with the
stage medians and the measured spread of action times within a step (`--cost-spread`, see
busy_spread), a prediction that keeps the variation but not which action varied.

usage: .venv/bin/python3 bench/train_bench.py CLEAVE BENCH_COMM [--rounds R] [--steps K] [--width W]
       [--baseline-cleave OTHER_CLEAVE]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

BATCH, MICROBATCHES = 256, 4


class Mlp(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(256, width), torch.nn.ReLU(), torch.nn.Linear(width, width), torch.nn.ReLU(),
            torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 256))

    def forward(self, x, target):
        return ((self.layers(x) - target) ** 2).mean()  # MSE (aten::mse_loss does not export)


def torch_steps(model, data, steps, microbatches=1):
    """Seconds per step of PyTorch eager SGD; with microbatches, gradients accumulated as cleave does."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, target = torch.from_numpy(data["x"]), torch.from_numpy(data["target"])
    times = []
    for step in range(steps):
        first = (step * BATCH) % len(x)
        start = time.perf_counter()
        optimizer.zero_grad()
        for chunk in range(microbatches):
            rows = slice(first + chunk * BATCH // microbatches, first + (chunk + 1) * BATCH // microbatches)
            (model(x[rows], target[rows]) / microbatches).backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return times


def cleave_steps(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    lines = [json.loads(line.split("] ", 1)[-1]) for line in out.splitlines() if "{" in line]
    return lines


def one_way_message_us(cleave, bench_comm, width):
    """cleave's one-way send/recv time for one microbatch's boundary [rows, width], and the time a
    send() call holds the sender's thread (bench_comm)."""
    out = subprocess.run([cleave, "launch", "--nproc", "2", "--master-port", "29690", "--", bench_comm, "--rows",
                          str(BATCH // MICROBATCHES), "--cols", str(width), "--iters", "300", "--rounds", "3"],
                         capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        if "cleave send/recv round trip median" in line:
            found["latency"] = float(line.split("median")[1].split()[0]) / 2
        if "cleave send() call median" in line:
            found["send"] = float(line.split("median")[1].split()[0])
    if len(found) != 2:
        raise RuntimeError("bench_comm printed no round trip or send time: " + out)
    return found["latency"], found["send"]


def stage_cost_us(timings, field, stage):
    """The median over steps of one stage's seconds in `field`, per microbatch, in microseconds."""
    return statistics.median(t[field][stage] for t in timings) / MICROBATCHES * 1e6


def simulate(cleave, kind, stages, ranks, costs, latency_us, send_us, *extra):
    """`cleave schedule --simulate --json` of `kind` with per-stage `costs` ("F,B[,I,W]" each),
    each message's latency and the sender's time per message, plus `extra` flags: its
    "simulation" object."""
    out = subprocess.run([cleave, "schedule", "--kind", kind, "--stages", str(stages), "--ranks", str(ranks),
                          "--microbatches", str(MICROBATCHES), "--simulate", "--costs", ";".join(costs),
                          "--transfer-latency", f"{latency_us:.3f}", "--send-cost", f"{send_us:.3f}", "--json",
                          *extra], capture_output=True, text=True, check=True).stdout
    return json.loads(out)["simulation"]


def action_kind(action):
    """An action's stage and type without its microbatch: "1B" for "1B3"."""
    return action["action"].rstrip("0123456789")


def simulated_bubble(cleave, kind, stages, ranks, timings, latency_us, send_us):
    """The simulator's bubble for `kind` with the measured per-stage F, B and (when split) I and W,
    each message's latency, and the sender's time per message."""
    costs = []
    for i in range(stages):
        f, b = stage_cost_us(timings, "stage_forward_s", i), stage_cost_us(timings, "stage_backward_s", i)
        w = stage_cost_us(timings, "stage_weight_s", i)
        costs.append(f"{f:.3f},{b:.3f}" + (f",{b - w:.3f},{w:.3f}" if w > 0 else ""))
    return simulate(cleave, kind, stages, ranks, costs, latency_us, send_us)["bubble_fraction"]


def busy_s(action):
    """An action's time on its rank less its receive waits: its compute plus its bookkeeping."""
    return action["end_s"] - action["start_s"] - action["wait_s"]


def action_busy_us(timings, stage, kinds):
    """The median over steps and microbatches of one stage's actions of `kinds` (F, B, I, W): their
    whole time on the rank less their receive waits (the compute plus the action's bookkeeping:
    gathering inputs, send() calls, loss, freeing), in microseconds."""
    times = [busy_s(a) for t in timings for a in t["actions"]
             if int(action_kind(a)[:-1]) == stage and action_kind(a)[-1] in kinds]
    return statistics.median(times) * 1e6 if times else 0.0


def idle_bubble(step, ranks):
    """The idle share of a step's schedule: 1 - the ranks' busy time (actions less their receive
    waits) / (ranks x the longest rank's schedule time)."""
    busy = sum(busy_s(a) for a in step["actions"])
    return 1.0 - busy / (ranks * max(step["rank_schedule_s"]))


def busy_spread(timings):
    """The spread of action times within a step, as --cost-spread takes it (the coefficient of
    variation of a lognormal factor): each action's log busy time less the median of its kind
    (stage and F, B, I or W) in its step, pooled over steps; sigma = 1.4826 x their median absolute
    value (robust to the few very slow actions); CV = sqrt(exp(sigma^2) - 1). Within a step, so a
    step that is slow as a whole (the machine) does not count: it slows every action alike and
    leaves no bubble."""
    deviations = []
    for t in timings:
        kinds = {}
        for a in t["actions"]:
            if busy_s(a) > 0:
                kinds.setdefault(action_kind(a), []).append(math.log(busy_s(a)))
        for logs in kinds.values():
            if len(logs) > 1:
                centre = statistics.median(logs)
                deviations += [abs(x - centre) for x in logs]
    if not deviations:
        return 0.0
    sigma = 1.4826 * statistics.median(deviations)
    return math.sqrt(math.exp(sigma * sigma) - 1.0)


def transport_us_per_message(timings):
    """The transport's CPU per message received: the median over steps of the CPU seconds Gloo's
    own threads ran during the schedule (its I/O loop reading and writing the sockets; summed over
    ranks) over the messages the ranks received, in microseconds."""
    return statistics.median(sum(t["rank_transport_cpu_s"]) / max(1, sum(t["rank_receives"])) for t in timings) * 1e6


def simulated_idle_bubble(cleave, kind, stages, ranks, timings, latency_us, spread=0.0, receive_us=0.0):
    """The simulator's bubble for `kind` with each stage's measured action times (action_busy_us;
    they include the send() calls, so the simulator's send cost is 0) and each message's latency;
    with `spread`, the mean over 200 plays whose action times vary by that coefficient of
    variation (--cost-spread); with `receive_us`, each message also takes its receiving rank that
    long (--receive-cost: the transport's thread on a core the rank computes on)."""
    costs = []
    for i in range(stages):
        f, b = action_busy_us(timings, i, "F"), action_busy_us(timings, i, "B")
        if not b:  # zero bubble: I and W
            inputs, weights = action_busy_us(timings, i, "I"), action_busy_us(timings, i, "W")
            costs.append(f"{f:.3f},{inputs + weights:.3f},{inputs:.3f},{weights:.3f}")
        else:
            costs.append(f"{f:.3f},{b:.3f}")
    simulation = simulate(cleave, kind, stages, ranks, costs, latency_us, 0.0,
                          *(["--cost-spread", f"{spread:.4f}", "--samples", "200"] if spread > 0 else []),
                          *(["--receive-cost", f"{receive_us:.3f}"] if receive_us > 0 else []))
    return simulation["spread"]["mean_bubble_fraction"] if spread > 0 else simulation["bubble_fraction"]


def replayed_idle_bubble(cleave, kind, stages, ranks, step, latency_us):
    """The simulator's bubble for one step with every action given its own measured time (busy_s:
    compute plus bookkeeping) through --action-costs: a replay that keeps each action's variation,
    where simulated_idle_bubble gives every action of a stage its median."""
    own = ",".join(f"{a['action']}={busy_s(a) * 1e6:.3f}" for a in step["actions"])
    return simulate(cleave, kind, stages, ranks, ["1,2"], latency_us, 0.0, "--action-costs", own)["bubble_fraction"]


def compute_interval(action):
    """An action's compute on its rank's clock: after its receive waits, for its compute time."""
    begin = action["start_s"] + action["wait_s"]
    return begin, begin + action["compute_s"]


def concurrency_slowdown(timings):
    """How much slower an action computes while the other rank computes: per stage and action kind,
    the median compute time of actions that overlap the other rank's compute for more than 3/4 of
    their own, over that of actions overlapping it for less than 1/4; the median over kinds with both.
    Each rank's clock starts at its own step start (after the previous step's all-reduce), so the
    ranks' timelines agree to about that all-reduce's skew (~0.1 ms). Returns (ratio or None, the
    number of alone and of concurrent actions)."""
    groups = {}
    for step in timings:
        for a in step["actions"]:
            begin, end = compute_interval(a)
            if end <= begin:
                continue
            other = [compute_interval(b) for b in step["actions"] if b["rank"] != a["rank"]]
            shared = sum(max(0.0, min(end, e) - max(begin, b)) for b, e in other) / (end - begin)
            if shared < 0.25 or shared > 0.75:
                groups.setdefault(action_kind(a), ([], []))[shared > 0.75].append(a["compute_s"])
    ratios = [statistics.median(busy) / statistics.median(alone) for alone, busy in groups.values() if alone and busy]
    alone = sum(len(g[0]) for g in groups.values())
    busy = sum(len(g[1]) for g in groups.values())
    return (statistics.median(ratios) if ratios else None), alone, busy


def matmul_seconds(queue, seconds=2.0):
    """Seconds per single-thread [64, 1024] x [1024, 1024] product over `seconds` of repeats."""
    torch.set_num_threads(1)
    a, w = torch.randn(64, 1024), torch.randn(1024, 1024)
    for _ in range(5):
        a @ w
    start, count = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        a @ w
        count += 1
    queue.put((time.perf_counter() - start) / count)


def core_sharing_slowdown():
    """One single-thread product loop in a process alone, then two at once in two processes: how much
    slower each runs beside the other (1.0: the two cores do not slow each other)."""
    import multiprocessing
    context = multiprocessing.get_context("spawn")
    def run(processes):
        queue = context.Queue()
        workers = [context.Process(target=matmul_seconds, args=(queue,)) for _ in range(processes)]
        for w in workers:
            w.start()
        times = [queue.get() for _ in workers]
        for w in workers:
            w.join()
        return statistics.mean(times)
    alone = run(1)
    return run(2) / alone


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cleave")
    parser.add_argument("bench_comm")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--baseline-cleave", help="another cleave build: adds its whole and 1f1b runs as sides "
                        "(whole_base, 1f1b_base) and prints this build's time over its, per round")
    args = parser.parse_args()
    cleave, bench_comm = os.path.abspath(args.cleave), os.path.abspath(args.bench_comm)
    torch.set_num_threads(2)
    work = tempfile.mkdtemp(prefix="cleave_train_bench_")
    torch.manual_seed(0)
    module = Mlp(args.width)
    model = os.path.join(work, "mlp.onnx")
    torch.onnx.export(module, (torch.randn(BATCH, 256), torch.randn(BATCH, 256)), model,
                      input_names=["x", "target"], output_names=["loss"], opset_version=13,
                      do_constant_folding=False, dynamic_axes={"x": {0: "n"}, "target": {0: "n"}}, dynamo=False)
    rng = np.random.default_rng(1)
    data = {"x": rng.standard_normal((BATCH * args.steps, 256), dtype=np.float32),
            "target": rng.standard_normal((BATCH * args.steps, 256), dtype=np.float32)}
    np.savez(os.path.join(work, "data.npz"), **data)
    plans = {}
    # Balanced by parameters (the MLP's FLOPs follow them; its batch dim is symbolic). Two stages:
    # equal_params cuts [Linear 1-2 | Linear 3-4]. Four: its greedy cut is [Linear 1-2 | ReLU |
    # Linear 3 | Linear 4], which gives interleaved's rank 0 three of the four Linears; `optimal`
    # (least largest stage) cuts one Linear per stage.
    for stages, policy in ((2, "equal_params"), (4, "optimal")):
        plans[stages] = os.path.join(work, f"plan{stages}")
        balance = ["--balance", "params"] if policy == "optimal" else []
        subprocess.run([cleave, "pipeline", model, "--stages", str(stages), "--policy", policy, *balance, "-o",
                        plans[stages]], check=True, capture_output=True)
    common = ["--data", os.path.join(work, "data.npz"), "--batch", str(BATCH), "--steps", str(args.steps),
              "--microbatches", str(MICROBATCHES), "--lr", "0.01", "--json", "--timing"]
    port = [29700]

    def launched(plan, kind, bind=(), binary=cleave):
        port[0] += 2
        return [binary, "launch", "--nproc", "2", "--master-port", str(port[0]), *bind, "--", "cleave", "train", plan,
                *common, "--schedule", kind]

    sides = {
        "torch": lambda: torch_steps(Mlp(args.width), data, args.steps),
        "torch_mb": lambda: torch_steps(Mlp(args.width), data, args.steps, MICROBATCHES),
        "whole": lambda: [t["seconds"] for t in cleave_steps([cleave, "train", model, *common])],
        "1f1b": lambda: cleave_steps(launched(plans[2], "1f1b")),
        "1f1b_bound": lambda: cleave_steps(launched(plans[2], "1f1b", ["--bind-cores"])),
        "zero_bubble": lambda: cleave_steps(launched(plans[2], "zero_bubble")),
        "interleaved": lambda: cleave_steps(launched(plans[4], "interleaved")),
        "interleaved_bound": lambda: cleave_steps(launched(plans[4], "interleaved", ["--bind-cores"])),
    }
    if args.baseline_cleave:
        base_cleave = os.path.abspath(args.baseline_cleave)
        sides["whole_base"] = lambda: [t["seconds"] for t in cleave_steps([base_cleave, "train", model, *common])]
        sides["1f1b_base"] = lambda: [t["seconds"] for t in cleave_steps(launched(plans[2], "1f1b", binary=base_cleave))]
    medians = {name: [] for name in sides}
    timings = {"1f1b": [], "1f1b_bound": [], "zero_bubble": [], "interleaved": [], "interleaved_bound": []}
    order = list(sides)
    for r in range(args.rounds):
        for name in (order if r % 2 == 0 else order[::-1]):
            result = sides[name]()
            if name in timings:
                timings[name] += result[1:]
                result = [t["seconds"] for t in result]
            medians[name].append(statistics.median(result[1:]))
    print(f"4-layer MLP 256-{args.width}-{args.width}-{args.width}-256, MSE, SGD; batch {BATCH} in {MICROBATCHES} "
          f"microbatches; {args.steps} steps per run (first dropped), {args.rounds} interleaved rounds; "
          f"torch threads {torch.get_num_threads()}, cleave whole 2 threads, pipeline ranks 2 x 1 thread")
    base = medians["torch"]
    for name, values in medians.items():
        ratios = [v / b for v, b in zip(values, base)]
        print(f"{name:12s} step median {statistics.median(values) * 1e3:8.2f} ms   vs torch "
              f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}, {max(ratios):.2f}]")
    if args.baseline_cleave:
        for name in ("whole", "1f1b"):
            ratios = [n / b for n, b in zip(medians[name], medians[name + "_base"])]
            print(f"{name} / {name}_base (this build over --baseline-cleave) step time: median "
                  f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}, {max(ratios):.2f}] over rounds")
    for kind in ("1f1b", "interleaved"):
        bound = [b / u for b, u in zip(medians[kind + "_bound"], medians[kind])]
        print(f"{kind}_bound / {kind} step time: median {statistics.median(bound):.2f}x [{min(bound):.2f}, "
              f"{max(bound):.2f}] over rounds")
    latency_us, send_us = one_way_message_us(cleave, bench_comm, args.width)
    print(f"cleave one-way message of one microbatch's boundary: {latency_us:.1f} us, of which the sender's "
          f"send() call {send_us:.1f} us (bench_comm; the simulator gets both)")
    print(f"two single-thread product loops side by side in two processes take {core_sharing_slowdown():.2f}x "
          f"the time of one alone (1.00: the cores do not slow each other; the simulator takes costs as fixed)")
    for name, stages in (("1f1b", 2), ("1f1b_bound", 2), ("zero_bubble", 2), ("interleaved", 4),
                         ("interleaved_bound", 4)):
        kind = name.removesuffix("_bound")
        measured = statistics.median(t["bubble"] for t in timings[name])
        predicted = simulated_bubble(cleave, kind, stages, 2, timings[name], latency_us, send_us)
        print(f"{name:12s} bubble measured {measured:.3f}, simulator {predicted:.3f} "
              f"(difference {abs(measured - predicted) / max(predicted, 1e-9) * 100:.0f}% of the prediction)")
        kinds = {}  # each action kind's bookkeeping: its time less its wait and compute
        for t in timings[name]:
            for a in t["actions"]:
                kinds.setdefault(action_kind(a), []).append(
                    (busy_s(a) - a["compute_s"]) * 1e6)
        print(f"{'':12s} bookkeeping per action, median [90th percentile] us: " + ", ".join(
            f"{k} {statistics.median(v):.0f} [{sorted(v)[int(0.9 * len(v))]:.0f}]" for k, v in sorted(kinds.items())))
        idle = statistics.median(idle_bubble(t, 2) for t in timings[name])
        idle_predicted = simulated_idle_bubble(cleave, kind, stages, 2, timings[name], latency_us)
        print(f"{'':12s} idle share measured {idle:.3f}, simulator with the measured action times "
              f"{idle_predicted:.3f} (difference {abs(idle - idle_predicted) / max(idle_predicted, 1e-9) * 100:.0f}% "
              f"of the prediction)")
        transport_ms = [statistics.median(t["rank_transport_cpu_s"][r] for t in timings[name]) * 1e3 for r in range(2)]
        receive_us = transport_us_per_message(timings[name])
        with_transport = simulated_idle_bubble(cleave, kind, stages, 2, timings[name], latency_us, receive_us=receive_us)
        print(f"{'':12s} the transport's own threads ran {transport_ms[0]:.1f} / {transport_ms[1]:.1f} ms a step on "
              f"ranks 0 / 1 ({receive_us:.0f} us per message received); idle share simulated with that as each "
              f"message's receive cost {with_transport:.3f} (difference "
              f"{abs(idle - with_transport) / max(with_transport, 1e-9) * 100:.0f}% of the prediction)")
        spread = busy_spread(timings[name])
        with_spread = simulated_idle_bubble(cleave, kind, stages, 2, timings[name], latency_us, spread)
        off = abs(idle - with_spread) / max(with_spread, 1e-9) * 100
        print(f"{'':12s} idle share simulated with the measured spread of action times within a step (coefficient of variation "
              f"{spread:.2f}, 200 plays) {with_spread:.3f} (difference {off:.0f}% of the prediction)")
        replayed = statistics.median(replayed_idle_bubble(cleave, kind, stages, 2, t, latency_us)
                                     for t in timings[name])
        print(f"{'':12s} idle share replayed (each step's actions with their own measured times) {replayed:.3f} "
              f"(difference {abs(idle - replayed) / max(replayed, 1e-9) * 100:.0f}% of the replay)")
        ratio, alone, busy = concurrency_slowdown(timings[name])
        if ratio is not None:
            print(f"{'':12s} an action computing while the other rank computes takes {ratio:.2f}x its time while "
                  f"the other does not (median over action kinds; {alone} alone, {busy} concurrent actions)")
        for rank in range(2):  # where each rank's schedule time went (stage s runs on rank s % 2)
            med = lambda f: statistics.median(f(t) for t in timings[name]) * 1e3
            wall = med(lambda t: t["rank_schedule_s"][rank])
            compute = med(lambda t: sum(t["stage_forward_s"][s] + t["stage_backward_s"][s]
                                        for s in range(rank, stages, 2)))
            wait = med(lambda t: t["rank_wait_s"][rank])
            print(f"{'':12s} rank {rank}: schedule {wall:.1f} ms = compute {compute:.1f} + receive waits {wait:.1f} "
                  f"+ between actions {wall - compute - wait:.1f}")
    # The split backward's price: zero bubble's I + W against 1f1b's whole B, per stage.
    for i in range(2):
        b = stage_cost_us(timings["1f1b"], "stage_backward_s", i)
        iw = stage_cost_us(timings["zero_bubble"], "stage_backward_s", i)
        w = stage_cost_us(timings["zero_bubble"], "stage_weight_s", i)
        print(f"stage {i} backward per microbatch: B {b:.0f} us; I {iw - w:.0f} + W {w:.0f} = {iw:.0f} us "
              f"({iw / b:.2f}x B)")


if __name__ == "__main__":
    sys.exit(main())
