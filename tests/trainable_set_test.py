"""`cleave train` trains exactly what PyTorch trains: a LLaMA-style decoder (RMSNorm, rotary
embeddings, SwiGLU, a causal mask, the embedding tied to the head) exported with its
cross-entropy loss by the TorchScript exporter (opset 17, constants not folded, a dynamic batch),
its mask and rotary table made two ways: computed in forward (the pipeline folds them into
initializers) and as registered buffers (listed in the model by tools/cleave_onnx.py).

Cut into 2 stages and trained with AdamW (weight decay on) over 4 microbatches, in one process
and on 2 ranks under 1f1b: every initializer torch neither trains nor updates must come back byte
for byte, every parameter must equal torch.optim's, and the trained model's loss on a held-out
batch (ONNX Runtime on trained.onnx) must equal torch's. `cleave train` says what trains and what
it holds fixed, and why; the plan records it."""
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime
import torch
from onnx import numpy_helper

from testlib import SOURCE_DIR, TempDirTest, launch, main, run

sys.path.insert(0, os.path.join(SOURCE_DIR, "tools"))
from cleave_onnx import list_fixed_tensors  # noqa: E402

torch.set_num_threads(1)
VOCAB, WIDTH, HEADS, SEQ = 32, 16, 2, 8
HEAD = WIDTH // HEADS
ROWS, BATCH, STEPS = 16, 8, 3


class RmsNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(WIDTH) + 0.1 * torch.randn(WIDTH))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def rotate(x, cos, sin):
    """Rotary embedding on pairs (x[..., 0::2], x[..., 1::2])."""
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), -1).flatten(-2)


def causal_mask(steps):
    """-1e9 above the diagonal: torch.full + triu, whose export starts at ConstantOfShape."""
    return torch.full((steps, steps), -1e9).triu(1)


def rotary_angles(steps):
    inv_freq = 1.0 / (10000 ** (torch.arange(0, HEAD, 2, dtype=torch.float32) / HEAD))
    return torch.arange(steps, dtype=torch.float32)[:, None] * inv_freq[None, :]


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = RmsNorm(), RmsNorm()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(4))
        self.gate, self.up = torch.nn.Linear(WIDTH, 2 * WIDTH, bias=False), torch.nn.Linear(WIDTH, 2 * WIDTH, bias=False)
        self.down = torch.nn.Linear(2 * WIDTH, WIDTH, bias=False)

    def forward(self, x, mask, cos, sin):
        rows = x.size(0)
        h = self.norm1(x)
        heads = lambda t: t.view(rows, SEQ, HEADS, HEAD).transpose(1, 2)
        q, k, v = heads(self.q(h)), heads(self.k(h)), heads(self.v(h))
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        scores = torch.matmul(q, k.transpose(-1, -2)) / HEAD ** 0.5 + mask
        attended = torch.matmul(scores.softmax(-1), v).transpose(1, 2).reshape(rows, SEQ, WIDTH)
        x = x + self.o(attended)
        h = self.norm2(x)
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


class Decoder(torch.nn.Module):
    """`buffers`: the mask and the rotary table are registered buffers; else computed in forward."""

    def __init__(self, buffers):
        super().__init__()
        self.buffers_given = buffers
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.norm = RmsNorm()
        if buffers:
            self.register_buffer("mask", causal_mask(SEQ))
            angles = rotary_angles(SEQ)
            self.register_buffer("cos", angles.cos())
            self.register_buffer("sin", angles.sin())

    def forward(self, tokens, target):
        if self.buffers_given:
            mask, cos, sin = self.mask, self.cos, self.sin
        else:  # from the sequence's length: the export computes them (shape arithmetic, Range, Trilu)
            mask, angles = causal_mask(tokens.size(1)), rotary_angles(tokens.size(1))
            cos, sin = angles.cos(), angles.sin()
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, mask, cos, sin)
        logits = torch.matmul(self.norm(x), self.embed.weight.t())  # the head is the embedding
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))


def initializers(path):
    model = onnx.load(path)
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


