"""Both of PyTorch 2.x's ONNX exporters, on the models users bring (issue 61, the default run's slice):
torch.onnx.export's default since 2.9, the torch.export-based one (dynamo=True: IR 10, opset 20,
Gelu whole, shape arithmetic from graph inputs), and the TorchScript one (dynamo=False), each with
a static batch and a dynamic one. For every export: cleave runs it equal to ONNX Runtime (PyPI's);
split with examples/profiles/gpu.json makes no more submodules than the TorchScript export of the
same model after folding; a 4-stage pipeline plan verifies against the whole model.

usage: exporters_test.py CLEAVE
"""
import json
import os
import tempfile
import unittest
import warnings

import numpy as np
import onnx
import onnxruntime
import torch

from testlib import EXAMPLES, main, run

GPU_PROFILE = os.path.join(EXAMPLES, "profiles", "gpu.json")


class Block(torch.nn.Module):
    """A pre-norm transformer block: LayerNorm, multi-head attention, a GELU MLP."""

    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(32), torch.nn.LayerNorm(32)
        self.attn = torch.nn.MultiheadAttention(32, 4, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1))
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


MODELS = {"block": (Block, (2, 8, 32)), "cnn": (Cnn, (2, 3, 16, 16))}


def export(name, dynamo, dynamic, path):
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = make().eval()
    example = torch.randn(*shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        if dynamo:
            shapes = {"x": {0: torch.export.Dim("batch", min=1, max=64)}} if dynamic else None
            torch.onnx.export(model, (example,), path, dynamo=True, input_names=["x"], dynamic_shapes=shapes)
        else:
            axes = {"x": {0: "batch"}} if dynamic else None
            torch.onnx.export(model, (example,), path, dynamo=False, opset_version=18, input_names=["x"],
                              dynamic_axes=axes)
    return shape


def torch_losses(module, optimizer, x, target, rows, steps):
    """torch.optim's losses: `steps` steps of `module(x, target)` on the next `rows` rows each."""
    losses = []
    for step in range(steps):
        optimizer.zero_grad()
        loss = module(x[step * rows:(step + 1) * rows], target[step * rows:(step + 1) * rows])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


class Exporters(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = cls.tmp.name

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, name, dynamic):
        submodules = {}
        for dynamo in (True, False):
            way = f"{name}_{'dynamo' if dynamo else 'torchscript'}_{'dynamic' if dynamic else 'static'}"
            path = os.path.join(self.dir, way + ".onnx")
            shape = export(name, dynamo, dynamic, path)
            if dynamo:
                model = onnx.load(path)
                self.assertGreaterEqual(model.opset_import[0].version, 18, way)
                self.assertEqual(model.ir_version, 10, way)
            # A batch other than the exported one where the batch is dynamic.
            rows = 3 if dynamic else shape[0]
            x = np.random.default_rng(1).standard_normal((rows, *shape[1:])).astype(np.float32)
            inputs = os.path.join(self.dir, way + ".npz")
            np.savez(inputs, x=x)
            outputs = os.path.join(self.dir, way + ".out.npz")
            code, _, err = run("run", path, "--inputs", inputs, "--save-outputs", outputs)
            self.assertEqual(code, 0, f"{way}: {err}")
            session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
            want = session.run(None, {"x": x})[0]
            found = np.load(outputs)
            np.testing.assert_allclose(found[session.get_outputs()[0].name], want, rtol=1e-4, atol=1e-5, err_msg=way)
            cut = os.path.join(self.dir, way + "_cut")
            code, _, err = run("split", path, "--profile", GPU_PROFILE, "-o", cut)
            self.assertEqual(code, 0, f"{way}: {err}")
            with open(os.path.join(cut, "plan.json")) as plan:
                submodules[dynamo] = len(json.load(plan)["submodules"])
            stages = os.path.join(self.dir, way + "_stages")
            code, _, err = run("pipeline", path, "--stages", "4", "-o", stages)
            self.assertEqual(code, 0, f"{way}: {err}")
            code, _, err = run("verify", path, stages, "--inputs", inputs)
            self.assertEqual(code, 0, f"{way}: {err}")
        self.assertLessEqual(submodules[True], submodules[False],
                             f"{name}: the dynamo export splits into more submodules than the TorchScript one")

    def test_transformer_block_static(self):
        self.check("block", dynamic=False)

    def test_transformer_block_dynamic_batch(self):
        self.check("block", dynamic=True)

    def test_cnn_static(self):
        self.check("cnn", dynamic=False)

    def test_cnn_dynamic_batch(self):
        self.check("cnn", dynamic=True)

    def test_a_loss_exported_by_dynamo_trains_as_torch_optim(self):
        """An MLP with its cross-entropy, exported by the dynamo exporter with a dynamic batch: 4
        steps of SGD with momentum over 2 microbatches, losses equal to torch.optim's."""

        class MlpLoss(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1, self.fc2 = torch.nn.Linear(6, 16), torch.nn.Linear(16, 4)

            def forward(self, x, target):
                return torch.nn.functional.cross_entropy(self.fc2(torch.tanh(self.fc1(x))), target)

        torch.manual_seed(0)
        module = MlpLoss()
        initial = {k: v.clone() for k, v in module.state_dict().items()}
        path = os.path.join(self.dir, "mlp_loss_dynamo.onnx")
        batch = torch.export.Dim("batch", min=2, max=64)
        torch.onnx.export(module, (torch.randn(8, 6), torch.zeros(8, dtype=torch.long)), path, dynamo=True,
                          input_names=["x", "target"], output_names=["loss"],
                          dynamic_shapes={"x": {0: batch}, "target": {0: batch}})
        g = torch.Generator().manual_seed(1)
        x, target = torch.randn(32, 6, generator=g), torch.randint(0, 4, (32,), generator=g)
        data = os.path.join(self.dir, "mlp_data.npz")
        np.savez(data, x=x.numpy(), target=target.numpy())
        code, out, err = run("train", path, "--data", data, "--batch", 8, "--steps", 4, "--microbatches", 2,
                             "--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9", "-o",
                             os.path.join(self.dir, "mlp_trained"), "--json")
        self.assertEqual(code, 0, err)
        losses = [json.loads(line)["loss"] for line in out.splitlines()]
        module.load_state_dict(initial)
        want = torch_losses(module, torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9), x, target, 8, 4)
        np.testing.assert_allclose(losses, want, rtol=2e-5, atol=1e-6)

    def test_what_a_dynamo_export_trains_is_what_its_program_signature_says(self):
        """torch.onnx's dynamo exporter notes the program's signature on each initializer: a
        registered buffer (a decoder's causal mask) is held fixed with no list beside the export.
        Unoptimized (optimize=False), the initializers are exactly the module's parameters and
        buffers; optimized (the default), onnxscript's folds of constants (the rotary tables a
        forward makes) are held fixed too, and `cleave train` says the export was optimized."""

        class Decoder(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.embed, self.head = torch.nn.Embedding(50, 16), torch.nn.Linear(16, 50)
                self.register_buffer("mask", torch.full((8, 8), -1e9).triu(1))

            def forward(self, ids, target):
                x = self.embed(ids)
                angles = torch.arange(8, dtype=torch.float32)[:, None] * torch.arange(1, 17, dtype=torch.float32)
                x = x * angles.cos() + torch.softmax(x @ x.transpose(1, 2) + self.mask, -1) @ x
                return torch.nn.functional.cross_entropy(self.head(x).reshape(-1, 50), target.reshape(-1))

        torch.manual_seed(0)
        module = Decoder()
        g = torch.Generator().manual_seed(1)
        ids, target = torch.randint(0, 50, (4, 8), generator=g), torch.randint(0, 50, (4, 8), generator=g)
        data = os.path.join(self.dir, "decoder_data.npz")
        np.savez(data, ids=ids.numpy(), target=target.numpy())
        trainable = {}
        for optimize in (False, True):
            path = os.path.join(self.dir, f"decoder_optimize_{optimize}.onnx")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(module, (ids, target), path, dynamo=True, optimize=optimize,
                                  input_names=["ids", "target"])
            code, out, err = run("train", path, "--data", data, "--batch", 4, "--steps", 1, "--json")
            self.assertEqual(code, 0, err)
            trainable[optimize] = json.loads(out.splitlines()[0])["trainable"]
            if optimize:  # the line that says so
                code, out, err = run("train", path, "--data", data, "--batch", 4, "--steps", 1)
                self.assertEqual(code, 0, err)
                self.assertIn("optimize=False", out)
        plain = trainable[False]
        self.assertEqual(plain["trains"], 3, plain)  # embed.weight, head.weight, head.bias
        self.assertEqual(plain["fixed"].get("buffer"), 1, plain)  # the mask
        self.assertEqual(plain["rule"], "listed", plain)
        self.assertEqual(plain["exporter_folds"], 0, plain)
        optimized = trainable[True]
        self.assertGreater(optimized["exporter_folds"], 0, optimized)
        self.assertGreater(optimized["fixed"].get("folded", 0), 0, optimized)  # the cos table, at least

    def test_attention_that_torch_writes_at_opset_23_runs_and_trains_as_torch(self):
        """At opset 23 torch's exporter writes scaled_dot_product_attention as one Attention node
        (grouped-query heads, causal): cleave runs it as one kernel, equal to ONNX Runtime, and
        trains through it with losses equal to torch.optim's."""

        class CausalGqa(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.q, self.kv = torch.nn.Linear(32, 32), torch.nn.Linear(32, 16)
                self.out = torch.nn.Linear(32, 10)

            def forward(self, x, target):
                rows, steps, _ = x.shape
                q = self.q(x).reshape(rows, steps, 4, 8).transpose(1, 2)
                k, v = self.kv(x).reshape(rows, steps, 2, 2, 4).permute(2, 0, 3, 1, 4).repeat_interleave(2, -1)
                y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                logits = self.out(y.transpose(1, 2).reshape(rows, steps, 32))
                return torch.nn.functional.cross_entropy(logits.reshape(-1, 10), target.reshape(-1))

        torch.manual_seed(0)
        module = CausalGqa()
        initial = {k: v.clone() for k, v in module.state_dict().items()}
        g = torch.Generator().manual_seed(2)
        x, target = torch.randn(12, 6, 32, generator=g), torch.randint(0, 10, (12, 6), generator=g)
        path = os.path.join(self.dir, "attention23.onnx")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, (x[:4], target[:4]), path, dynamo=True, opset_version=23, optimize=False,
                              input_names=["x", "target"], output_names=["loss"])
        self.assertIn("Attention", {n.op_type for n in onnx.load(path).graph.node})
        data = os.path.join(self.dir, "attention23.npz")
        np.savez(data, x=x.numpy(), target=target.numpy())
        first = os.path.join(self.dir, "attention23_first.npz")
        np.savez(first, x=x[:4].numpy(), target=target[:4].numpy())
        outputs = os.path.join(self.dir, "attention23_out.npz")
        code, _, err = run("run", path, "--inputs", first, "--save-outputs", outputs)
        self.assertEqual(code, 0, err)
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        want = session.run(None, {"x": x[:4].numpy(), "target": target[:4].numpy()})[0]
        np.testing.assert_allclose(np.load(outputs)["loss"], want, rtol=1e-5)
        code, out, err = run("train", path, "--data", data, "--batch", 4, "--steps", 3, "--optimizer", "adamw",
                             "--lr", "0.01", "--json")
        self.assertEqual(code, 0, err)
        losses = [json.loads(line)["loss"] for line in out.splitlines()]
        module.load_state_dict(initial)
        expected = torch_losses(module, torch.optim.AdamW(module.parameters(), lr=0.01), x, target, 4, 3)
        np.testing.assert_allclose(losses, expected, rtol=2e-5, atol=1e-6)


if __name__ == "__main__":
    main()
