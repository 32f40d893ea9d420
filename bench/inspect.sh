#!/usr/bin/env bash
# bench/inspect.sh - `cleave inspect` (with its batch analysis) against reading the model alone
# (`inspect --no-infer`) on the 1M-node chain (issue 60: at most 1.3x the time, 1.2x the peak).
#
# The model: `cleave gen chain ${CHAIN:-200000}` (1,000,002 nodes, 262 MB), in a temporary folder.
# Each round runs both commands, each in a fresh process, in alternating order (ROUNDS, default 5).
# Measured per run: wall seconds and the process's peak resident set (os.wait4's ru_maxrss).
# Printed: the medians of each side, and the ratio inspect / read of both per round, as the
# median with its [min, max] over the rounds.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/.venv/bin/python3" - "$root/build/release/cleave" "${CHAIN:-200000}" "${ROUNDS:-5}" <<'PY'
import os, shutil, statistics, subprocess, sys, tempfile, time

cleave, chain, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
tmp = tempfile.mkdtemp(prefix="cleave_inspect_bench_")
try:
    model = os.path.join(tmp, "chain.onnx")
    subprocess.run([cleave, "gen", "chain", chain, "-o", model], check=True, capture_output=True)
    sides = {"read": [cleave, "inspect", model, "--no-infer"], "inspect": [cleave, "inspect", model]}

    def measure(cmd):
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        if status != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {err.decode()}")
        return time.monotonic() - start, usage.ru_maxrss / 1024

    runs = {name: [] for name in sides}
    for r in range(rounds):
        for name in (("read", "inspect") if r % 2 == 0 else ("inspect", "read")):
            runs[name].append(measure(sides[name]))

    def spread(values):
        return f"{statistics.median(values):.2f}x [{min(values):.2f}, {max(values):.2f}]"

    print(f"chain {chain}: {os.path.getsize(model) / 1e6:.0f} MB, {rounds} rounds")
    for name, measured in runs.items():
        print(f"  {name:8s} {statistics.median(s for s, _ in measured):6.2f} s "
              f"{statistics.median(m for _, m in measured):7.0f} MiB")
    print("  inspect / read: time " + spread([i[0] / r[0] for i, r in zip(runs["inspect"], runs["read"])]) +
          ", peak " + spread([i[1] / r[1] for i, r in zip(runs["inspect"], runs["read"])]))
finally:
    shutil.rmtree(tmp)
PY
