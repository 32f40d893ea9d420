"""Pipeline training across ranks against PyTorch's own training (PyTorch 2.11), the
issue-15 proof: four small models exported with their loss (an MLP stack with MSE; a skip
connection across non-adjacent stages; one weight read by the first stage and, transposed, by a
later one; a pre-norm transformer block with cross-entropy) train 3 steps with torch.optim on
the whole batch (SGD with momentum, and AdamW), and as 2- and 4-stage pipeline plans with
`cleave train` in one process and under `cleave launch` on 2 and 4 ranks: the MLP for gpipe, 1f1b,
interleaved (4 stages on 2 ranks) and zero_bubble on both rank counts, and the V schedules zbv and
dualpipev (4 stages on 2 ranks, 8 on 4), the other three on a share
of those (MODEL_RUNS). The batch of 10 rows splits into 4 uneven
microbatches (3, 3, 3, 1: torch.chunk's rule). The MLP is also exported with a static batch
(torch.onnx.export's default), whose plan's value types say 10 rows, and trained on 2 and 3 ranks
under every schedule. Losses and trained parameters agree with torch within torch's own
pipeline tests' tolerances (rtol 1e-5, atol 4e-5); every distributed run gives the single-process
run's losses and trained stage files byte for byte. Replicas of a pipeline (`--pipeline-ranks`,
data x pipeline parallel) follow torch on the whole batch within the same tolerances."""
import json
import math
import os

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from testlib import TempDirTest, launch, main, run

os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)

BATCH, MICROBATCHES, STEPS = 10, 4, 3
RTOL, ATOL = 1e-5, 4e-5  # torch/test/distributed/pipelining's
# (ranks, stages, schedule) per optimizer; AdamW on a subset, every schedule and rank count once.
# The V schedules (zbv, dualpipev: 2 stages per rank, stages r and 2R - 1 - r on rank r) need at
# least 2R microbatches: on 4 ranks the 10 rows run as 10 microbatches of one row.
RUNS = {"sgd": [(2, 2, "gpipe"), (2, 2, "1f1b"), (2, 2, "zero_bubble"), (2, 4, "interleaved"), (4, 4, "gpipe"),
                (4, 4, "1f1b"), (4, 4, "zero_bubble"), (2, 4, "zbv"), (2, 4, "dualpipev"), (4, 8, "dualpipev", 10)],
        "adamw": [(2, 2, "1f1b"), (2, 4, "interleaved"), (4, 4, "zero_bubble"), (4, 8, "zbv", 10)]}
# The other models (a skip, a tied weight, a transformer block) exercise routes and reductions
# rather than schedules: each on 4 ranks under the two schedules that reorder backwards, on 2
# ranks interleaved (stages sharing a rank), and AdamW once.
MODEL_RUNS = {"sgd": [(2, 4, "interleaved"), (4, 4, "1f1b"), (4, 4, "zero_bubble"), (2, 4, "zbv")],
              "adamw": [(2, 2, "1f1b")]}
OPTIMIZERS = {"sgd": (["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"],
                      lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9)),
              "adamw": (["--optimizer", "adamw", "--lr", "0.01"], lambda params: torch.optim.AdamW(params, lr=0.01))}


def mse(prediction, target):
    return ((prediction - target) ** 2).mean()  # aten::mse_loss does not export


class MlpMse(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc0, self.fc1 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 16)
        self.fc2, self.fc3 = torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)

    def forward(self, x, target):
        h = torch.relu(self.fc1(torch.relu(self.fc0(x))))
        return mse(self.fc3(torch.relu(self.fc2(h))), target)


class SkipMse(MlpMse):
    """The first layer's output also feeds the last layer: with 4 stages it skips from stage 0
    over stage 1."""

    def forward(self, x, target):
        h0 = torch.relu(self.fc0(x))
        h2 = torch.relu(self.fc2(torch.tanh(self.fc1(h0))))
        return mse(self.fc3(h2 + h0), target)


