#!/usr/bin/env python3
"""bench/startup.py - what the runtime library (cli/runtime_library.h) saves the planning commands:
each command timed as it runs now (libtorch never loaded) and with the runtime's libraries loaded
at start, as every command did while the runtime was linked into the executable (LD_PRELOAD of
the libraries libcleave_runtime.so needs: libtorch_cpu and oneDNN, whose static initializers are
the cost). Both sides run the same command in one run, interleaved, alternating which goes first.
Printed per command: each side's median wall time over ROUNDS rounds, and the median of the
per-round ratios preloaded / now with their [min, max].

usage: bench/startup.py [BUILD_DIR] [--rounds N]   (BUILD_DIR: build/release)
"""
import argparse
import os
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def runtime_libraries(build):
    """The paths of libtorch_cpu and libdnnl as the runtime library resolves them (ldd)."""
    out = subprocess.run(["ldd", os.path.join(build, "libcleave_runtime.so")], capture_output=True, text=True,
                         check=True).stdout
    paths = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "=>" and ("libtorch_cpu" in parts[0] or "libdnnl" in parts[0]):
            paths.append(parts[2])
    return paths


def wall(argv, env):
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build", nargs="?", default=os.path.join(ROOT, "build", "release"))
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    cleave = os.path.join(args.build, "cleave")
    examples = os.path.join(ROOT, "examples")
    profile = os.path.join(examples, "profiles", "gpu.json")
    commands = {
        "split --help": ["split", "--help"],
        "split transformer --preview": ["split", os.path.join(examples, "transformer.onnx"), "--profile", profile,
                                        "--preview"],
        "support cnn": ["support", os.path.join(examples, "cnn.onnx"), "--profile", profile],
        "pipeline transformer --stages 2": ["pipeline", os.path.join(examples, "transformer.onnx"), "--stages", "2"],
    }
    preload = dict(os.environ, LD_PRELOAD=":".join(runtime_libraries(args.build)))
    plain = dict(os.environ)
    print(f"{'command':32} {'now_ms':>8} {'preloaded_ms':>13} {'preloaded/now [range]':>24}")
    for name, argv in commands.items():
        try:
            wall([cleave, *argv], plain)
        except subprocess.CalledProcessError:
            print(f"{name:32} (fails here: skipped)")
            continue
        times = {"now": [], "preloaded": []}
        for round_ in range(args.rounds):
            sides = ["now", "preloaded"] if round_ % 2 == 0 else ["preloaded", "now"]
            for side in sides:
                times[side].append(wall([cleave, *argv], plain if side == "now" else preload))
        ratios = sorted(p / n for p, n in zip(times["preloaded"], times["now"]))
        print(f"{name:32} {statistics.median(times['now']) * 1e3:8.1f} "
              f"{statistics.median(times['preloaded']) * 1e3:13.1f} "
              f"{statistics.median(ratios):10.1f} [{ratios[0]:.1f}, {ratios[-1]:.1f}]")


if __name__ == "__main__":
    main()
