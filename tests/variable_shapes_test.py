"""Pipelines whose shapes change every step, or every microbatch (issue 75).

A decoder exported with torch 2.x's default exporter, its rows and sequence length dynamic, is cut
into 2, 4 and 8 stages and trained on token windows whose length changes per step or per
microbatch (`--seq-lens 8,16,12`, `--seq-len-per`), under every schedule on 2 and 4 ranks over
Gloo. Sizes come from what every rank already knows: each rank reads the same rows, so it binds the
plan's symbolic dims per microbatch and numbers the microbatches' input shapes alike
(plan_shapes.h's ShapeClasses); no size is exchanged and no message carries a shape header.
torch trains the same windows (`--log`'s starts and lengths) microbatch by microbatch, each
microbatch's mean loss weighted by its share of the batch's rows: losses and every trained
parameter agree within rtol 1e-5, atol 4e-5 (torch's own pipelining tests' tolerances).

Before: a plan's shape keys named a microbatch's rows only, so a second length of the same rows
failed in the first send: "send to rank 1 (tag 26): a Float[16, 16] where its shape key says
Float[8, 8]".

The default run trains one case per schedule (both rank counts and all three length modes among
them); CLEAVE_TEST_FULL_MATRIX=1 (ctest's `variable_shapes_matrix`, label slow) runs every schedule
x {2, 4} ranks x {fixed, per step, per microbatch}."""
import json
import math
import os
import shutil
import sys
import tempfile
import warnings

import numpy as np
import onnx
import torch

from dynamo_training_test import fold_sources, initializers
from testlib import TempDirTest, launch, main, run

torch.set_num_threads(1)
VOCAB, WIDTH, HEADS, LAYERS, LONGEST = 64, 32, 2, 4, 16
BATCH, MICROBATCHES, STEPS, LR, MOMENTUM = 16, 8, 3, 0.05, 0.9
LENGTHS = [8, 16, 12]
RTOL, ATOL = 1e-5, 4e-5
SCHEDULES = ["gpipe", "1f1b", "interleaved", "looped_bfs", "zero_bubble", "zbv", "dualpipev"]
# Stages a rank: one for gpipe, 1f1b and zero bubble (ZB-H1), two for the others.
TWO_A_RANK = {"interleaved", "looped_bfs", "zbv", "dualpipev"}
MODES = {"fixed": ["--seq-len", LONGEST], "step": ["--seq-lens", ",".join(map(str, LENGTHS))],
         "microbatch": ["--seq-lens", ",".join(map(str, LENGTHS)), "--seq-len-per", "microbatch"]}
DEFAULT_CASES = [("gpipe", 2, "step"), ("1f1b", 4, "microbatch"), ("interleaved", 2, "microbatch"),
                 ("looped_bfs", 4, "step"), ("zero_bubble", 2, "fixed"), ("zbv", 2, "step"),
                 ("dualpipev", 4, "microbatch")]


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(WIDTH), torch.nn.LayerNorm(WIDTH)
        self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = torch.nn.Linear(WIDTH, WIDTH)
        self.fc = torch.nn.Linear(WIDTH, 4 * WIDTH)
        self.out = torch.nn.Linear(4 * WIDTH, WIDTH)
        self.register_buffer("causal", torch.triu(torch.full((LONGEST, LONGEST), float("-inf")), diagonal=1))

    def forward(self, x):
        rows, seq, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(width, dim=-1)
        split = lambda t: t.reshape(rows, seq, HEADS, width // HEADS).transpose(1, 2)
        q, k, v = split(q), split(k), split(v)
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(width // HEADS)) + self.causal[:seq, :seq]
        attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(rows, seq, width)
        x = x + self.proj(attended)
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))


