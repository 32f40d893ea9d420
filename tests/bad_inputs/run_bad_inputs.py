"""cleave on bad input: every case must end with one error line naming the problem and exit 1
(bad input) or 2 (usage), within a time limit, never exit 3 or a signal, and leave the file
system exactly as it was: nothing written, nothing deleted, anywhere in the case's sandbox (the
model's folder, the working directory, an outside folder it might be tricked into reading).

A few cases are inputs cleave must accept (a name that is not UTF-8, an earlier cleave output
under -o): they assert exit 0 and what was written.

usage: run_bad_inputs.py CLEAVE [NAME_FILTER]    (cases: tests/bad_inputs/cases.py)
Prints one line per case and closes with "N passed, N failed". CLEAVE_BAD_INPUT_SHARD=K/N runs
the K-th of N interleaved shares of the catalogue (ctest runs it as two tests, so that its half
of the cases run beside the other half on two cores).
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cases  # noqa: E402
from testlib import run_checking_leaks  # noqa: E402

CLEAVE = os.path.abspath(sys.argv[1])
FILTER = sys.argv[2] if len(sys.argv) > 2 else ""
# The sanitizer build is several times slower; its ctest entry raises this.
TIME_SCALE = float(os.environ.get("CLEAVE_BAD_INPUT_TIME_SCALE", "1"))
SHARD = os.environ.get("CLEAVE_BAD_INPUT_SHARD", "1/1")
ASAN_ALLOCATION_NOTE = re.compile(r"^==\d+==WARNING: AddressSanitizer failed to allocate 0x[0-9a-f]+ bytes$")


def snapshot(root):
    """Every path under root (not following links) with its type, size and content hash."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            if os.path.islink(path):
                state[rel] = ("link", os.readlink(path))
            elif os.path.isdir(path):
                state[rel] = ("dir",)
            elif os.path.isfile(path):
                with open(path, "rb") as f:
                    state[rel] = ("file", st.st_size, hashlib.sha256(f.read()).hexdigest())
            else:
                state[rel] = ("special", st.st_mode)
    return state


def describe_change(before, after):
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    parts = []
    if added:
        parts.append(f"written: {added[:5]}")
    if removed:
        parts.append(f"deleted: {removed[:5]}")
    if changed:
        parts.append(f"changed: {changed[:5]}")
    return "; ".join(parts)


def run_case(case):
    """(problem or None, seconds cleave ran)."""
    sandbox = tempfile.mkdtemp(prefix="cleave_bad_")
    try:
        ctx = cases.Sandbox(sandbox)
        case.setup(ctx)
        argv = [a.format(**ctx.names()) for a in case.argv]
        before = snapshot(sandbox)
        env = dict(os.environ, HOME=ctx.home)
        start = time.monotonic()
        try:
            proc = run_checking_leaks([CLEAVE, *argv], cwd=ctx.work, env=env, stdin=subprocess.DEVNULL,
                                      timeout=case.timeout * TIME_SCALE)
        except subprocess.TimeoutExpired:
            return f"no answer within {case.timeout * TIME_SCALE:.0f} s (a hang?)", case.timeout * TIME_SCALE
        elapsed = time.monotonic() - start
        return check_outcome(case, ctx, proc, before, snapshot(sandbox)), elapsed
    finally:
        for dirpath, dirnames, _ in os.walk(sandbox):  # a case may have made folders read-only
            for d in dirnames:
                try:
                    os.chmod(os.path.join(dirpath, d), 0o755)
                except OSError:
                    pass
        shutil.rmtree(sandbox, ignore_errors=True)


def check_outcome(case, ctx, proc, before, after):
    """None when cleave answered as the case expects, else what went wrong."""
    err = proc.stderr.decode("utf-8", "replace")
    # A sanitizer's note that an allocation failed (allocator_may_return_null) is not cleave's output.
    lines = [line for line in err.splitlines() if line.strip() and not ASAN_ALLOCATION_NOTE.match(line)]
    if proc.returncode < 0:
        return f"killed by signal {-proc.returncode}: {err[-500:]!r}"
    if proc.returncode != case.exit:
        return f"exit {proc.returncode}, expected {case.exit}: {err[-500:]!r}"
    if case.exit != 0:
        if len(lines) != 1:
            return f"expected one error line, got {len(lines)}: {err[-500:]!r}"
        if not re.search(case.message, lines[0]):
            return f"error line {lines[0]!r} does not match {case.message!r}"
        if before != after:
            return "the file system changed: " + describe_change(before, after)
    elif case.check:
        problem = case.check(ctx, before, after, proc.stdout.decode("utf-8", "replace"))
        if problem:
            return problem
    return None


def shard_of(spec):
    """(index, count) from 'K/N' (1 <= K <= N)."""
    match = re.fullmatch(r"(\d+)/(\d+)", spec)
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
        sys.exit(f"CLEAVE_BAD_INPUT_SHARD must be K/N with 1 <= K <= N, not {spec!r}")
    return int(match.group(1)) - 1, int(match.group(2))


def main():
    index, count = shard_of(SHARD)
    selected = [c for i, c in enumerate(cases.CASES) if i % count == index and FILTER in c.kind + "/" + c.name]
    names = [(c.kind, c.name) for c in cases.CASES]
    assert len(names) == len(set(names)), "case names must be unique"
    passed = failed = 0
    kinds = {}
    for case in selected:
        problem, seconds = run_case(case)
        kinds.setdefault(case.kind, [0, 0])[0 if problem is None else 1] += 1
        if problem is None:
            passed += 1
            print(f"ok    {case.kind:14} {case.name} ({seconds:.1f} s)")
        else:
            failed += 1
            print(f"FAIL  {case.kind:14} {case.name} ({seconds:.1f} s): {problem}")
    print("by kind: " + ", ".join(f"{k} {v[0]}/{v[0] + v[1]}" for k, v in sorted(kinds.items())))
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
