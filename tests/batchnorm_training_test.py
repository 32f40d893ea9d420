"""BatchNorm in training, as `cleave train` runs it: a CNN with two BatchNorm2d layers and a
BatchNorm1d, exported with its cross-entropy loss in training mode (TorchScript exporter, opset 17,
dynamic batch), against torch.optim on the same rows.

After training, every parameter and every running mean and variance equals torch's (rtol 1e-5,
atol 4e-5): the statistics update as torch's BatchNorm updates them (momentum, the batch's unbiased
variance), once per microbatch's forward, on one rank or a 2-stage pipeline on 2 ranks, and not
again when `--recompute stage` runs a stage's forward a second time. A run resumed from a
checkpoint ends byte-equal to the run that never stopped (checkpoints hold the statistics). The
trained model's loss on held-out rows (ONNX Runtime, in eval mode as torch's) equals torch's, and so
does `--eval-data`'s held-out loss, which leaves the statistics (and the trained model) untouched.
A model exported in eval mode keeps its statistics byte for byte."""
import json
import os

import numpy as np
import onnx
import onnxruntime
import torch
from onnx import numpy_helper

from testlib import TempDirTest, launch, main, run

torch.set_num_threads(1)
ROWS, BATCH, MICROBATCHES, STEPS, LR = 48, 12, 2, 4, 0.2


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.norm1 = torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.BatchNorm2d(6)
        self.conv2, self.norm2 = torch.nn.Conv2d(6, 8, 3, padding=1), torch.nn.BatchNorm2d(8, momentum=0.3)
        self.fc, self.norm3, self.head = torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 4)

    def forward(self, x, target):
        h = torch.relu(self.norm1(self.conv1(x)))
        h = torch.relu(self.norm2(self.conv2(h))).mean((2, 3))
        return torch.nn.functional.cross_entropy(self.head(torch.relu(self.norm3(self.fc(h)))), target)


