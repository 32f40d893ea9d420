"""cleave on a CUDA GPU (ctest label `gpu`): whole models on aten-cuda equal aten-cpu's outputs
(rtol 1e-3, TF32 off), shape arithmetic stays on the host (few host-device copies), --profile
reports the device's peak memory, splits verify with their accelerator submodules on the GPU, and
--tf32 verifies at its own tolerance.

Where this build's libtorch has no CUDA, or no GPU answers, every case is skipped with the reason,
and the script exits 77 (ctest's SKIP_RETURN_CODE): CI machines have no GPU.

Only the standard library: outputs travel as cleave's JSON tensor files, so the check runs with
whatever Python the GPU machine has. CLEAVE_GPU_MODELS (optional) names more .onnx models to run
whole (scripts/gpu-check passes tools/export_zoo.py's).
"""
import glob
import json
import math
import os
import unittest

from testlib import EXAMPLES, TempDirTest, main, run

RTOL, ATOL_SCALE = 1e-3, 1e-5  # |cuda - cpu| <= ATOL_SCALE * max|cpu| + RTOL * |cpu|, element by element


def cuda_unavailable():
    """Why aten-cuda cannot run here, or None when it can."""
    code, _, err = run("run", os.path.join(EXAMPLES, "cnn.onnx"), "--backend", "aten-cuda")
    return None if code == 0 else (err.strip() or f"exit {code}")


SKIP_REASON = cuda_unavailable()


def models():
    found = sorted(glob.glob(os.path.join(EXAMPLES, "*.onnx")))
    extra = os.environ.get("CLEAVE_GPU_MODELS", "")
    return found + [m for m in extra.split(os.pathsep) if m]


def flat(tensor):
    data = tensor["data"]
    return data if isinstance(data, list) else [data]


def assert_close(test, got, want, label):
    test.assertEqual(sorted(got), sorted(want), label)
    for name, expected in want.items():
        actual = got[name]
        test.assertEqual(actual["dims"], expected["dims"], f"{label} {name}")
        a, e = flat(actual), flat(expected)
        if not e or not isinstance(e[0], float):
            test.assertEqual(a, e, f"{label} {name}")
            continue
        scale = max(abs(x) for x in e if math.isfinite(x)) if any(math.isfinite(x) for x in e) else 1.0
        worst = max((abs(x - y) - RTOL * abs(y) for x, y in zip(a, e)), default=0.0)
        test.assertLessEqual(worst, ATOL_SCALE * scale, f"{label} {name}: past rtol {RTOL} by {worst}")


@unittest.skipIf(SKIP_REASON is not None, f"no CUDA: {SKIP_REASON}")
class WholeModels(TempDirTest):
    def test_every_model_equals_the_cpu(self):
        for model in models():
            with self.subTest(model=os.path.basename(model)):
                outputs = {}
                for backend in ("aten-cpu", "aten-cuda"):
                    path = self.path(f"{backend}.json")
                    run("run", model, "--backend", backend, "--seed", 3, "--save-outputs", path, check=True)
                    with open(path) as f:
                        outputs[backend] = json.load(f)
                assert_close(self, outputs["aten-cuda"], outputs["aten-cpu"], os.path.basename(model))

    def test_profile_reports_device_memory_and_few_copies(self):
        model = os.path.join(EXAMPLES, "transformer.onnx")
        _, out, _ = run("run", model, "--backend", "aten-cuda", "--profile", "--json", "--repeat", 3, check=True)
        summary = json.loads(out)
        self.assertGreater(summary["peak_device_bytes"], 0)
        # The heads' reshape targets are computed on the host and read there: nothing of the shape
        # arithmetic crosses (the example's crossings are known on the CPU: value_placement_test).
        self.assertEqual(summary["host_device_copies"], 0)


@unittest.skipIf(SKIP_REASON is not None, f"no CUDA: {SKIP_REASON}")
class Cuts(TempDirTest):
    def test_split_verifies_with_acc_submodules_on_the_gpu(self):
        for name in ("cnn.onnx", "transformer.onnx", "dlrm.onnx"):
            with self.subTest(model=name):
                model, cut = os.path.join(EXAMPLES, name), self.path(name + ".split")
                run("split", model, "--profile", os.path.join(EXAMPLES, "profiles", "gpu.json"), "-o", cut, check=True)
                _, out, _ = run("verify", model, cut, "--backend", "aten-cuda", "--json", check=True)
                self.assertTrue(json.loads(out)["ok"])

    def test_tf32_verifies_at_its_own_tolerance(self):
        model, cut = os.path.join(EXAMPLES, "transformer.onnx"), self.path("split")
        run("split", model, "--profile", os.path.join(EXAMPLES, "profiles", "gpu.json"), "-o", cut, check=True)
        _, out, _ = run("verify", model, cut, "--backend", "aten-cuda", "--tf32", "--json", check=True)
        summary = json.loads(out)
        self.assertTrue(summary["ok"])
        self.assertEqual(summary["rtol"], 1e-2)


if __name__ == "__main__":
    main(SKIP_REASON)
