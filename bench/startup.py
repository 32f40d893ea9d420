#!/usr/bin/env python3
"""bench/startup.py - what the runtime library (cli/runtime_library.h) saves the planning commands:
each command timed as it runs now (libtorch never loaded) and with the runtime's libraries loaded
at start, as every command did while the runtime was linked into the executable (LD_PRELOAD of
the libraries libcleave_runtime.so needs: libtorch_cpu and oneDNN, whose static initializers are
the cost). Both sides run the same command in one run, interleaved, alternating which goes first.
Printed per command: each side's median wall time over ROUNDS rounds, and the median of the
per-round ratios preloaded / now with their [min, max].

With --against OTHER_BUILD_DIR the two sides are instead this build's cleave and that build's (a
build on another libtorch: "start-up no slower than before"), on the same commands plus a model
run (`run cnn.onnx`: libtorch's load and one small model), printed as this / other.

usage: bench/startup.py [BUILD_DIR] [--rounds N] [--against OTHER_BUILD_DIR]   (BUILD_DIR: build/release)
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
    parser.add_argument("--against", help="another build folder: time its cleave against this one's")
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
    plain = dict(os.environ)
    if args.against:
        commands["run cnn.onnx"] = ["run", os.path.join(examples, "cnn.onnx")]
        other = os.path.join(args.against, "cleave")
        sides = {"this": ([cleave], plain), "other": ([other], plain)}
    else:
        preload = dict(os.environ, LD_PRELOAD=":".join(runtime_libraries(args.build)))
        sides = {"other": ([cleave], plain), "this": ([cleave], preload)}  # ratio: preloaded / now
    head = ("this_ms", "other_ms", "this/other [range]") if args.against else ("now_ms", "preloaded_ms",
                                                                            "preloaded/now [range]")
    print(f"{'command':32} {head[0]:>8} {head[1]:>13} {head[2]:>24}")
    for name, argv in commands.items():
        try:
            for binary, env in sides.values():
                wall([*binary, *argv], env)
        except subprocess.CalledProcessError:
            print(f"{name:32} (fails here: skipped)")
            continue
        times = {"this": [], "other": []}
        for round_ in range(args.rounds):
            for side in (["this", "other"] if round_ % 2 == 0 else ["other", "this"]):
                binary, env = sides[side]
                times[side].append(wall([*binary, *argv], env))
        ratios = sorted(t / o for t, o in zip(times["this"], times["other"]))
        first, second = (times["this"], times["other"]) if args.against else (times["other"], times["this"])
        print(f"{name:32} {statistics.median(first) * 1e3:8.1f} {statistics.median(second) * 1e3:13.1f} "
              f"{statistics.median(ratios):10.2f} [{ratios[0]:.2f}, {ratios[-1]:.2f}]")


if __name__ == "__main__":
    main()