def initializers(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def statistics(module):
    return {name: buffer for name, buffer in module.state_dict().items() if "running_" in name}


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


class BatchNormTraining(TempDirTest):
    def setUp(self):
        super().setUp()
        g = torch.Generator().manual_seed(7)
        self.x = torch.randn(ROWS + BATCH, 3, 6, 6, generator=g) * 2 + 0.5  # statistics far from 0 and 1
        self.target = (self.x[:, 0].mean((1, 2)) > 0.5).long() + 2 * (self.x[:, 1].mean((1, 2)) > 0.5).long()
        np.savez(self.path("data.npz"), x=self.x[:ROWS].numpy(), target=self.target[:ROWS].numpy())
        torch.manual_seed(0)
        self.module = Cnn().train()
        self.model = self.path("cnn.onnx")
        self.export(self.model, torch.onnx.TrainingMode.TRAINING)

    def export(self, path, mode):
        torch.onnx.export(self.module, (self.x[:BATCH], self.target[:BATCH]), path, input_names=["x", "target"],
                          output_names=["loss"], opset_version=17, do_constant_folding=False, dynamo=False,
                          training=mode, dynamic_axes={"x": {0: "batch"}, "target": {0: "batch"}})
        self.module.train()

    def torch_trained(self):
        """A copy of the module after STEPS steps of SGD, each over MICROBATCHES forwards."""
        module = Cnn()
        module.load_state_dict(self.module.state_dict())
        module.train()
        optimizer = torch.optim.SGD(module.parameters(), lr=LR)
        rows = BATCH // MICROBATCHES
        for step in range(STEPS):
            index = (torch.arange(BATCH) + step * BATCH) % ROWS
            optimizer.zero_grad()
            for m in range(MICROBATCHES):
                part = index[m * rows:(m + 1) * rows]
                (module(self.x[part], self.target[part]) / MICROBATCHES).backward()
            optimizer.step()
        return module

    def train(self, target, out, *flags, ranks=1):
        args = ["train", target, "--data", self.path("data.npz"), "--batch", BATCH, "--microbatches", MICROBATCHES,
                "--steps", STEPS, "--lr", LR, "-o", out, "--json", *flags]
        code, stdout, err = launch(ranks, "cleave", *args) if ranks > 1 else run(*args)
        self.assertEqual(code, 0, err)
        return stdout

    def assert_equals_torch(self, trained_path, module):
        trained = initializers(trained_path)
        expected = {name: tensor.numpy() for name, tensor in module.state_dict().items() if name in trained}
        self.assertEqual(len(expected), 20, sorted(trained))  # every weight, bias, running mean and variance
        before = initializers(self.model)
        for name, value in expected.items():
            np.testing.assert_allclose(trained[name], value, rtol=1e-5, atol=4e-5, err_msg=name)
            if "running_" in name:  # they moved: the test would fail if they stayed
                self.assertGreater(np.abs(trained[name] - before[name]).max(), 1e-2, name)

    def test_the_statistics_update_as_torchs_on_one_rank_and_in_a_pipeline(self):
        module = self.torch_trained()
        stdout = self.train(self.model, self.path("one"))
        self.assertIn('"updated":6', stdout.replace(" ", ""))
        self.assert_equals_torch(self.path("one/trained.onnx"), module)

        plan = self.path("plan")
        code, _, err = run("pipeline", self.model, "--stages", 2, "--loss", "loss", "-o", plan)
        self.assertEqual(code, 0, err)
        self.train(plan, self.path("two"), "--model", self.model, "--schedule", "1f1b", ranks=2)
        self.assert_equals_torch(self.path("two/trained.onnx"), module)
        self.train(plan, self.path("recomputed"), "--model", self.model, "--recompute", "stage")
        self.assert_equals_torch(self.path("recomputed/trained.onnx"), module)

        # The trained model's loss on held-out rows, in eval mode (the running statistics), as torch's.
        held_x, held_target = self.x[ROWS:], self.target[ROWS:]
        self.module.load_state_dict(module.state_dict())
        eval_model = self.path("eval.onnx")
        self.export(eval_model, torch.onnx.TrainingMode.EVAL)
        with torch.no_grad():
            want = module.eval()(held_x, held_target).item()
        trained = initializers(self.path("two/trained.onnx"))
        evaluated = onnx.load(eval_model)
        for tensor in evaluated.graph.initializer:
            if tensor.name in trained:
                tensor.CopyFrom(numpy_helper.from_array(trained[tensor.name], tensor.name))
        session = onnxruntime.InferenceSession(evaluated.SerializeToString())
        got = session.run(["loss"], {"x": held_x.numpy(), "target": held_target.numpy()})[0]
        self.assertAlmostEqual(float(got), want, places=5)

    def test_the_held_out_loss_is_eval_modes_and_changes_nothing(self):
        # --eval-data runs the forward as torch's model.eval() under no_grad: the running statistics
        # normalize and stay as they are, so the trained model is the same byte for byte.
        np.savez(self.path("held.npz"), x=self.x[ROWS:].numpy(), target=self.target[ROWS:].numpy())
        module = self.torch_trained()
        with torch.no_grad():
            want = module.eval()(self.x[ROWS:], self.target[ROWS:]).item()
        self.train(self.model, self.path("plain"))
        evaluated = "--eval-data", self.path("held.npz"), "--eval-every", 2, "--eval-batches", 1
        lines = [json.loads(line) for line in self.train(self.model, self.path("one"), *evaluated).splitlines()]
        self.assertEqual([("eval_loss" in line) for line in lines], [False, True, False, True])
        self.assertAlmostEqual(lines[-1]["eval_loss"], want, delta=1e-5 * abs(want))
        self.assertEqual(read_bytes(self.path("one/trained.onnx")), read_bytes(self.path("plain/trained.onnx")))
        plan = self.path("plan")
        code, _, err = run("pipeline", self.model, "--stages", 2, "--loss", "loss", "-o", plan)
        self.assertEqual(code, 0, err)
        stdout = self.train(plan, self.path("two"), "--model", self.model, "--schedule", "1f1b", *evaluated, ranks=2)
        last = json.loads(stdout.splitlines()[-1].split("] ", 1)[-1])
        self.assertAlmostEqual(last["eval_loss"], want, delta=1e-5 * abs(want))
        self.assert_equals_torch(self.path("two/trained.onnx"), module)

    def test_a_resumed_run_ends_where_the_unbroken_one_does(self):
        self.train(self.model, self.path("unbroken"))
        checkpoints = self.path("checkpoints")
        self.train(self.model, self.path("first"), "--stop-after", 2, "--checkpoint-dir", checkpoints)
        self.train(self.model, self.path("resumed"), "--resume", checkpoints)
        with open(self.path("unbroken/trained.onnx"), "rb") as a, open(self.path("resumed/trained.onnx"), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_an_eval_mode_export_keeps_its_statistics(self):
        eval_model = self.path("eval.onnx")
        self.export(eval_model, torch.onnx.TrainingMode.EVAL)
        stdout = self.train(eval_model, self.path("eval"))
        self.assertIn('"updated":0', stdout.replace(" ", ""))
        before, after = initializers(eval_model), initializers(self.path("eval/trained.onnx"))
        means = [name for name in before if "running_" in name]
        self.assertEqual(len(means), 6)
        for name in means:
            self.assertEqual(after[name].tobytes(), before[name].tobytes(), name)


if __name__ == "__main__":
    main()
