"""cleave on a CUDA GPU (ctest label `gpu`): whole models on aten-cuda equal aten-cpu's outputs
(rtol 1e-3, TF32 off), shape arithmetic stays on the host (few host-device copies), --profile
reports the device's peak memory, splits verify with their accelerator submodules on the GPU,
--tf32 verifies at its own tolerance, and --graph-replay (CUDA graphs) gives the outputs of an
eager run, or names why a model's run could not be recorded.

Where this build's libtorch has no CUDA, or no GPU answers, every case is skipped with the reason,
and the script exits 77 (ctest's SKIP_RETURN_CODE): CI machines have no GPU.

Only the standard library: outputs travel as cleave's JSON tensor files, so the check runs with
whatever Python the GPU machine has. CLEAVE_GPU_MODELS (optional) names more .onnx models to run
whole (scripts/gpu-check passes tools/export_zoo.py's).
"""
import concurrent.futures
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
    def outputs_of(self, runs):
        """Runs every (model, backend, extra flags) of `runs` at once (the GPU machine has the cores
        and each run is mostly the process's start); {run: (exit code, stderr, outputs or None)}."""
        def one(key):
            model, backend, flags = key
            path = self.path(f"{abs(hash(key))}.json")
            code, _, err = run("run", model, "--backend", backend, "--seed", 3, *flags, "--save-outputs", path)
            if code != 0:
                return key, (code, err, None)
            with open(path) as f:
                return key, (code, err, json.load(f))
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
            return dict(pool.map(one, runs))

    def test_every_model_equals_the_cpu(self):
        runs = [(model, backend, ()) for model in models() for backend in ("aten-cpu", "aten-cuda")]
        results = self.outputs_of(runs)
        for model in models():
            with self.subTest(model=os.path.basename(model)):
                cpu, cuda = results[(model, "aten-cpu", ())], results[(model, "aten-cuda", ())]
                self.assertEqual(cpu[0], 0, cpu[1])
                self.assertEqual(cuda[0], 0, cuda[1])
                assert_close(self, cuda[2], cpu[2], os.path.basename(model))

    def test_graph_replay_gives_the_eager_outputs(self):
        """Three runs: the first records, the next two replay on new copies of the inputs."""
        examples = sorted(glob.glob(os.path.join(EXAMPLES, "*.onnx")))
        replaying = ("--graph-replay", "--repeat", "3")
        from_device = replaying + ("--inputs-on-device",)  # the recording reads device inputs, copied on the device
        variants = ((), replaying, from_device)
        results = self.outputs_of([(m, "aten-cuda", flags) for m in examples for flags in variants])
        for model in examples:
            with self.subTest(model=os.path.basename(model)):
                eager = results[(model, "aten-cuda", ())]
                for flags in (replaying, from_device):
                    replayed = results[(model, "aten-cuda", flags)]
                    self.assertEqual(replayed[0], 0, replayed[1])
                    assert_close(self, replayed[2], eager[2], f"{os.path.basename(model)} {' '.join(flags)}")
                _, out, _ = run("run", model, "--backend", "aten-cuda", "--graph-replay", "--repeat", 2, "--json",
                                "--inputs-on-device", check=True)
                replay = json.loads(out)["graph_replay"]
                self.assertEqual(replay["recorded"] + replay["refused"], 1, replay)
                if replay["refused"]:  # a refusal says which step the device would not record
                    self.assertIn("record", replay["refusal"])

    def test_graph_replay_records_the_examples_that_stay_on_the_device(self):
        """The CNN's and the transformer's shape arithmetic is folded or stays on the host, so
        nothing reads a device value there: their runs record."""
        for name in ("cnn.onnx", "transformer.onnx"):
            with self.subTest(model=name):
                _, out, _ = run("run", os.path.join(EXAMPLES, name), "--backend", "aten-cuda", "--graph-replay",
                                "--repeat", 5, "--json", check=True)
                summary = json.loads(out)
                self.assertEqual(summary["graph_replay"], {"recorded": 1, "refused": 0}, summary)

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

    def test_graph_replay_of_a_cut_with_cpu_submodules_is_refused_or_equal(self):
        """A split's CPU submodules read device values on the host: the device refuses to record
        that, and the run goes on eagerly with the same outputs."""
        model, cut = os.path.join(EXAMPLES, "dlrm.onnx"), self.path("split")
        run("split", model, "--profile", os.path.join(EXAMPLES, "profiles", "gpu.json"), "-o", cut, check=True)
        outputs = {}
        for flags in ((), ("--graph-replay",)):
            path = self.path(f"{len(flags)}.json")
            _, out, _ = run("run", cut, "--backend", "aten-cuda", "--seed", 3, "--repeat", 2, "--json", *flags,
                            "--save-outputs", path, check=True)
            with open(path) as f:
                outputs[flags] = json.load(f)
            if flags:
                replay = json.loads(out)["graph_replay"]
                self.assertEqual(replay["recorded"] + replay["refused"], 1, replay)
        assert_close(self, outputs[("--graph-replay",)], outputs[()], "dlrm split")

    def test_profile_times_the_copies_at_a_splits_seams(self):
        """The transformer split for gpu.json alternates GPU and CPU submodules: --profile counts
        and times each value moved between them, which the preview's bytes bound from above (a
        value the CPU reads twice moves twice, an acc output the run keeps on the GPU not at all)."""
        model, cut = os.path.join(EXAMPLES, "transformer.onnx"), self.path("split")
        _, out, _ = run("split", model, "--profile", os.path.join(EXAMPLES, "profiles", "gpu.json"), "-o", cut,
                        "--preview", "--json", check=True)
        preview = json.loads(out)
        self.assertGreater(preview["cpu_subgraphs"], 0)
        _, out, _ = run("run", cut, "--backend", "aten-cuda", "--profile", "--json", "--repeat", 2, check=True)
        summary = json.loads(out)
        self.assertGreater(summary["seam_copies"], 0, summary)
        self.assertGreater(summary["seam_copy_bytes"], 0, summary)
        self.assertGreater(summary["seam_copy_s"], 0, summary)
        self.assertLess(summary["seam_copy_s"], summary["last_run_s"])

    def test_fp16_verifies_at_its_own_tolerance_and_follows_torch_autocast(self):
        # --precision fp16 on aten-cuda: torch.autocast("cuda", float16) over each run. A split
        # verifies at fp16's tolerance against the CPU's float32; the whole model's outputs are
        # nearer to torch's own autocast forward on CUDA than that is to float32's.
        model, cut = os.path.join(EXAMPLES, "transformer.onnx"), self.path("split")
        run("split", model, "--profile", os.path.join(EXAMPLES, "profiles", "gpu.json"), "-o", cut, check=True)
        _, out, _ = run("verify", model, cut, "--backend", "aten-cuda", "--precision", "fp16", "--json", check=True)
        summary = json.loads(out)
        self.assertTrue(summary["ok"])
        self.assertEqual(summary["rtol"], 1e-2)
        import torch
        from mixed_precision_test import MODELS  # puts tools/ on the path
        from attention_fusion_test import exported
        module, inputs, path, feeds = exported(*MODELS["gpt2"], self.tmp, "gpt2", False)
        module = module.cuda()
        with torch.no_grad():
            full = module(*(t.cuda() for t in inputs.values())).float().cpu().flatten()
            with torch.autocast("cuda", dtype=torch.float16):
                theirs = module(*(t.cuda() for t in inputs.values())).float().cpu().flatten()
        run("run", path, "--inputs", feeds, "--backend", "aten-cuda", "--precision", "fp16", "--save-outputs",
            self.path("out.json"), check=True)
        with open(self.path("out.json")) as f:
            ours = torch.tensor(next(iter(json.load(f).values()))["data"])
        self.assertGreater((ours - full).abs().max().item(), 0.0)
        self.assertLess((ours - theirs).abs().mean().item(), 0.8 * (theirs - full).abs().mean().item())

    def test_tf32_verifies_at_its_own_tolerance(self):
        model, cut = os.path.join(EXAMPLES, "transformer.onnx"), self.path("split")
        run("split", model, "--profile", os.path.join(EXAMPLES, "profiles", "gpu.json"), "-o", cut, check=True)
        _, out, _ = run("verify", model, cut, "--backend", "aten-cuda", "--tf32", "--json", check=True)
        summary = json.loads(out)
        self.assertTrue(summary["ok"])
        self.assertEqual(summary["rtol"], 1e-2)


if __name__ == "__main__":
    main(SKIP_REASON)
