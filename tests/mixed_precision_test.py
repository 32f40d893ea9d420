"""Mixed precision (`--precision fp16|bf16`, runtime/engine/optimizations.h) is torch.autocast on the
run's device: the zoo's GPT-2- and LLaMA-style decoders and a small convolutional network, each
exported with the TorchScript exporter and torch 2.x's default (dynamo) exporter, run under
`cleave run --precision bf16` (and fp16) on the CPU. Each output comes back in float32, differs
from the float32 run (the products did run in the half type), equals torch's own forward under
torch.autocast("cpu", dtype) bit for bit in most elements (in all of them for the convolutional
network, whose BatchNorm both sides fold first), and is nearer to it on average than that forward
is to float32's. `cleave verify
--precision` holds a cut to its precision's tolerance; the flag's misuses are one-line errors."""
import json
import os
import sys

import torch
from torch import nn

from testlib import SOURCE_DIR, TempDirTest, main, run

sys.path.insert(0, os.path.join(SOURCE_DIR, "tools"))
from export_zoo import Gpt2, LlamaDecoder  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from attention_fusion_test import exported, largest_error, token_inputs  # noqa: E402

HALF_TYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class SmallConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                      nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(32, 10)

    def forward(self, image):
        return self.head(self.features(image))

    def folded(self):
        """The same network with its BatchNorm folded into the convolution before it, in float32
        (torch.nn.utils.fuse_conv_bn_eval), as cleave folds it when it loads the model."""
        conv = torch.nn.utils.fuse_conv_bn_eval(self.features[0], self.features[1])
        features = nn.Sequential(conv, *list(self.features)[2:])
        return lambda image: self.head(features(image))


def image_inputs():
    return {"image": torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(7))}


# name: (the module, its inputs)
MODELS = {
    "gpt2": (lambda: Gpt2(vocab=200, context=16, dim=64, heads=4, layers=2), token_inputs(200, 12)),
    "llama": (lambda: LlamaDecoder(vocab=200, dim=64, heads=4, layers=2, hidden=128), token_inputs(200, 12)),
    "convnet": (SmallConvNet, image_inputs),
}


def flat(tensor):
    return tensor.detach().float().flatten().tolist()


class MixedPrecision(TempDirTest):
    def exported(self, name, dynamo):
        """(model path, inputs path, float32 outputs, {precision: torch.autocast's outputs})."""
        module, inputs, model, feeds = exported(*MODELS[name], self.tmp, name, dynamo)
        # What cleave computes: the module as loaded (a convolution's BatchNorm folded into it).
        computed = module.folded() if hasattr(module, "folded") else module
        with torch.no_grad():
            full = module(*inputs.values())
            autocast = {}
            for precision, half in HALF_TYPES.items():
                with torch.autocast("cpu", dtype=half):
                    autocast[precision] = computed(*inputs.values())
        return model, feeds, full, autocast

    def run_saved(self, model, feeds, *flags):
        saved = self.path("outputs.json")
        code, _, err = run("run", model, "--inputs", feeds, "--save-outputs", saved, *flags)
        self.assertEqual(code, 0, err)
        with open(saved) as f:
            outputs = json.load(f)
        self.assertEqual(len(outputs), 1)
        return next(iter(outputs.values()))

    def test_every_export_computes_as_torch_autocast(self):
        for name in MODELS:
            for dynamo in (False, True):
                model, feeds, full, autocast = self.exported(name, dynamo)
                for precision in HALF_TYPES:
                    with self.subTest(model=name, exporter="dynamo" if dynamo else "torchscript", precision=precision):
                        got = self.run_saved(model, feeds, "--precision", precision)
                        self.assertEqual(got["dtype"], "float32")
                        self.assertEqual(got["dims"], list(full.shape))
                        ours = torch.tensor(got["data"])
                        scale = full.abs().max().item()
                        # The half type ran: not float32's result, though within the precision's reach.
                        self.assertGreater(largest_error(flat(full), got["data"]), 1e-6)
                        self.assertLess(largest_error(flat(full), got["data"]), 0.05)
                        # As torch's autocast forward: most outputs equal to it bit for bit, and on average
                        # nearer to it than it is to float32 (a float32 run would be exactly as far, one
                        # all in the half type farther). They part where cleave computes in one call what
                        # the export spells in steps that torch rounds one by one (GELU's tanh form).
                        theirs = autocast[precision].float().flatten()
                        ours_off = (ours - theirs).abs().mean().item() / scale
                        theirs_off = (theirs - full.flatten()).abs().mean().item() / scale
                        self.assertLess(ours_off, 0.8 * theirs_off)
                        self.assertGreater((ours == theirs).float().mean().item(), 0.4)
                        if name == "convnet": # no op the export splits: torch's autocast forward bit for bit
                            self.assertTrue(torch.equal(ours, theirs))

    def test_verify_holds_a_cut_to_its_precisions_tolerance(self):
        model, feeds, _, _ = self.exported("gpt2", False)
        code, _, err = run("pipeline", model, "--stages", 2, "-o", self.path("cut"))
        self.assertEqual(code, 0, err)
        for precision, rtol in (("bf16", 0.05), ("fp16", 0.01)):
            with self.subTest(precision=precision):
                code, out, err = run("verify", model, self.path("cut"), "--inputs", feeds, "--precision", precision,
                                     "--json")
                self.assertEqual(code, 0, err)
                summary = json.loads(out)
                self.assertTrue(summary["ok"])
                self.assertEqual(summary["rtol"], rtol)
                worst = max(o["max_scaled"] for o in summary["outputs"].values())
                self.assertGreater(worst, 1e-6) # compared against the CPU's float32 original
        # The same cut at float32 agrees far closer.
        code, out, err = run("verify", model, self.path("cut"), "--inputs", feeds, "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["rtol"], 1e-4)

    def test_host_and_device_apart_copy_nothing_and_record(self):
        # Mixed precision as a GPU runs it (aten-cpu-as-gpu): half weights held on the device from the
        # load, autocast's casts made there, so a second run copies nothing and the run records.
        model, feeds, _, _ = self.exported("gpt2", True)
        code, out, err = run("run", model, "--inputs", feeds, "--backend", "aten-cpu-as-gpu", "--precision", "fp16",
                             "--repeat", 2, "--profile", "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["host_device_copies_by_value"], {})
        code, out, err = run("run", model, "--inputs", feeds, "--backend", "aten-cpu-as-gpu", "--precision", "fp16",
                             "--graph-replay", "--repeat", 2, "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["graph_replay"], {"recorded": 1, "refused": 0})

    def test_misuse_is_a_one_line_usage_error(self):
        model, feeds, _, _ = self.exported("convnet", False)
        code, _, err = run("run", model, "--inputs", feeds, "--precision", "bf16", "--backend", "aten-cpu-bf16")
        self.assertOneLineError(code, err, "aten-cpu-bf16", "--precision bf16", exit_code=2)
        code, _, err = run("run", model, "--precision", "fp8")
        self.assertOneLineError(code, err, "precision", "fp16", exit_code=2)
        code, _, err = run("train", model, "--precision", "fp16")
        self.assertOneLineError(code, err, "precision", "bf16", exit_code=2)


if __name__ == "__main__":
    main()