class TiedMse(torch.nn.Module):
    """One weight read by the first layer and, transposed, by the last (as tied embeddings are)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Parameter(torch.randn(16, 8) * 0.3)
        self.fc1, self.fc2 = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x, target):
        h = torch.tanh(torch.nn.functional.linear(x, self.embed))
        h = torch.tanh(self.fc2(torch.relu(self.fc1(h))))
        return mse(torch.nn.functional.linear(h, self.embed.t()), target)


class TransformerCe(torch.nn.Module):
    """A pre-norm transformer block over 5 tokens of width 8 (one attention head, an MLP), mean
    pooled into 3 classes, with cross-entropy."""

    def __init__(self):
        super().__init__()
        self.norm0, self.norm1 = torch.nn.LayerNorm(8), torch.nn.LayerNorm(8)
        with torch.no_grad():  # the exporter merges equal initializers: keep the two norms apart
            for p in (*self.norm0.parameters(), *self.norm1.parameters()):
                p.add_(torch.randn_like(p) * 0.1)
        # The key has no bias: softmax over keys ignores it, so its gradient is rounding noise,
        # which AdamW's normalized step turns into a full step in a random direction.
        self.q, self.v, self.o = (torch.nn.Linear(8, 8) for _ in range(3))
        self.k = torch.nn.Linear(8, 8, bias=False)
        self.up, self.down, self.head = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8), torch.nn.Linear(8, 3)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, target):
        h = self.norm0(x)
        scores = torch.matmul(self.q(h), self.k(h).transpose(1, 2)) / math.sqrt(8.0)
        x = x + self.o(torch.matmul(torch.softmax(scores, dim=-1), self.v(h)))
        x = x + self.down(torch.relu(self.up(self.norm1(x))))
        return self.loss(self.head(x.mean(dim=1)), target)


def data_for(name, generator):
    """Rows for STEPS steps: x, and a target of the model's kind."""
    rows = BATCH * STEPS
    if name == "transformer":
        return torch.randn(rows, 5, 8, generator=generator), torch.randint(0, 3, (rows,), generator=generator)
    x = torch.randn(rows, 8, generator=generator)
    return x, torch.randn(rows, 8 if name == "tied" else 4, generator=generator)