class Decoder(torch.nn.Module):
    """A pre-norm decoder whose sequence length is dynamic: positions and the causal mask are
    sliced to the input's length."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.positions = torch.nn.Parameter(torch.randn(LONGEST, WIDTH) * 0.02)
        self.blocks = torch.nn.ModuleList([Block() for _ in range(LAYERS)])
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, tokens, targets):
        x = self.embed(tokens) + self.positions[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def make_model():
    torch.manual_seed(0)
    return Decoder().train()


def export(path):
    tokens, targets = torch.zeros(4, 12, dtype=torch.long), torch.ones(4, 12, dtype=torch.long)
    rows, seq = torch.export.Dim("rows"), torch.export.Dim("seq", min=2, max=LONGEST)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(make_model(), (tokens, targets), path, dynamo=True, input_names=["tokens", "targets"],
                          output_names=["loss"], dynamic_shapes={"tokens": {0: rows, 1: seq}, "targets": {0: rows, 1: seq}})


def torch_reference(ids, log, ragged=False):
    """torch.optim's SGD on the logged rows (a row: `window_lengths` input ids from its start, its
    targets one further), microbatch by microbatch as torch.chunk splits each step's rows, each
    microbatch padded to its longest row (inputs with 0, targets with cross_entropy's ignore_index)
    and its loss weighted by its rows' share: (losses, parameters)."""
    module = make_model()
    optimizer = torch.optim.SGD(module.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for line in log:
        starts = line["window_starts"]
        lengths = line.get("window_lengths", [LONGEST] * len(starts))
        optimizer.zero_grad()
        total = 0.0
        per = math.ceil(len(starts) / MICROBATCHES)
        for first in range(0, len(starts), per):
            part = range(first, min(first + per, len(starts)))
            length = max(lengths[r] for r in part)
            assert ragged or all(lengths[r] == length for r in part), lengths  # windows: one length
            tokens = torch.zeros(len(part), length, dtype=torch.long)
            targets = torch.full((len(part), length), -100, dtype=torch.long)
            for k, r in enumerate(part):
                row = torch.as_tensor(ids[starts[r]:starts[r] + lengths[r] + 1].astype("int64"))
                tokens[k, :lengths[r]], targets[k, :lengths[r]] = row[:-1], row[1:]
            loss = module(tokens, targets) * (len(part) / len(starts))
            loss.backward()
            total += loss.item()
        optimizer.step()
        losses.append(total)
    return losses, dict(module.named_parameters())


class VariableShapes(TempDirTest):
    @classmethod
    def setUpClass(cls):
        cls.shared = tempfile.mkdtemp(prefix="cleave_test_")
        cls.model = os.path.join(cls.shared, "decoder.onnx")
        export(cls.model)
        cls.ids = np.random.default_rng(3).integers(0, VOCAB, 20000).astype(np.uint16)
        cls.data = os.path.join(cls.shared, "train.bin")
        cls.ids.tofile(cls.data)
        cls.plans = {}
        for stages in (2, 4, 8):
            cls.plans[stages] = os.path.join(cls.shared, f"plan{stages}")
            code, _, err = run("pipeline", cls.model, "--stages", stages, "-o", cls.plans[stages])
            assert code == 0, err
        cls.references = {}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.shared)

    def reference(self, mode, log):
        if mode not in self.references:
            type(self).references[mode] = (log, torch_reference(self.ids, log))
        first_log, reference = self.references[mode]
        self.assertEqual([line["window_starts"] for line in log], [line["window_starts"] for line in first_log])
        return reference

    def train_case(self, schedule, ranks, mode):
        stages = ranks * (2 if schedule in TWO_A_RANK else 1)
        log, out = self.path(f"{schedule}_{ranks}_{mode}.jsonl"), self.path(f"out_{schedule}_{ranks}_{mode}")
        code, stdout, err = launch(ranks, "cleave", "train", self.plans[stages], "--model", self.model, "--data",
                                   self.data, "--tokens", "uint16", "--batch", BATCH, "--microbatches", MICROBATCHES,
                                   "--steps", STEPS, "--schedule", schedule, "--optimizer", "sgd", "--lr", LR,
                                   "--momentum", MOMENTUM, *MODES[mode], "--log", log, "--json", "--timing", "-o", out)
        self.assertEqual(code, 0, err)
        steps = [json.loads(line.split("] ", 1)[-1]) for line in stdout.splitlines() if '"step"' in line]
        self.assertEqual([s["shape_headers"] for s in steps], [0] * STEPS)  # sizes known to every rank
        with open(log) as f:
            logged = [json.loads(line) for line in f]
        lengths = [line.get("window_lengths") for line in logged]
        if mode == "fixed":
            self.assertEqual(lengths, [None] * STEPS)
        elif mode == "step":  # a step's rows share one length, in turn
            self.assertEqual(lengths, [[n] * BATCH for n in LENGTHS])
        else:  # each microbatch (2 rows) its own, in turn
            per = BATCH // MICROBATCHES
            want = [LENGTHS[(s * MICROBATCHES + m) % len(LENGTHS)] for s in range(STEPS) for m in range(MICROBATCHES)]
            self.assertEqual([n for line in lengths for n in line], [n for n in want for _ in range(per)])
        want_losses, want_parameters = self.reference(mode, logged)
        np.testing.assert_allclose([s["loss"] for s in steps], want_losses, rtol=RTOL, atol=ATOL)
        trained = initializers(os.path.join(out, "trained.onnx"))
        folds = fold_sources(self.model)
        for name, value in folds.items():  # the exporter's transposed copies of Linear weights
            trained.setdefault(value, trained[name].T)
        for name, parameter in want_parameters.items():
            np.testing.assert_allclose(trained[name], parameter.detach().numpy(), rtol=RTOL, atol=ATOL,
                                       err_msg=f"{schedule} on {ranks} ranks, {mode}: {name}")

    def test_every_schedule_trains_as_torch_does_on_lengths_that_change(self):
        full = os.environ.get("CLEAVE_TEST_FULL_MATRIX") == "1"
        cases = [(s, r, m) for s in SCHEDULES for r in (2, 4) for m in MODES] if full else DEFAULT_CASES
        for schedule, ranks, mode in cases:
            with self.subTest(schedule=schedule, ranks=ranks, mode=mode):
                self.train_case(schedule, ranks, mode)

    def message_bytes(self, stages, rows, seq):
        """--message-bytes for a plan: per (producing, reading) stage pair, the bytes of the values
        one microbatch sends, from plan.json's types with rows and seq bound."""
        with open(os.path.join(self.plans[stages], "plan.json")) as f:
            plan = json.load(f)
        types = {v["name"]: v for v in plan["values"]}
        index = {s["name"]: i for i, s in enumerate(plan["submodules"])}
        width = {"f32": 4, "i64": 8}
        edges = {}
        for reader, submodule in enumerate(plan["submodules"]):
            for given in submodule["inputs"]:
                if given["from"] != "input":
                    value = types[given["value"]]
                    count = math.prod(d if isinstance(d, int) else {"rows": rows, "seq": seq}[d] for d in value["shape"])
                    key = (index[given["from"]], reader)
                    edges[key] = edges.get(key, 0) + count * width[value["dtype"]]
        return ",".join(f"{a}>{b}:{n}" for (a, b), n in sorted(edges.items()))

    def test_receive_buffers_are_reused_and_the_simulator_predicts_their_peak(self):
        """Each rank takes receive buffers from a pool and reuses them once their readers let go:
        its peak of bytes taken follows `cleave schedule --simulate --message-bytes` (5%; zero
        bubble's split backward a little below it: gradients of values that need none, such as a
        causal mask's, are let go at I, which the model holds to W), and the pool holds far less
        than a buffer per message (what torch's pipelining allocates)."""
        rows = BATCH // MICROBATCHES
        # Checked channel order (testlib's default) posts a receive's data only once its tag header
        # is in, later than the schedule posts it: the model is of the unchecked runs users make.
        self.addCleanup(os.environ.__setitem__, "CLEAVE_DIST_CHECK_ORDER", os.environ["CLEAVE_DIST_CHECK_ORDER"])
        os.environ["CLEAVE_DIST_CHECK_ORDER"] = "0"
        for schedule, ranks in (("1f1b", 4), ("interleaved", 2), ("zbv", 2), ("dualpipev", 4), ("zero_bubble", 4)):
            with self.subTest(schedule=schedule, ranks=ranks):
                stages = ranks * (2 if schedule in TWO_A_RANK else 1)
                code, stdout, err = launch(ranks, "cleave", "train", self.plans[stages], "--data", self.data, "--tokens",
                                           "uint16", "--batch", BATCH, "--microbatches", MICROBATCHES, "--steps", 2,
                                           "--seq-len", LONGEST, "--schedule", schedule, "--json", "--timing")
                self.assertEqual(code, 0, err)
                last = [json.loads(line.split("] ", 1)[-1]) for line in stdout.splitlines() if '"step"' in line][-1]
                code, out, err = run("schedule", "--kind", schedule, "--stages", stages, "--ranks", ranks,
                                     "--microbatches", MICROBATCHES, "--simulate", "--json", "--message-bytes",
                                     self.message_bytes(stages, rows, LONGEST))
                self.assertEqual(code, 0, err)
                predicted = json.loads(out)["simulation"]["peak_receive_bytes"]
                measured, held = last["rank_receive_buffer_peak_bytes"], last["rank_receive_buffer_held_bytes"]
                low = 0.9 if schedule == "zero_bubble" else 0.95
                for rank in range(ranks):
                    self.assertLessEqual(measured[rank], 1.05 * predicted[rank], (rank, measured, predicted))
                    self.assertGreaterEqual(measured[rank], low * predicted[rank], (rank, measured, predicted))
                # A buffer per message, as torch allocates: every message of the step.
                per_step = sum(n for part in self.message_bytes(stages, rows, LONGEST).split(",")
                               for n in [int(part.split(":")[1])]) * 2 * MICROBATCHES
                self.assertLess(sum(held), per_step / 2, (held, per_step))

    def test_receive_buffers_stay_bounded_when_lengths_change(self):
        code, stdout, err = launch(2, "cleave", "train", self.plans[4], "--data", self.data, "--tokens", "uint16",
                                   "--batch", BATCH, "--microbatches", MICROBATCHES, "--steps", 9, "--seq-lens", "4-16/4",
                                   "--seq-len-per", "microbatch", "--schedule", "interleaved", "--json", "--timing")
        self.assertEqual(code, 0, err)
        steps = [json.loads(line.split("] ", 1)[-1]) for line in stdout.splitlines() if '"step"' in line]
        peaks = [max(s["rank_receive_buffer_peak_bytes"]) for s in steps]
        held = [max(s["rank_receive_buffer_held_bytes"]) for s in steps]
        # What the pool holds follows what recent steps took (unused buffers are let go each step),
        # within the quarter a reused buffer may spare and the buffers of the step before.
        self.assertLessEqual(max(held), 2.5 * max(peaks), (held, peaks))

    def test_ragged_rows_train_as_torch_does_on_the_same_padded_microbatches(self):
        """Documents stored end to end with their lengths (--row-lengths): each microbatch pads its
        rows to its longest; under interleaved on 2 ranks and 1f1b on 4, as torch trains them."""
        rng = np.random.default_rng(7)
        lengths = rng.integers(3, LONGEST + 2, 300)  # ids a row: inputs of 2 to LONGEST tokens
        ids = rng.integers(0, VOCAB, int(lengths.sum())).astype(np.uint16)
        data, lengths_file = self.path("docs.bin"), self.path("lengths.npy")
        ids.tofile(data)
        np.save(lengths_file, lengths)
        want = None
        for schedule, ranks in (("interleaved", 2), ("1f1b", 4)):
            with self.subTest(schedule=schedule, ranks=ranks):
                stages = ranks * (2 if schedule in TWO_A_RANK else 1)
                log, out = self.path(f"ragged_{schedule}.jsonl"), self.path(f"ragged_{schedule}")
                code, stdout, err = launch(ranks, "cleave", "train", self.plans[stages], "--model", self.model, "--data",
                                           data, "--tokens", "uint16", "--row-lengths", lengths_file, "--batch", BATCH,
                                           "--microbatches", MICROBATCHES, "--steps", STEPS, "--schedule", schedule,
                                           "--optimizer", "sgd", "--lr", LR, "--momentum", MOMENTUM, "--sampling",
                                           "epochs", "--log", log, "--json", "--timing", "-o", out)
                self.assertEqual(code, 0, err)
                steps = [json.loads(line.split("] ", 1)[-1]) for line in stdout.splitlines() if '"step"' in line]
                self.assertEqual([s["shape_headers"] for s in steps], [0] * STEPS)
                with open(log) as f:
                    logged = [json.loads(line) for line in f]
                offsets = np.concatenate([[0], np.cumsum(lengths)])
                for line in logged:  # each row is a stored row: its start, its ids but the last
                    for start, length in zip(line["window_starts"], line["window_lengths"]):
                        row = int(np.searchsorted(offsets, start))
                        self.assertEqual(offsets[row], start)
                        self.assertEqual(lengths[row] - 1, length)
                if want is None:
                    want = torch_reference(ids, logged, ragged=True)
                np.testing.assert_allclose([s["loss"] for s in steps], want[0], rtol=RTOL, atol=ATOL)
                trained = initializers(os.path.join(out, "trained.onnx"))
                for name, value in fold_sources(self.model).items():
                    trained.setdefault(value, trained[name].T)
                for name, parameter in want[1].items():
                    np.testing.assert_allclose(trained[name], parameter.detach().numpy(), rtol=RTOL, atol=ATOL, err_msg=name)
        code, _, err = run("train", self.plans[2], "--data", data, "--tokens", "uint16", "--row-lengths", data,
                           "--batch", 4, "--steps", 1)
        self.assertOneLineError(code, err, "--row-lengths")
        code, _, err = run("train", self.plans[2], "--data", data, "--tokens", "uint16", "--row-lengths", lengths_file,
                           "--seq-lens", "4,8", "--batch", 4, "--steps", 1)
        self.assertOneLineError(code, err, "--row-lengths gives each row its own length", exit_code=2)

    def test_lengths_that_cannot_be_rectangles_are_usage_errors(self):
        args = ["train", self.plans[2], "--data", self.data, "--tokens", "uint16", "--batch", 10, "--steps", 1]
        code, _, err = run(*args, "--microbatches", 4, "--seq-lens", "8,16", "--seq-len-per", "microbatch")
        self.assertOneLineError(code, err, "--seq-len-per microbatch needs --batch 10 to split into 4 equal microbatches",
                                exit_code=2)
        code, _, err = run(*args, "--seq-lens", "8-16/3")
        self.assertOneLineError(code, err, "--seq-lens 8-16/3: give lengths taken in turn", exit_code=2)
        code, _, err = run(*args, "--seq-lens", "8,16", "--seq-len", 8)
        self.assertOneLineError(code, err, "--seq-len and --seq-lens", exit_code=2)
        # The second step's 32 is longer than the model's positions: its first op that cannot take it fails.
        code, _, err = run(*args[:-1], 2, "--seq-lens", "8,32")
        self.assertEqual(code, 1, err)
        self.assertIn("cleave train: error: node ", err.splitlines()[-1])
        self.assertIn("must match the size", err.splitlines()[-1])

    def test_a_bucketing_rule_draws_its_lengths_by_seed(self):
        logs = []
        for seed in (0, 0, 1):
            log = self.path(f"bucket{len(logs)}.jsonl")
            code, _, err = run("train", self.model, "--data", self.data, "--tokens", "uint16", "--batch", 4, "--steps", 12,
                               "--seq-lens", "4-16/4", "--seed", seed, "--log", log)
            self.assertEqual(code, 0, err)
            with open(log) as f:
                logs.append([json.loads(line)["window_lengths"][0] for line in f])
        self.assertEqual(logs[0], logs[1])
        self.assertNotEqual(logs[0], logs[2])
        self.assertTrue(set(logs[0]) <= {4, 8, 12, 16} and len(set(logs[0])) > 1, logs[0])


if __name__ == "__main__":
    main()
