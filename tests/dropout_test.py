"""Dropout in training mode, as `cleave train` runs it: an MLP with two Dropout layers exported
with its cross-entropy loss in training mode (TorchScript exporter, opset 17).

At p=0 the losses equal torch.optim's step for step. At p=0.5, over 50 steps, each 10-step mean of
cleave's losses lies within 4 standard deviations of torch's own runs' means across 8 seeds (a
rule the run without dropout fails). The masks come from (seed, stage, step, microbatch),
so a 2-stage plan trains to the same losses on 1 and 2 ranks and with its stages recomputed in
the backward, and a run resumed from a checkpoint repeats the run that never stopped, byte for
byte; an attention's dropout replayed by `--recompute selective` drops what its forward dropped."""
import json

import numpy as np
import onnx
import torch

from testlib import TempDirTest, launch, main, run

torch.set_num_threads(1)
ROWS, BATCH, LR = 64, 16, 0.3


class Mlp(torch.nn.Module):
    def __init__(self, p):
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(p),
                                          torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Dropout(p),
                                          torch.nn.Linear(32, 4))

    def forward(self, x, target):
        return torch.nn.functional.cross_entropy(self.layers(x), target)


class Attention(torch.nn.Module):
    """Single-head attention with dropout on its probabilities: `--recompute selective` drops
    the scores, softmax and dropout after the forward and replays them in the backward."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.out = (torch.nn.Linear(8, 8) for _ in range(4))
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x, target):
        scores = torch.matmul(self.q(x), self.k(x).transpose(1, 2)) / 8 ** 0.5
        attended = torch.matmul(self.drop(scores.softmax(-1)), self.v(x))
        return torch.nn.functional.mse_loss(self.out(attended), target)


def constants_as_initializers(path):
    """The model with its Constant nodes written as initializers (as other exporters write them)."""
    model = onnx.load(path)
    kept = []
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute[0].name == "value":
            tensor = onnx.TensorProto()
            tensor.CopyFrom(node.attribute[0].t)
            tensor.name = node.output[0]
            model.graph.initializer.append(tensor)
        else:
            kept.append(node)
    del model.graph.node[:]
    model.graph.node.extend(kept)
    onnx.save(model, path)


def step_losses(stdout):
    return [json.loads(line.split("] ", 1)[-1])["loss"] for line in stdout.splitlines()]


class DropoutTraining(TempDirTest):
    def setUp(self):
        super().setUp()
        g = torch.Generator().manual_seed(5)
        self.x = torch.randn(ROWS, 8, generator=g)
        self.target = (self.x[:, :4].argmax(1) + (self.x[:, 4] > 1).long()) % 4  # learnable
        np.savez(self.path("data.npz"), x=self.x.numpy(), target=self.target.numpy())

    def export(self, p):
        torch.manual_seed(0)
        module = Mlp(p).train()
        path = self.path(f"mlp_{p}.onnx")
        torch.onnx.export(module, (self.x[:BATCH], self.target[:BATCH]), path, input_names=["x", "target"],
                          output_names=["loss"], opset_version=17, do_constant_folding=False, dynamo=False,
                          training=torch.onnx.TrainingMode.TRAINING,
                          dynamic_axes={"x": {0: "batch"}, "target": {0: "batch"}})
        return module, path

    def torch_losses(self, module, steps, seed):
        initial = {k: v.clone() for k, v in module.state_dict().items()}
        torch.manual_seed(seed)
        optimizer = torch.optim.SGD(module.parameters(), lr=LR)
        losses = []
        for step in range(steps):
            index = (torch.arange(BATCH) + step * BATCH) % ROWS
            optimizer.zero_grad()
            loss = module(self.x[index], self.target[index])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        module.load_state_dict(initial)
        return losses

    def cleave_losses(self, model, steps, *flags):
        code, stdout, err = run("train", model, "--data", self.path("data.npz"), "--batch", BATCH, "--steps", steps,
                                "--lr", LR, "--json", *flags)
        self.assertEqual(code, 0, err)
        return step_losses(stdout)

    def test_no_drops_at_p_zero(self):
        module, model = self.export(0.0)
        np.testing.assert_allclose(self.cleave_losses(model, 5, "--microbatches", 2), self.torch_losses(module, 5, 0),
                                   rtol=2e-5, atol=1e-6)

    def test_the_loss_curve_stays_within_torchs_spread_across_seeds(self):
        """Each 10-step mean of the losses, as a z-score among torch's 8 seeds' means: within 4 for
        cleave at p=0.5; the same rule tells the run without dropout apart (past 4 somewhere)."""
        module, model = self.export(0.5)
        steps = 50
        ours = np.array(self.cleave_losses(model, steps, "--microbatches", 2, "--seed", 11))
        without = np.array(self.cleave_losses(self.export(0.0)[1], steps, "--microbatches", 2))
        theirs = np.array([self.torch_losses(module, steps, seed) for seed in range(8)])

        def z_scores(losses):
            blocks = range(0, steps, 10)
            seeds = [theirs[:, b:b + 10].mean(axis=1) for b in blocks]
            return [(losses[b:b + 10].mean() - s.mean()) / s.std(ddof=1) for b, s in zip(blocks, seeds)]

        self.assertLess(max(abs(z) for z in z_scores(ours)), 4.0, z_scores(ours))
        self.assertGreater(max(abs(z) for z in z_scores(without)), 4.0, z_scores(without))

    def test_masks_follow_the_stage_not_the_rank_and_survive_a_resume(self):
        _, model = self.export(0.5)
        plan = self.path("plan")
        code, _, err = run("pipeline", model, "--stages", 2, "-o", plan)
        self.assertEqual(code, 0, err)
        common = ["train", plan, "--data", self.path("data.npz"), "--batch", BATCH, "--microbatches", 4, "--lr", LR,
                  "--seed", 3, "--json"]
        code, one, err = run(*common, "--steps", 4)
        self.assertEqual(code, 0, err)
        code, two, err = launch(2, "cleave", *common, "--steps", 4, "--schedule", "1f1b")
        self.assertEqual(code, 0, err)
        self.assertEqual(step_losses(two), step_losses(one))
        # Recomputing a stage in its backward draws the masks its forward drew.
        code, again, err = run(*common, "--steps", 4, "--recompute", "stage")
        self.assertEqual(code, 0, err)
        self.assertEqual(step_losses(again), step_losses(one))
        checkpoints = self.path("checkpoints")
        code, first, err = run(*common, "--steps", 4, "--stop-after", 2, "--checkpoint-dir", checkpoints)
        self.assertEqual(code, 0, err)
        code, rest, err = run(*common, "--steps", 4, "--resume", checkpoints)
        self.assertEqual(code, 0, err)
        self.assertEqual(step_losses(first) + step_losses(rest), step_losses(one))


    def test_a_replayed_segment_draws_what_its_forward_drew(self):
        torch.manual_seed(0)
        x, target = torch.randn(16, 6, 8), torch.randn(16, 6, 8)
        np.savez(self.path("seq.npz"), x=x.numpy(), target=target.numpy())
        model = self.path("attention.onnx")
        torch.onnx.export(Attention().train(), (x[:4], target[:4]), model, input_names=["x", "target"],
                          output_names=["loss"], opset_version=17, do_constant_folding=False, dynamo=False,
                          training=torch.onnx.TrainingMode.TRAINING,
                          dynamic_axes={"x": {0: "batch"}, "target": {0: "batch"}})
        constants_as_initializers(model)  # else each Constant ends the segment before the Dropout
        common = ["train", model, "--data", self.path("seq.npz"), "--batch", 8, "--microbatches", 2, "--steps", 3,
                  "--lr", 0.1, "--seed", 2, "--json"]
        code, plain, err = run(*common, "-o", self.path("plain"))
        self.assertEqual(code, 0, err)
        code, replayed, err = run(*common, "--recompute", "selective", "-o", self.path("replayed"))
        self.assertEqual(code, 0, err)
        self.assertEqual(step_losses(replayed), step_losses(plain))
        with open(self.path("plain/trained.onnx"), "rb") as a, open(self.path("replayed/trained.onnx"), "rb") as b:
            self.assertEqual(a.read(), b.read())


if __name__ == "__main__":
    main()
