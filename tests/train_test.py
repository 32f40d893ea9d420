"""`cleave train` against PyTorch's own training (PyTorch 2.11): an MLP exported with its
CrossEntropy loss (the seeds' LossWrapper: targets are an input) is trained by cleave and by
torch.optim on the same rows; the per-step losses and the trained weights (read back from
trained.onnx) must agree within float rounding, for SGD with momentum and weight decay over
uneven microbatches, and for AdamW."""
import json
import os

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from testlib import TempDirTest, free_port, launch, main, run

torch.set_num_threads(1)


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 16)
        self.fc2 = torch.nn.Linear(16, 16)
        self.fc3 = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = torch.tanh(self.fc2(h)) + h
        return self.fc3(h)


class LossWrapper(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, target):
        return self.loss(self.model(x), target)


def rows(data, step, batch):
    index = (torch.arange(batch) + step * batch) % data.shape[0]
    return data[index]


def torch_scheduler(optimizer, kind, warmup, steps):
    """torch.optim.lr_scheduler's form of `--lr-schedule KIND --warmup N` (runtime/training/lr_schedule.h)."""
    schedulers = torch.optim.lr_scheduler
    decay_steps = max(steps - warmup, 1)
    decay = {"constant": lambda: schedulers.ConstantLR(optimizer, factor=1.0, total_iters=0),
             "linear": lambda: schedulers.LinearLR(optimizer, 1.0, 0.0, total_iters=decay_steps),
             "cosine": lambda: schedulers.CosineAnnealingLR(optimizer, T_max=decay_steps)}[kind]
    if not warmup:
        return decay()
    warm = schedulers.LinearLR(optimizer, start_factor=1 / (warmup + 1), end_factor=1.0, total_iters=warmup)
    return schedulers.SequentialLR(optimizer, [warm, decay()], milestones=[warmup])