class TrainableSet(TempDirTest):
    def setUp(self):
        super().setUp()
        g = torch.Generator().manual_seed(3)
        self.tokens = torch.randint(0, VOCAB, (ROWS + BATCH, SEQ), generator=g)
        self.target = torch.randint(0, VOCAB, (ROWS + BATCH, SEQ), generator=g)
        np.savez(self.path("data.npz"), tokens=self.tokens[:ROWS].numpy(), target=self.target[:ROWS].numpy())

    def export(self, buffers, listed):
        torch.manual_seed(0)
        module = Decoder(buffers)
        path = self.path(f"decoder_{buffers}_{listed}.onnx")
        torch.onnx.export(module, (self.tokens[:BATCH], self.target[:BATCH]), path, input_names=["tokens", "target"],
                          output_names=["loss"], opset_version=17, do_constant_folding=False, dynamo=False,
                          training=torch.onnx.TrainingMode.TRAINING,
                          dynamic_axes={"tokens": {0: "batch"}, "target": {0: "batch"}})
        if listed:
            list_fixed_tensors(path, module)
        return module, path

    def torch_trained(self, module):
        optimizer = torch.optim.AdamW(module.parameters(), lr=1e-3)
        for step in range(STEPS):
            optimizer.zero_grad()
            index = (torch.arange(BATCH) + step * BATCH) % ROWS
            module(self.tokens[index], self.target[index]).backward()
            optimizer.step()
        return module

    def train(self, plan, model, out, ranks=1):
        command = ["train", plan, "--data", self.path("data.npz"), "--batch", BATCH, "--microbatches", 4, "--steps",
                   STEPS, "--optimizer", "adamw", "--lr", "1e-3", "--model", model, "-o", out]
        if ranks == 1:
            code, stdout, err = run(*command)
        else:
            code, stdout, err = launch(ranks, "cleave", *command, "--schedule", "1f1b")
        self.assertEqual(code, 0, err)
        return stdout

    def check_trained(self, module, model, out):
        """The fixed initializers of every trained stage and of trained.onnx are the exported ones,
        byte for byte; the parameters are torch's; so is the held-out loss."""
        trained_module = self.torch_trained(module)
        before = initializers(model)
        want = {name: p.detach().numpy() for name, p in trained_module.named_parameters()}
        fixed = {name: "buffer" for name, _ in trained_module.named_buffers()}
        whole = initializers(os.path.join(out, "trained.onnx"))
        for name, value in whole.items():
            if name in want:
                np.testing.assert_allclose(value, want[name], rtol=1e-5, atol=4e-5, err_msg=name)
            else:  # neither a parameter nor anything torch updates
                self.assertEqual(value.tobytes(), before[name].tobytes(), name)
        self.assertTrue(set(want) <= set(whole), sorted(set(want) - set(whole)))
        for name in fixed:
            if name in before:
                self.assertEqual(whole[name].tobytes(), before[name].tobytes(), name)
        with open(os.path.join(out, "plan.json")) as f:
            plan_file = json.load(f)
        for sub in plan_file["submodules"]:
            stage = initializers(os.path.join(out, sub["file"]))
            original = initializers(os.path.join(self.path("plan"), sub["file"]))
            for name, value in stage.items():
                if name not in want:
                    self.assertEqual(value.tobytes(), original[name].tobytes(), f"{sub['name']}: {name}")
        session = onnxruntime.InferenceSession(os.path.join(out, "trained.onnx"))
        held_tokens, held_target = self.tokens[ROWS:], self.target[ROWS:]
        got = session.run(["loss"], {"tokens": held_tokens.numpy(), "target": held_target.numpy()})[0]
        with torch.no_grad():
            expected = trained_module(held_tokens, held_target).item()
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=4e-5)

    def pipeline(self, model, *flags):
        plan = self.path("plan")
        code, _, err = run("pipeline", model, "--stages", 2, "--loss", "loss", "-o", plan, "--force", *flags)
        self.assertEqual(code, 0, err)
        with open(os.path.join(plan, "plan.json")) as f:
            entries = json.load(f)["pipeline"]["parameters"]
        return plan, {e["name"]: e.get("fixed", "trains") for e in entries}

    def test_folded_mask_and_rotary_table_stay_fixed(self):
        module, model = self.export(buffers=False, listed=True)
        plan, placed = self.pipeline(model)
        folded = [name for name, why in placed.items() if why == "folded"]
        # The mask and the rotary tables are among the folded values: floating, and the shapes.
        floating = {tuple(v.shape) for name, v in initializers(os.path.join(plan, "stage_0.onnx")).items()
                    if name in folded and v.dtype == np.float32}
        self.assertTrue({(SEQ, SEQ), (SEQ, HEAD // 2)} <= floating, floating)
        trains = [name for name, why in placed.items() if why == "trains"]
        self.assertEqual(sorted(trains), sorted(name for name, _ in module.named_parameters()))
        for ranks in (1, 2):
            out = self.path(f"trained_{ranks}")
            stdout = self.train(plan, model, out, ranks)
            tensors = len(list(module.parameters()))
            self.assertIn(f"trains {tensors} tensor(s)", stdout)
            self.assertIn(f"{len(folded)} folded", stdout)
            self.assertNotIn("lists no buffers", stdout)
            self.check_trained(self.fresh(module), model, out)

    def fresh(self, module):
        """A copy of `module` as exported (before any torch training)."""
        torch.manual_seed(0)
        copy = Decoder(module.buffers_given)
        copy.load_state_dict(module.state_dict())
        return copy

    def test_registered_buffers_stay_fixed(self):
        module, model = self.export(buffers=True, listed=True)
        plan, placed = self.pipeline(model)
        self.assertEqual({name: placed.get(name) for name in ("mask", "cos", "sin")},
                         {"mask": "buffer", "cos": "buffer", "sin": "buffer"})
        out = self.path("trained")
        stdout = self.train(plan, model, out)
        self.assertIn(f"trains {len(list(module.parameters()))} tensor(s)", stdout)
        self.assertIn("3 buffer", stdout)
        self.check_trained(self.fresh(module), model, out)
        # --json gives the same count with the first step.
        code, stdout, err = run("train", model, "--data", self.path("data.npz"), "--batch", BATCH, "--steps", 1,
                                "--json")
        self.assertEqual(code, 0, err)
        first = json.loads(stdout.splitlines()[0])
        self.assertEqual(first["trainable"]["fixed"]["buffer"], 3)
        self.assertEqual(first["trainable"]["rule"], "listed")

    def test_frozen_patterns_hold_a_parameter_as_requires_grad_false_does(self):
        module, model = self.export(buffers=True, listed=True)
        plan, placed = self.pipeline(model, "--frozen", "embed.*")
        self.assertEqual(placed["embed.weight"], "frozen")
        out = self.path("trained")
        stdout = self.train(plan, model, out)
        self.assertIn("1 frozen", stdout)
        reference = self.fresh(module)
        reference.embed.weight.requires_grad_(False)
        self.check_trained(reference, model, out)
        self.assertEqual(initializers(os.path.join(out, "trained.onnx"))["embed.weight"].tobytes(),
                         initializers(model)["embed.weight"].tobytes())
        # --trainable: only what matches trains.
        code, stdout, err = run("train", model, "--data", self.path("data.npz"), "--batch", BATCH, "--steps", 1,
                                "--trainable", "blocks.*", "--json")
        self.assertEqual(code, 0, err)
        blocks = sum(1 for name, _ in module.named_parameters() if name.startswith("blocks."))
        trainable = json.loads(stdout.splitlines()[0])["trainable"]
        self.assertEqual((trainable["trains"], trainable["fixed"]["frozen"]), (blocks, 2))  # embed, norm
        # A pattern that names nothing is an error, and a plan takes its patterns from cleave pipeline.
        code, _, err = run("train", model, "--data", self.path("data.npz"), "--batch", BATCH, "--frozen", "embd.*")
        self.assertOneLineError(code, err, "--frozen 'embd.*'", "matches no floating tensor")
        code, _, err = run("train", plan, "--data", self.path("data.npz"), "--batch", BATCH, "--frozen", "embed.*")
        self.assertEqual(code, 2, err)
        self.assertIn("give them to cleave pipeline", err)

    def test_a_model_that_lists_nothing_is_told_the_default_rule(self):
        _, model = self.export(buffers=True, listed=False)
        code, stdout, err = run("train", model, "--data", self.path("data.npz"), "--batch", BATCH, "--steps", 1)
        self.assertEqual(code, 0, err)
        self.assertIn("the model lists no buffers", stdout)
        code, stdout, err = run("train", model, "--data", self.path("data.npz"), "--batch", BATCH, "--steps", 1,
                                "--json")
        self.assertEqual(json.loads(stdout.splitlines()[0])["trainable"]["rule"], "default")


if __name__ == "__main__":
    main()