class PipelineTrainingMatchesTorch(TempDirTest):
    def torch_reference(self, module, initial, x, target, make_optimizer):
        """Losses per step and trained parameters of torch.optim on the whole batch."""
        module.load_state_dict(initial)
        optimizer = make_optimizer(module.parameters())
        losses = []
        for step in range(STEPS):
            rows = slice(step * BATCH, (step + 1) * BATCH)
            optimizer.zero_grad()
            loss = module(x[rows], target[rows])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses, {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}

    def train_steps(self, ranks, plan, model, flags, out, schedule=None, microbatches=MICROBATCHES):
        """`cleave train PLAN` in one process (ranks 0) or under launch; its steps' JSON lines."""
        command = ["train", plan, "--data", self.path("data.npz"), "--batch", BATCH, "--steps", STEPS,
                   "--microbatches", microbatches, *flags, "--model", model, "-o", out, "--json"]
        if schedule:
            command += ["--schedule", schedule]
        code, stdout, err = launch(ranks, "cleave", *command) if ranks else run(*command)
        self.assertEqual(code, 0, err)
        return [json.loads(line.split("] ", 1)[-1]) for line in stdout.splitlines()]

    def train(self, ranks, plan, model, flags, out, schedule=None, microbatches=MICROBATCHES):
        """Its losses."""
        return [step["loss"] for step in self.train_steps(ranks, plan, model, flags, out, schedule, microbatches)]

    def check_against_torch(self, trained_onnx, want_losses, got_losses, want_weights):
        np.testing.assert_allclose(got_losses, want_losses, rtol=RTOL, atol=ATOL)
        self.assertLess(want_losses[-1], want_losses[0])  # it learns
        trained = {t.name: numpy_helper.to_array(t) for t in onnx.load(trained_onnx).graph.initializer}
        for name, value in want_weights.items():
            np.testing.assert_allclose(trained[name], value, rtol=RTOL, atol=ATOL, err_msg=name)

    def check_model(self, name, make_module, dynamic_batch=True, runs_by_optimizer=None):
        """Exported with a dynamic batch axis, or (dynamic_batch False) with the static batch of
        BATCH rows that torch.onnx.export writes by default, which the microbatches then differ from.
        The module is made after seeding, so its weights do not depend on the tests run before."""
        runs_by_optimizer = runs_by_optimizer or RUNS
        torch.manual_seed(0)
        module = make_module()
        initial = {k: v.clone() for k, v in module.state_dict().items()}
        x, target = data_for(name, torch.Generator().manual_seed(1))
        np.savez(self.path("data.npz"), x=x.numpy(), target=target.numpy())
        model = self.path(f"{name}.onnx")
        torch.onnx.export(module, (x[:BATCH], target[:BATCH]), model, input_names=["x", "target"],
                          output_names=["loss"], opset_version=13, do_constant_folding=False,
                          dynamic_axes={"x": {0: "n"}, "target": {0: "n"}} if dynamic_batch else None, dynamo=False)
        # A run is (ranks, stages, schedule) or (ranks, stages, schedule, microbatches).
        runs_by_optimizer = {kind: [(*r, MICROBATCHES)[:4] for r in runs] for kind, runs in runs_by_optimizer.items()}
        stage_counts = sorted({r[1] for runs in runs_by_optimizer.values() for r in runs})
        plans = {}
        for stages in stage_counts:
            plans[stages] = self.path(f"{name}_plan{stages}")
            run("pipeline", model, "--stages", stages, "-o", plans[stages], check=True)
        for kind, runs in runs_by_optimizer.items():
            flags, make_optimizer = OPTIMIZERS[kind]
            want_losses, want_weights = self.torch_reference(module, initial, x, target, make_optimizer)
            single = {}  # (stages, microbatches) -> (losses, output folder) of one process
            for stages, microbatches in sorted({(r[1], r[3]) for r in runs} | {(n, MICROBATCHES) for n in stage_counts}):
                with self.subTest(model=name, optimizer=kind, stages=stages, ranks=1, microbatches=microbatches):
                    out = self.path(f"{name}_{kind}_{stages}_{microbatches}_single")
                    single[stages, microbatches] = (self.train(0, plans[stages], model, flags, out,
                                                               microbatches=microbatches), out)
                    self.check_against_torch(os.path.join(out, "trained.onnx"), want_losses,
                                             single[stages, microbatches][0], want_weights)
            for ranks, stages, schedule, microbatches in runs:
                with self.subTest(model=name, optimizer=kind, stages=stages, ranks=ranks, schedule=schedule,
                                  microbatches=microbatches):
                    out = self.path(f"{name}_{kind}_{stages}_{ranks}_{schedule}_{microbatches}")
                    losses = self.train(ranks, plans[stages], model, flags, out, schedule, microbatches)
                    want_losses_here, want_dir = single[stages, microbatches]
                    self.assertEqual(losses, want_losses_here)
                    stage_files = sorted(f for f in os.listdir(plans[stages]) if f.endswith(".onnx"))
                    for file in stage_files + ["trained.onnx"]:
                        with open(os.path.join(want_dir, file), "rb") as a, open(os.path.join(out, file), "rb") as b:
                            self.assertEqual(a.read(), b.read(), file)

    def test_an_mlp_stack_with_mse(self):
        self.check_model("mlp", MlpMse)

    def test_an_mlp_exported_with_a_static_batch_on_2_and_3_ranks(self):
        # The plan's value types say 10 rows; the microbatches have 3, 3, 3 and 1 (issue 41).
        # Interleaved needs the microbatches to be a multiple of the ranks: on 3 ranks it runs 6
        # stages over 3 microbatches (4, 4, 2).
        runs = [(2, 2, "gpipe"), (2, 2, "1f1b"), (2, 2, "zero_bubble"), (2, 4, "interleaved"),
                (3, 3, "gpipe"), (3, 3, "1f1b"), (3, 3, "zero_bubble"), (3, 6, "interleaved", 3)]
        self.check_model("mlp", MlpMse, dynamic_batch=False, runs_by_optimizer={"sgd": runs})
        # 10 rows asked for 6 microbatches make 5 (torch.chunk's rule); a schedule for 6 would read
        # a sixth that is not there (it crashed a rank before): refused before connecting.
        code, _, err = run("train", self.path("mlp_plan6"), "--data", self.path("data.npz"), "--batch", BATCH,
                           "--microbatches", 6, "--schedule", "interleaved")
        self.assertOneLineError(code, err, "--schedule interleaved needs --batch 10 to split into 6 microbatches, "
                                "and it makes 5", "take --microbatches 5", exit_code=2)

    def test_a_skip_connection_across_non_adjacent_stages(self):
        self.check_model("skip", SkipMse, runs_by_optimizer=MODEL_RUNS)

    def test_a_weight_tied_between_the_first_and_a_later_stage(self):
        self.check_model("tied", TiedMse, runs_by_optimizer=MODEL_RUNS)

    def export_tied(self):
        """The tied model (made after seeding), its initial state, its data (also data.npz) and its
        export (tied.onnx)."""
        torch.manual_seed(0)
        module = TiedMse()
        initial = {k: v.clone() for k, v in module.state_dict().items()}
        x, target = data_for("tied", torch.Generator().manual_seed(1))
        np.savez(self.path("data.npz"), x=x.numpy(), target=target.numpy())
        model = self.path("tied.onnx")
        torch.onnx.export(module, (x[:BATCH], target[:BATCH]), model, input_names=["x", "target"],
                          output_names=["loss"], opset_version=13, do_constant_folding=False,
                          dynamic_axes={"x": {0: "n"}, "target": {0: "n"}}, dynamo=False)
        return module, initial, x, target, model

    @staticmethod
    def torch_clipped(module, initial, x, target, clip):
        """SGD with momentum and clip_grad_norm_ on the whole batch: norms, losses, final weights."""
        module.load_state_dict(initial)
        optimizer = OPTIMIZERS["sgd"][1](module.parameters())
        norms, losses = [], []
        for step in range(STEPS):
            rows = slice(step * BATCH, (step + 1) * BATCH)
            optimizer.zero_grad()
            loss = module(x[rows], target[rows])
            loss.backward()
            norms.append(torch.nn.utils.clip_grad_norm_(module.parameters(), clip).item())
            optimizer.step()
            losses.append(loss.item())
        return norms, losses, {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}

    def test_clipping_counts_a_tied_weight_once(self):
        # The embedding is held by stages 0 and 3 (on ranks 0 and 1 of 2, and 0 and 3 of 4): the
        # global norm counts it once, as clip_grad_norm_ over module.parameters() does (and as
        # pytorch/pytorch#180952's split backward does not), so norms and weights follow torch.
        clip = 0.05
        module, initial, x, target, model = self.export_tied()
        plan = self.path("tied_plan")
        run("pipeline", model, "--stages", 4, "-o", plan, check=True)
        norms, losses, weights = self.torch_clipped(module, initial, x, target, clip)
        self.assertGreater(min(norms), clip)
        flags = OPTIMIZERS["sgd"][0] + ["--clip-grad-norm", clip]
        for ranks, schedule in [(0, None), (2, "interleaved"), (4, "zero_bubble")]:
            with self.subTest(ranks=ranks, schedule=schedule):
                out = self.path(f"tied_clipped_{ranks}")
                got = self.train_steps(ranks, plan, model, flags, out, schedule)
                np.testing.assert_allclose([g["grad_norm"] for g in got], norms, rtol=RTOL)
                self.check_against_torch(os.path.join(out, "trained.onnx"), losses, [g["loss"] for g in got], weights)

    def test_replicas_of_a_pipeline_train_as_torch_on_the_whole_batch(self):
        # Data x pipeline parallel (issue 46): `--pipeline-ranks P` under launch runs ranks / P
        # replicas of a P-rank pipeline, each on its half of the 10 rows, gradients summed across
        # replicas per stage. The tied model: its embedding is summed across the pipeline's ranks
        # and across the replicas. Losses, clipped norms and weights follow torch on the whole
        # batch; the replicas stay equal byte for byte (their checkpoints are the same bytes).
        clip = 0.05
        module, initial, x, target, model = self.export_tied()
        plans = {n: self.path(f"tied_plan{n}") for n in (2, 4)}
        for stages, plan in plans.items():
            run("pipeline", model, "--stages", stages, "-o", plan, check=True)
        sgd = OPTIMIZERS["sgd"]
        want_losses, want_weights = self.torch_reference(module, initial, x, target, sgd[1])
        norms, clipped_losses, clipped_weights = self.torch_clipped(module, initial, x, target, clip)
        # (world ranks, pipeline ranks, stages, schedule, microbatches per replica, clipping)
        runs = [(4, 2, 4, "interleaved", 2, False), (4, 2, 2, "zero_bubble", 2, True), (2, 1, 2, None, 1, False)]
        for ranks, pipeline_ranks, stages, schedule, microbatches, clipping in runs:
            with self.subTest(ranks=ranks, pipeline_ranks=pipeline_ranks, schedule=schedule):
                out, checkpoints = self.path(f"dp_{ranks}_{pipeline_ranks}_{stages}"), self.path(f"ck_{ranks}_{stages}")
                flags = [*sgd[0], "--pipeline-ranks", pipeline_ranks, "--checkpoint-dir", checkpoints]
                flags += ["--clip-grad-norm", clip] if clipping else []
                got = self.train_steps(ranks, plans[stages], model, flags, out, schedule, microbatches)
                if clipping:
                    np.testing.assert_allclose([g["grad_norm"] for g in got], norms, rtol=RTOL)
                self.check_against_torch(os.path.join(out, "trained.onnx"), clipped_losses if clipping else want_losses,
                                         [g["loss"] for g in got], clipped_weights if clipping else want_weights)
                folder = os.path.join(checkpoints, f"step-{STEPS:08d}")
                for rank in range(pipeline_ranks, ranks):  # each replica's rank against the first's
                    with open(os.path.join(folder, f"rank-{rank % pipeline_ranks}.npz"), "rb") as first, \
                            open(os.path.join(folder, f"rank-{rank}.npz"), "rb") as replica:
                        self.assertEqual(first.read(), replica.read(), f"rank {rank}")
        # Bad layouts are refused on every rank before any connects.
        for ranks, plan, flags, message in [
                (4, plans[2], ["--pipeline-ranks", 3], "usage error: --pipeline-ranks 3 does not divide the 4 rank(s)"),
                (4, plans[2], ["--pipeline-ranks", 1], "usage error: --batch 10 does not split into 4 equal shares")]:
            code, _, err = launch(ranks, "cleave", "train", plan, "--data", self.path("data.npz"), "--batch", BATCH,
                                  "--steps", STEPS + 1, *flags)
            self.assertNotEqual(code, 0, err)
            self.assertIn(message, err)

    def test_a_transformer_block_with_cross_entropy(self):
        self.check_model("transformer", TransformerCe, runs_by_optimizer=MODEL_RUNS)


if __name__ == "__main__":
    main()