class Train(TempDirTest):
    def setUp(self):
        super().setUp()
        torch.manual_seed(0)
        self.wrapper = LossWrapper(Mlp())
        self.initial = {k: v.clone() for k, v in self.wrapper.state_dict().items()}
        self.model = self.path("mlp_loss.onnx")
        torch.onnx.export(self.wrapper, (torch.randn(8, 6), torch.zeros(8, dtype=torch.long)), self.model,
                          input_names=["x", "target"], output_names=["loss"], opset_version=13,
                          do_constant_folding=False, dynamic_axes={"x": {0: "n"}, "target": {0: "n"}}, dynamo=False)
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(20, 6, generator=g)
        self.target = torch.randint(0, 4, (20,), generator=g)
        np.savez(self.path("data.npz"), x=self.x.numpy(), target=self.target.numpy())

    def reference(self, make_optimizer, steps, batch, schedule=None, clip=None):
        """torch's losses and trained weights; with `schedule` (kind, warmup) and `clip` also each
        step's rate and gradient norm (clip_grad_norm_'s return value)."""
        self.wrapper.load_state_dict(self.initial)
        optimizer = make_optimizer(self.wrapper.parameters())
        scheduler = torch_scheduler(optimizer, *schedule, steps) if schedule else None
        losses, rates, norms = [], [], []
        for step in range(steps):
            optimizer.zero_grad()
            loss = self.wrapper(rows(self.x, step, batch), rows(self.target, step, batch))
            loss.backward()
            if clip is not None:
                norms.append(torch.nn.utils.clip_grad_norm_(self.wrapper.parameters(), clip).item())
            rates.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            if scheduler:
                scheduler.step()
            losses.append(loss.item())
        weights = {k: v.detach().numpy() for k, v in self.wrapper.state_dict().items()}
        if schedule or clip is not None:
            return losses, weights, rates, norms
        return losses, weights

    def check(self, flags, make_optimizer, steps=6, batch=8):
        out = self.path("out")
        code, stdout, err = run("train", self.model, "--data", self.path("data.npz"), "--batch", batch, "--steps",
                                steps, *flags, "-o", out, "--force", "--json")
        self.assertEqual(code, 0, err)
        got = [json.loads(line) for line in stdout.splitlines()]
        self.assertEqual([g["step"] for g in got], list(range(1, steps + 1)))
        want, weights = self.reference(make_optimizer, steps, batch)
        np.testing.assert_allclose([g["loss"] for g in got], want, rtol=2e-5, atol=1e-6)
        self.assertLess(want[-1], want[0])  # it learns
        trained = {t.name: numpy_helper.to_array(t) for t in onnx.load(os.path.join(out, "trained.onnx")).graph.initializer}
        for name, value in weights.items():
            onnx_name = next(n for n in trained if n.endswith(name.replace("model.", "")) or n == name)
            np.testing.assert_allclose(trained[onnx_name], value, rtol=1e-4, atol=1e-5, err_msg=name)

    def test_sgd_with_momentum_and_weight_decay_over_uneven_microbatches(self):
        self.check(["--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9", "--weight-decay", "0.01",
                    "--microbatches", "3"],  # 8 rows: 3, 3, 2
                   lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01))

    def test_adamw(self):
        self.check(["--optimizer", "adamw", "--lr", "0.01", "--betas", "0.8,0.99", "--weight-decay", "0.05"],
                   lambda p: torch.optim.AdamW(p, lr=0.01, betas=(0.8, 0.99), weight_decay=0.05))

    def test_lr_schedules_and_gradient_clipping_follow_torch(self):
        # Each schedule with and without warmup; clipping tight enough to clip every step (0.05)
        # or only the first ones (0.5), as torch.nn.utils.clip_grad_norm_ over all parameters.
        steps, batch = 7, 8
        for kind, warmup, clip in [("linear", 2, 0.5), ("cosine", 3, None), ("cosine", 0, 0.05),
                                   ("constant", 2, 0.05), ("linear", 0, None)]:
            with self.subTest(kind=kind, warmup=warmup, clip=clip):
                flags = ["--optimizer", "sgd", "--lr", "0.2", "--momentum", "0.9", "--microbatches", 3,
                         "--lr-schedule", kind, "--warmup", warmup] + (["--clip-grad-norm", clip] if clip else [])
                out = self.path(f"out_{kind}_{warmup}_{clip}")
                code, stdout, err = run("train", self.model, "--data", self.path("data.npz"), "--batch", batch,
                                        "--steps", steps, *flags, "-o", out, "--json")
                self.assertEqual(code, 0, err)
                got = [json.loads(line) for line in stdout.splitlines()]
                losses, weights, rates, norms = self.reference(
                    lambda p: torch.optim.SGD(p, lr=0.2, momentum=0.9), steps, batch, (kind, warmup), clip)
                np.testing.assert_allclose([g["lr"] for g in got], rates, rtol=1e-12)
                np.testing.assert_allclose([g["loss"] for g in got], losses, rtol=2e-5, atol=1e-6)
                if clip:
                    np.testing.assert_allclose([g["grad_norm"] for g in got], norms, rtol=1e-5)
                    self.assertGreater(norms[0], clip)  # it clipped
                else:
                    self.assertNotIn("grad_norm", got[0])
                trained = {t.name: numpy_helper.to_array(t)
                           for t in onnx.load(os.path.join(out, "trained.onnx")).graph.initializer}
                for name, value in weights.items():
                    np.testing.assert_allclose(trained[name.replace("model.", "")] if name.replace("model.", "") in trained
                                               else trained[name], value, rtol=1e-4, atol=1e-5, err_msg=name)

    def test_a_plan_clips_the_norm_of_all_its_stages_on_every_rank_count(self):
        # The global norm spans every stage: a pipeline of 4 stages, in one process and on 2 and 4
        # ranks, prints torch's norm of the whole model's gradients and trains to the same
        # weights; the ranks give the one process's losses and norms bit for bit.
        plan, steps, batch, clip = self.path("stages4"), 4, 8, 0.1
        run("pipeline", self.model, "--stages", 4, "-o", plan, check=True)
        command = ["train", plan, "--data", self.path("data.npz"), "--batch", batch, "--steps", steps,
                   "--microbatches", 2, "--optimizer", "adamw", "--lr", "0.01", "--lr-schedule", "cosine",
                   "--warmup", 1, "--clip-grad-norm", clip, "--model", self.model, "--json"]
        losses, weights, rates, norms = self.reference(lambda p: torch.optim.AdamW(p, lr=0.01), steps, batch,
                                                       ("cosine", 1), clip)
        results = {}
        for ranks in (0, 2, 4):
            out = self.path(f"plan_out_{ranks}")
            code, stdout, err = (launch(ranks, "cleave", *command, "-o", out, "--schedule", {2: "interleaved", 4: "1f1b"}[ranks]) if ranks
                                 else run(*command, "-o", out))
            self.assertEqual(code, 0, err)
            got = [json.loads(line.split("] ", 1)[-1]) for line in stdout.splitlines()]
            results[ranks] = [(g["loss"], g["grad_norm"], g["lr"]) for g in got]
            np.testing.assert_allclose([g["grad_norm"] for g in got], norms, rtol=1e-5)
            np.testing.assert_allclose([g["lr"] for g in got], rates, rtol=1e-12)
            np.testing.assert_allclose([g["loss"] for g in got], losses, rtol=2e-5, atol=1e-6)
            trained = {t.name: numpy_helper.to_array(t)
                       for t in onnx.load(os.path.join(out, "trained.onnx")).graph.initializer}
            for name, value in weights.items():
                key = name.replace("model.", "") if name.replace("model.", "") in trained else name
                np.testing.assert_allclose(trained[key], value, rtol=1e-4, atol=1e-5, err_msg=name)
        self.assertEqual(results[2], results[0])
        self.assertEqual(results[4], results[0])

    def test_bf16_mixed_precision_follows_torch_autocast(self):
        # --precision bf16 runs the forward under autocast as torch.autocast("cpu", bfloat16) does,
        # with float32 master weights: losses and weights follow torch's own mixed precision
        # training within bf16's rounding (a model without a residual matches it bit for bit:
        # bench/RESULTS.md), and differ from float32 training's (it did compute in bf16). A plan
        # trains its stages the same way in one process and on 2 ranks (bit for bit); values
        # cross between stages as the plan's float32.
        steps, batch = 6, 8
        flags = ["--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9", "--microbatches", 2, "--json"]

        def torch_run(bf16):
            self.wrapper.load_state_dict(self.initial)
            optimizer = torch.optim.SGD(self.wrapper.parameters(), lr=0.1, momentum=0.9)
            losses = []
            for step in range(steps):
                optimizer.zero_grad()
                total = 0.0
                for half in (slice(0, batch // 2), slice(batch // 2, batch)):
                    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                        loss = self.wrapper(rows(self.x, step, batch)[half], rows(self.target, step, batch)[half])
                    (loss * 0.5).backward()
                    total += loss.item() * 0.5
                optimizer.step()
                losses.append(total)
            return losses, {k: v.detach().numpy() for k, v in self.wrapper.state_dict().items()}

        want, want_weights = torch_run(True)
        fp32, _ = torch_run(False)
        out = self.path("bf16_out")
        code, stdout, err = run("train", self.model, "--data", self.path("data.npz"), "--batch", batch, "--steps",
                                steps, *flags, "--precision", "bf16", "-o", out)
        self.assertEqual(code, 0, err)
        got = [json.loads(line)["loss"] for line in stdout.splitlines()]
        np.testing.assert_allclose(got, want, rtol=2e-3)
        self.assertGreater(max(abs(a - b) for a, b in zip(got, fp32)), 1e-5)
        trained = {t.name: numpy_helper.to_array(t) for t in onnx.load(os.path.join(out, "trained.onnx")).graph.initializer}
        for name, value in want_weights.items():
            np.testing.assert_allclose(trained[name], value, rtol=1e-2, atol=2e-3, err_msg=name)
        plan = self.path("bf16_plan")
        run("pipeline", self.model, "--stages", 2, "-o", plan, check=True)
        command = ["train", plan, "--data", self.path("data.npz"), "--batch", batch, "--steps", steps, *flags,
                   "--precision", "bf16"]
        code, single, err = run(*command)
        self.assertEqual(code, 0, err)
        code, ranks, err = launch(2, "cleave", *command, "--schedule", "1f1b")
        self.assertEqual(code, 0, err)
        single = [json.loads(line)["loss"] for line in single.splitlines()]
        self.assertEqual([json.loads(line.split("] ", 1)[-1])["loss"] for line in ranks.splitlines()], single)
        np.testing.assert_allclose(single, want, rtol=5e-3)

    def test_recomputing_stages_keeps_gradients_and_lowers_the_peak(self):
        # --recompute stage on a 4-stage plan of blocks 512 wide inside and 64 at their ends
        # (16 microbatches of 64 rows: activations held outweigh the gradients): the same
        # losses and trained stages, bit for bit, in one process and on 2 ranks under gpipe (every
        # microbatch's activations held until the backwards begin) and zero bubble (I and W
        # apart) on 4 ranks, and interleaved on 2; the peak bytes rank 0 allocates in a step
        # (--timing) drop, by 30% at least where every microbatch's activations were held.
        class Blocks(torch.nn.Module):  # 4 blocks narrow at their ends: one a stage
            def __init__(self):
                super().__init__()
                self.blocks = torch.nn.ModuleList([torch.nn.ModuleList([torch.nn.Linear(64, 512), torch.nn.Linear(512, 512),
                                                                        torch.nn.Linear(512, 64)]) for _ in range(4)])

            def forward(self, x, target):
                for block in self.blocks:
                    for layer in block:
                        x = torch.tanh(layer(x))
                return ((x - target) ** 2).mean()

        torch.manual_seed(2)
        model, plan = self.path("wide.onnx"), self.path("wide_plan")
        torch.onnx.export(Blocks(), (torch.randn(8, 64), torch.randn(8, 64)), model,
                          input_names=["x", "target"], output_names=["loss"], opset_version=13,
                          do_constant_folding=False, dynamic_axes={"x": {0: "n"}, "target": {0: "n"}}, dynamo=False)
        run("pipeline", model, "--stages", 4, "-o", plan, check=True)
        g = torch.Generator().manual_seed(3)
        np.savez(self.path("wide.npz"), x=torch.randn(1024, 64, generator=g).numpy(),
                 target=torch.randn(1024, 64, generator=g).numpy())
        common = ["train", plan, "--data", self.path("wide.npz"), "--batch", 1024, "--microbatches", 16, "--steps", 2,
                  "--optimizer", "sgd", "--lr", 0.05, "--momentum", 0.9, "--json", "--timing"]
        for ranks, schedule in [(0, None), (4, "gpipe"), (4, "zero_bubble"), (2, "interleaved")]:
            results = {}
            for recompute in ("none", "stage"):
                with self.subTest(ranks=ranks, schedule=schedule, recompute=recompute):
                    out = self.path(f"wide_{ranks}_{schedule}_{recompute}")
                    command = [*common, "--recompute", recompute, "-o", out]
                    if schedule:
                        command = ["launch", "--nproc", ranks, "--master-port", free_port(), "--", "cleave", *command,
                                   "--schedule", schedule]
                    code, stdout, err = run(*command)
                    self.assertEqual(code, 0, err)
                    lines = [json.loads(line.split("] ", 1)[-1]) for line in stdout.splitlines()]
                    stages = {}
                    for name in sorted(f for f in os.listdir(out) if f.endswith(".onnx")):
                        with open(os.path.join(out, name), "rb") as f:
                            stages[name] = f.read()
                    results[recompute] = ([l["loss"] for l in lines], max(l["rank_peak_step_bytes"][0] for l in lines),
                                          stages)
            self.assertEqual(results["stage"][0], results["none"][0])
            self.assertEqual(results["stage"][2], results["none"][2])
            # GPipe (and one process, which runs GPipe's order) holds every microbatch's
            # activations: recomputation saves most of them. 1F1B-like schedules hold a few
            # microbatches at a time (zero bubble: at most 4 - rank), so they save less.
            most = {None: 0.7, "gpipe": 0.7}.get(schedule, 1.0)
            self.assertLess(results["stage"][1], most * results["none"][1], (ranks, schedule, results["stage"][1],
                                                                             results["none"][1]))
        code, _, err = run("train", model, "--data", self.path("wide.npz"), "--batch", 8, "--recompute", "stage")
        self.assertOneLineError(code, err, "--recompute stage is for plan directories", exit_code=2)

    def test_selective_recomputation_keeps_gradients_and_drops_attention_scores(self):
        # --recompute selective on two attention blocks (seq 128, 4 heads: the scores outweigh
        # the linear layers' outputs): the same losses and trained weights, bit for bit, as
        # --recompute none for the whole model, a 2-stage plan in one process and on 2 ranks
        # under zero bubble (I and W apart), and with bf16 autocast (stage recomputation too: its
        # forward takes the kernels' autograd paths); losses follow torch's SGD; the peak bytes a step
        # allocates in one process (every microbatch's forward held) drop by 30% at least.
        class Block(torch.nn.Module):
            def __init__(self, d=32, heads=4):
                super().__init__()
                self.heads, self.norm = heads, torch.nn.LayerNorm(d)
                self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
                self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 64), torch.nn.Tanh(), torch.nn.Linear(64, d))

            def forward(self, x):
                b, s, d = x.shape
                q, k, v = (t.reshape(b, s, self.heads, -1).transpose(1, 2)
                           for t in self.qkv(self.norm(x)).chunk(3, dim=-1))
                attention = torch.softmax(q @ k.transpose(-2, -1) / 8 ** 0.5, dim=-1)
                x = x + self.out((attention @ v).transpose(1, 2).reshape(b, s, d))
                return x + self.mlp(x)

        class Blocks(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = torch.nn.Sequential(Block(), Block())

            def forward(self, x, target):
                return ((self.blocks(x) - target) ** 2).mean()

        torch.manual_seed(4)
        module = Blocks()
        initial = {k: v.clone() for k, v in module.state_dict().items()}
        model, plan = self.path("attention.onnx"), self.path("attention_plan")
        torch.onnx.export(module, (torch.randn(2, 128, 32), torch.randn(2, 128, 32)), model,
                          input_names=["x", "target"], output_names=["loss"], opset_version=13,
                          do_constant_folding=False, dynamic_axes={"x": {0: "n"}, "target": {0: "n"}}, dynamo=False)
        run("pipeline", model, "--stages", 2, "-o", plan, check=True)
        g = torch.Generator().manual_seed(5)
        x, target = torch.randn(16, 128, 32, generator=g), torch.randn(16, 128, 32, generator=g)
        np.savez(self.path("attention.npz"), x=x.numpy(), target=target.numpy())
        module.load_state_dict(initial)
        optimizer = torch.optim.SGD(module.parameters(), lr=0.05, momentum=0.9)
        want = []
        for _ in range(2):
            optimizer.zero_grad()
            loss = module(x, target)
            loss.backward()
            optimizer.step()
            want.append(loss.item())
        common = ["train", "--data", self.path("attention.npz"), "--batch", 16, "--steps", 2, "--optimizer", "sgd",
                  "--lr", 0.05, "--momentum", 0.9, "--json"]
        fp32, both = ("none", "selective"), ("none", "selective", "stage")
        for what, ranks, precision, kinds in [(model, 0, "fp32", fp32), (plan, 0, "fp32", fp32), (plan, 2, "fp32", fp32),
                                              (plan, 0, "bf16", both)]:
            results = {}
            for recompute in kinds:
                with self.subTest(what=os.path.basename(what), ranks=ranks, precision=precision, recompute=recompute):
                    out = self.path(f"attention_{os.path.basename(what)}_{ranks}_{precision}_{recompute}")
                    command = ["train", what, *common[1:], "--precision", precision, "--recompute", recompute, "-o", out]
                    if what == plan:
                        command += ["--microbatches", 4, "--timing"]
                    if ranks:
                        command = ["launch", "--nproc", ranks, "--master-port", free_port(), "--", "cleave", *command,
                                   "--schedule", "zero_bubble"]
                    code, stdout, err = run(*command)
                    self.assertEqual(code, 0, err)
                    lines = [json.loads(line.split("] ", 1)[-1]) for line in stdout.splitlines()]
                    trained = {}
                    for name in sorted(f for f in os.listdir(out) if f.endswith(".onnx")):
                        with open(os.path.join(out, name), "rb") as f:
                            trained[name] = f.read()
                    results[recompute] = ([l["loss"] for l in lines], trained,
                                          max((l.get("rank_peak_step_bytes") or [0])[0] for l in lines), lines[-1])
            for recompute in kinds[1:]:
                self.assertEqual(results[recompute][0], results["none"][0], recompute)
                self.assertEqual(results[recompute][1], results["none"][1], recompute)
            if precision == "fp32":
                np.testing.assert_allclose(results["none"][0][:2], want, rtol=1e-4)
            if what == plan and not ranks and precision == "fp32":
                # Held: every microbatch's softmax (1 MiB each a block); the replay's own
                # scores and their gradients come and go within one segment's backward.
                self.assertLess(results["selective"][2], 0.7 * results["none"][2],
                                (results["selective"][2], results["none"][2]))
            if what == plan:
                self.assert_simulator_predicts_peaks({k: v[3] for k, v in results.items()}, ranks)

    def assert_simulator_predicts_peaks(self, timings, ranks):
        # cleave schedule --simulate, given the bytes per stage and microbatch that --timing
        # measured (without recomputation: what a forward holds and a backward adds; with stage
        # recomputation: what a forward holds then; with selective: what it no longer holds),
        # predicts every rank's peak step bytes under each recomputation: on one process within a
        # few percent; on 2 ranks a little under (receives posted ahead are in no stage's bytes).
        none = timings["none"]
        joined = lambda values: ",".join(str(v) for v in values)
        for recompute, timing in timings.items():
            if ranks:
                order = ["--kind", "zero_bubble"]
            else:  # one process: the order it ran, as a schedule of one rank
                csv = self.path(f"order_{recompute}.csv")
                with open(csv, "w") as f:
                    f.write(",".join(action["action"] for action in timing["actions"]) + "\n")
                order = ["--from-csv", csv]
            command = ["schedule", *order, "--stages", len(none["stage_forward_bytes"]), "--microbatches", 4,
                       "--simulate", "--json", "--recompute", recompute,
                       "--activation-bytes", joined(none["stage_forward_bytes"]),
                       "--backward-bytes", joined(none["stage_backward_bytes"]),
                       "--gradient-bytes", joined(none["stage_gradient_bytes"])]
            if recompute == "stage":
                command += ["--input-bytes", joined(timing["stage_forward_bytes"])]
            if recompute == "selective":
                command += ["--dropped-bytes", joined(a - b for a, b in zip(none["stage_forward_bytes"],
                                                                            timing["stage_forward_bytes"]))]
            code, out, err = run(*command)
            self.assertEqual(code, 0, err)
            predicted = json.loads(out)["simulation"]["peak_activation_bytes"]
            measured = timing["rank_peak_step_bytes"]
            with self.subTest(ranks=ranks, recompute=recompute, predicted=predicted, measured=measured):
                self.assertEqual(len(predicted), len(measured))
                for p, m in zip(predicted, measured):
                    self.assertTrue((0.8 if ranks else 0.9) * m <= p <= 1.02 * m)

    def test_a_parameter_off_the_loss_path_still_decays(self):
        # Gradients are dropped, not zeroed, between steps; a parameter no backward reaches must
        # still get PyTorch's zero_grad() treatment: a zero gradient, so weight decay applies.
        class WithProbe(torch.nn.Module):
            def __init__(self, wrapper):
                super().__init__()
                self.wrapper, self.probe = wrapper, torch.nn.Linear(6, 3)

            def forward(self, x, target):
                return self.wrapper(x, target), self.probe(x)

        module = WithProbe(self.wrapper)
        model = self.path("probe.onnx")
        torch.onnx.export(module, (torch.randn(8, 6), torch.zeros(8, dtype=torch.long)), model,
                          input_names=["x", "target"], output_names=["loss", "probe"], opset_version=13,
                          do_constant_folding=False, dynamic_axes={"x": {0: "n"}, "target": {0: "n"}}, dynamo=False)
        out, steps, lr, decay = self.path("probe_out"), 3, 0.1, 0.2
        run("train", model, "--data", self.path("data.npz"), "--batch", 8, "--steps", steps, "--optimizer", "sgd",
            "--lr", lr, "--weight-decay", decay, "--microbatches", 2, "-o", out, "--force", check=True)
        trained = {t.name: numpy_helper.to_array(t) for t in onnx.load(os.path.join(out, "trained.onnx")).graph.initializer}
        want = module.probe.weight.detach().numpy() * (1 - lr * decay) ** steps
        np.testing.assert_allclose(trained["probe.weight"], want, rtol=1e-6)

    def test_bad_requests(self):
        code, _, err = run("train", self.model, "--data", self.path("data.npz"), "--batch", 4, "--loss", "nope")
        self.assertOneLineError(code, err, "no output 'nope'")
        np.savez(self.path("partial.npz"), x=self.x.numpy())
        code, _, err = run("train", self.model, "--data", self.path("partial.npz"), "--batch", 4)
        self.assertOneLineError(code, err, "target")
        code, _, err = run("train", self.model, "--data", self.path("data.npz"), "--batch", 0)
        self.assertEqual(code, 2, err)

    def test_the_backend_it_trains_on(self):
        common = ["--data", self.path("data.npz"), "--batch", 8, "--steps", 2, "--json"]
        code, default, err = run("train", self.model, *common)
        self.assertEqual(code, 0, err)
        code, named, err = run("train", self.model, *common, "--backend", "aten-cpu")
        self.assertEqual(code, 0, err)
        self.assertEqual(named, default)
        code, _, err = run("train", self.model, *common, "--backend", "aten-cpu-bf16")
        self.assertOneLineError(code, err, "backend aten-cpu-bf16 does not train", "float32 master weights")
        code, _, err = run("train", self.model, *common, "--backend", "nope")
        self.assertOneLineError(code, err, "unknown backend 'nope'")
        # A plan's stage trains on the backend its device names (plan.json's device_backends).
        plan = self.path("stages")
        run("pipeline", self.model, "--stages", 2, "-o", plan, check=True)
        code, staged, err = run("train", plan, *common, "--backend", "aten-cpu")
        self.assertEqual(code, 0, err)
        with open(os.path.join(plan, "plan.json")) as f:
            planned = json.load(f)
        second = planned["submodules"][1]
        second["devices"] = [1]
        planned["device_backends"] = {"1": "aten-cpu-bf16"}
        with open(os.path.join(plan, "plan.json"), "w") as f:
            json.dump(planned, f)
        code, _, err = run("train", plan, *common)
        self.assertOneLineError(code, err, f"stage '{second['name']}'", "backend aten-cpu-bf16 does not train")

    def test_a_plan_whose_only_scalar_output_is_the_loss(self):
        model = self.path("objective.onnx")
        torch.onnx.export(self.wrapper, (torch.randn(8, 6), torch.zeros(8, dtype=torch.long)), model,
                          input_names=["x", "target"], output_names=["objective"], opset_version=13,
                          do_constant_folding=False, dynamic_axes={"x": {0: "n"}, "target": {0: "n"}}, dynamo=False)
        plan = self.path("stages")
        run("pipeline", model, "--stages", 2, "-o", plan, check=True)
        common = ["--data", self.path("data.npz"), "--batch", 8, "--steps", 2, "--json"]
        code, whole, err = run("train", model, *common)
        self.assertEqual(code, 0, err)
        code, staged, err = run("train", plan, *common)
        self.assertEqual(code, 0, err)
        losses = lambda text: [json.loads(line)["loss"] for line in text.splitlines()]
        np.testing.assert_allclose(losses(staged), losses(whole), rtol=1e-6)
        code, _, err = run("train", plan, *common, "--loss", "nope")
        self.assertOneLineError(code, err, "no plan output named 'nope'")

    def test_a_frozen_batch_norm_trains_its_affine_not_its_statistics(self):
        # A convolution network exported in eval mode: BatchNormalization reads its running mean
        # and variance as initializers. PyTorch trains the affine and never the statistics (they
        # are buffers); cleave must do the same, also where inference folds the normalization into
        # the ConvTranspose before it. (The exporter itself folds a BatchNormalization into a Conv
        # before it in eval mode, which changes what is trained: none here follows a Conv.)
        class ConvNet(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.norm = torch.nn.BatchNorm2d(2)
                self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
                self.up = torch.nn.ConvTranspose2d(4, 2, 2, stride=2, bias=False)
                self.up_norm = torch.nn.BatchNorm2d(2)

            def forward(self, x, target):
                h = torch.relu(self.conv(self.norm(x)))
                y = torch.relu(self.up_norm(self.up(h)))
                return ((y - target) ** 2).mean()

        torch.manual_seed(3)
        module = ConvNet()
        for norm in (module.norm, module.up_norm):  # distinct values: the exporter merges equal initializers
            norm.weight.data.uniform_(0.5, 1.5)
            norm.bias.data.uniform_(-0.5, 0.5)
            norm.running_mean.uniform_(-0.5, 0.5)
            norm.running_var.uniform_(0.5, 1.5)
        module.eval()
        initial = {k: v.clone() for k, v in module.state_dict().items()}
        model = self.path("convnet.onnx")
        torch.onnx.export(module, (torch.randn(4, 2, 5, 5), torch.randn(4, 2, 10, 10)), model,
                          input_names=["x", "target"], output_names=["loss"], opset_version=13,
                          do_constant_folding=False, training=torch.onnx.TrainingMode.EVAL,
                          dynamic_axes={"x": {0: "n"}, "target": {0: "n"}}, dynamo=False)
        g = torch.Generator().manual_seed(4)
        x, target = torch.randn(8, 2, 5, 5, generator=g), torch.randn(8, 2, 10, 10, generator=g)
        np.savez(self.path("images.npz"), x=x.numpy(), target=target.numpy())
        out, steps = self.path("convnet_out"), 3
        code, stdout, err = run("train", model, "--data", self.path("images.npz"), "--batch", 4, "--steps", steps,
                                "--optimizer", "sgd", "--lr", "0.5", "--momentum", "0.9", "-o", out, "--force",
                                "--json")
        self.assertEqual(code, 0, err)
        optimizer = torch.optim.SGD(module.parameters(), lr=0.5, momentum=0.9)
        want = []
        for step in range(steps):
            optimizer.zero_grad()
            loss = module(rows(x, step, 4), rows(target, step, 4))
            loss.backward()
            optimizer.step()
            want.append(loss.item())
        np.testing.assert_allclose([json.loads(line)["loss"] for line in stdout.splitlines()], want, rtol=2e-5)
        trained = {t.name: numpy_helper.to_array(t) for t in onnx.load(os.path.join(out, "trained.onnx")).graph.initializer}
        for name, value in module.state_dict().items():
            if name.endswith("num_batches_tracked"):
                continue
            np.testing.assert_allclose(trained[name], value.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
            if "running" in name:
                np.testing.assert_array_equal(trained[name], initial[name].numpy(), err_msg=name)
            else:
                self.assertFalse(np.allclose(trained[name], initial[name].numpy()), name)  # it trained


if __name__ == "__main__":
    main()
