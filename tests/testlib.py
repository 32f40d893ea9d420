"""Helpers for cleave's end-to-end tests: run the binary, make temp dirs, count results."""
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
import unittest

CLEAVE = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "cleave"
SOURCE_DIR = os.environ.get("CLEAVE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
EXAMPLES = os.path.join(SOURCE_DIR, "examples")
# ONNX's backend test cases of the onnx release scripts/setup installs (tests/onnx_backend/generate_cases.py).
ONNX_TESTS = os.path.join(SOURCE_DIR, ".onnx-tests")
# ONNX Runtime as the independent oracle (tests/oracle/onnxruntime_oracle.py), run in its own
# process by the interpreter running the tests (scripts/setup's virtual environment):
# `[*ORACLE, "run", MODEL, INPUTS, OUTPUTS]` or `[*ORACLE, "plan", MODEL, OUT_DIR, INPUTS]`.
ORACLE = [sys.executable, os.path.join(SOURCE_DIR, "tests", "oracle", "onnxruntime_oracle.py")]


# LeakSanitizer's stop-the-world tracer sometimes crashes at exit, on a process whose work is done
# (a known fault of the sanitizer runtime, seen in many projects' CI). In CI it crashed on one case
# of the bad-input catalogue (plan-json/file-dotdot) in three runs in a row, across two CI runs,
# and never in 260 runs of that case on the development machine. The leak check did not run, so
# the command runs again.
LEAK_CHECK_ATTEMPTS = 3
LSAN_TRACER_CRASH = re.compile(r"^Tracer caught signal \d+: .*\n==\d+==LeakSanitizer has encountered a fatal error\.$",
                               re.MULTILINE)


def run_checking_leaks(argv, **kwargs):
    """subprocess.run(argv, capture_output=True, **kwargs), run again where LeakSanitizer's tracer
    crashed (LSAN_TRACER_CRASH). After LEAK_CHECK_ATTEMPTS crashes in a row the command runs once
    more with the leak check off (said on stderr): what it printed and its exit status are still
    checked; LeakSanitizer could not look for leaks on that command."""
    for _ in range(LEAK_CHECK_ATTEMPTS):
        proc = subprocess.run(argv, capture_output=True, **kwargs)
        err = proc.stderr if isinstance(proc.stderr, str) else proc.stderr.decode("utf-8", "replace")
        if not LSAN_TRACER_CRASH.search(err):
            return proc
        print(f"rerun after LeakSanitizer's tracer crashed: {' '.join(map(str, argv))}", file=sys.stderr)
    print(f"LeakSanitizer's tracer crashed {LEAK_CHECK_ATTEMPTS} times in a row; running without the leak check: "
          f"{' '.join(map(str, argv))}", file=sys.stderr)
    env = dict(kwargs.pop("env", None) or os.environ)
    env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS", ""), "detect_leaks=0"]))
    return subprocess.run(argv, capture_output=True, env=env, **kwargs)


def run(*args, check=False):
    """Runs `cleave ARGS`; returns (exit code, stdout, stderr)."""
    proc = run_checking_leaks([CLEAVE, *map(str, args)], text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"cleave {' '.join(map(str, args))} failed ({proc.returncode}): {proc.stderr}")
    return proc.returncode, proc.stdout, proc.stderr


def free_port():
    """A TCP port on loopback that nothing listens on now, below the kernel's ephemeral range
    (ip_local_port_range): a port the kernel hands out there may meanwhile become the local end of
    another test's Gloo connection, and the store's listen then fails with EADDRINUSE."""
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(200):
        port = rng.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-31999")


# Every distributed run of the tests holds the pipeline trainer to NCCL's rule (a channel's
# messages meet its receives in order, not by tag) and checks each message's tag on arrival.
os.environ.setdefault("CLEAVE_DIST_CHECK_ORDER", "1")


def launch(nproc, *command):
    """`cleave launch --nproc N -- COMMAND` on a free port, each rank waiting at most 30 s for the
    others; returns (exit code, stdout, stderr)."""
    return run("launch", "--nproc", nproc, "--master-port", free_port(), "--timeout", 30, "--", *command)


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="cleave_test_")
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp, name)

    def assertOneLineError(self, code, err, *needles, exit_code=1):
        self.assertEqual(code, exit_code, err)
        lines = [l for l in err.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, f"expected one error line, got: {err!r}")
        self.assertIn("error:", lines[0])
        for needle in needles:
            self.assertIn(needle, lines[0])


def main(skip_reason=None):
    """Runs the tests; with `skip_reason` (a script whose every case needs what is missing, as
    the GPU's do), a passing run exits 77, ctest's SKIP_RETURN_CODE."""
    sys.argv = sys.argv[:1]
    result = unittest.main(verbosity=2, exit=False).result
    if not result.wasSuccessful():
        sys.exit(1)
    sys.exit(77 if skip_reason is not None else 0)


if __name__ == "__main__":
    # `testlib.py COMMAND...`: COMMAND run as run_checking_leaks runs it, its output passed through
    # and its exit status returned (the sanitizer build's unit-test binaries: CMakeLists.txt).
    finished = run_checking_leaks(sys.argv[1:])
    sys.stdout.buffer.write(finished.stdout)
    sys.stderr.buffer.write(finished.stderr)
    sys.exit(finished.returncode)
