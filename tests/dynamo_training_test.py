"""`cleave train` on torch 2.x's default ONNX exporter (issue 71, part 1): what trains is what the
ExportedProgram's signature calls a parameter, and a run stops at a step that is not finite.

The model has what users' models have and what the exporter's optimizer (`optimize=True`, the
default) rewrites: float literals in the forward and in the loss (a scale, an offset, an exponent,
an attention's 1/sqrt(d)), which it writes as initializers with no note; several freshly
initialized LayerNorms and a parameter of ones, which it merges into one initializer; GELU; an
embedding tied to the head; a registered buffer; a frozen parameter (`--frozen`); transposed
weights, which it folds. Exported with the defaults and with `optimize=False`, each is trained by
cleave and by torch.optim (SGD with momentum, AdamW): every parameter must equal torch's (rtol
1e-5, atol 4e-5), every other initializer must come back byte for byte, and the losses must agree.

A step whose loss is not finite stops the run with exit 1 and one line naming the step, with
nothing written over the output or the last checkpoint, on one process and on 2 ranks;
`--skip-nonfinite` skips such steps and leaves the parameters as the last finite step left them.
"""
import json
import math
import os
import warnings

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from exporters_test import torch_losses
from testlib import TempDirTest, launch, main, run

torch.set_num_threads(1)
VOCAB, WIDTH, HEADS, SEQ, ROWS, BATCH, STEPS = 40, 16, 2, 8, 12, 4, 3


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(WIDTH), torch.nn.LayerNorm(WIDTH)
        # No bias on q, k, v: the key bias's true gradient is 0 (softmax ignores a shift per row), so
        # AdamW would scale rounding noise to whole steps, on either side.
        self.qkv, self.proj = torch.nn.Linear(WIDTH, 3 * WIDTH, bias=False), torch.nn.Linear(WIDTH, WIDTH)
        self.fc, self.out = torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        rows = x.shape[0]
        q, k, v = self.qkv(self.ln1(x)).split(WIDTH, dim=-1)
        heads = lambda t: t.view(rows, SEQ, HEADS, WIDTH // HEADS).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(WIDTH // HEADS))
        attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(rows, SEQ, WIDTH)
        x = x + self.proj(attended)
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.register_buffer("position", torch.randn(SEQ, WIDTH) * 0.1)
        self.gain = torch.nn.Parameter(torch.ones(WIDTH))  # equal to every LayerNorm's weight
        self.shift = torch.nn.Parameter(torch.randn(WIDTH) * 0.1, requires_grad=False)  # frozen

    def forward(self, tokens, target):
        x = self.embed(tokens) + self.position
        for block in self.blocks:
            x = block(x)
        x = self.norm(x) * self.gain * 1.5 + 0.25 + self.shift
        x = x.pow(2.0) * 0.1 + x
        logits = self.head(x)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1)) * 2.0


def make_model():
    torch.manual_seed(0)
    return Model().train()


def export(module, example, path, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, example, path, dynamo=True, input_names=["tokens", "target"],
                          output_names=["loss"], **options)


def make_optimizer(kind, parameters):
    if kind == "sgd":
        return torch.optim.SGD(parameters, lr=0.05, momentum=0.9)
    return torch.optim.AdamW(parameters, lr=0.01)


def cleave_optimizer(kind):
    return ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"] if kind == "sgd" else \
        ["--optimizer", "adamw", "--lr", "0.01"]


def torch_training(kind, tokens, target):
    """torch.optim's losses and trained parameters, rows as `cleave train` takes them."""
    module = make_model()
    optimizer = make_optimizer(kind, [p for p in module.parameters() if p.requires_grad])
    losses = torch_losses(module, optimizer, tokens, target, BATCH, STEPS)
    return losses, dict(module.named_parameters(remove_duplicate=False))


def initializers(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def fold_sources(path):
    """{initializer: its one source} for the optimizer's single-source folds (transposed weights)."""
    sources = {}
    for info in onnx.load(path).graph.value_info:
        for prop in info.metadata_props:
            if prop.key == "pkg.onnxscript.optimizer.folded_from":
                names = eval(prop.value)  # a Python list's text, as the exporter writes it
                if len(names) == 1 and "." in names[0]:
                    sources[info.name] = names[0]
    return sources


class TokenData(TempDirTest):
    """ROWS rows of tokens and targets, in data.npz."""

    def setUp(self):
        super().setUp()
        g = torch.Generator().manual_seed(5)
        self.tokens = torch.randint(0, VOCAB, (ROWS, SEQ), generator=g)
        self.target = torch.randint(0, VOCAB, (ROWS, SEQ), generator=g)
        self.data = os.path.join(self.tmp, "data.npz")
        np.savez(self.data, tokens=self.tokens.numpy(), target=self.target.numpy())


class DynamoTraining(TokenData):
    def check_training(self, optimize, kind):
        way = f"optimize={optimize}, {kind}"
        model = os.path.join(self.tmp, f"model_{optimize}.onnx")
        if not os.path.exists(model):
            export(make_model(), (self.tokens[:BATCH], self.target[:BATCH]), model, optimize=optimize)
        out = os.path.join(self.tmp, f"trained_{optimize}_{kind}")
        code, stdout, err = run("train", model, "--data", self.data, "--batch", BATCH, "--steps", STEPS,
                                *cleave_optimizer(kind), "--frozen", "shift", "--json", "-o", out)
        self.assertEqual(code, 0, f"{way}: {err}")
        lines = [json.loads(line) for line in stdout.splitlines()]
        want_losses, want = torch_training(kind, self.tokens, self.target)
        np.testing.assert_allclose([line["loss"] for line in lines], want_losses, rtol=1e-5, err_msg=way)
        trainable = lines[0]["trainable"]
        self.assertEqual(trainable["rule"], "listed", way)
        if optimize:  # the literals are held fixed, the merged LayerNorm weights and biases train apart
            self.assertGreater(trainable["fixed"]["constant"], 0, way)
            self.assertGreater(trainable["merged_split"], 0, way)

        exported, trained = initializers(model), initializers(os.path.join(out, "trained.onnx"))
        folds = fold_sources(model)
        initial = dict(make_model().named_parameters(remove_duplicate=False))
        compared = set()
        for name, value in trained.items():
            if name in want or name in folds:
                source = folds.get(name, name)
                expected = want[source].detach().numpy()
                if name in folds and not np.array_equal(exported[name], initial[source].detach().numpy()):
                    expected = expected.T  # a transposed weight trains in its place
                np.testing.assert_allclose(value, expected, rtol=1e-5, atol=4e-5, err_msg=f"{way}: {name}")
                compared.add(source)
            else:  # a literal, a buffer or a fold of constants: byte for byte
                self.assertIn(name, exported, f"{way}: {name} is neither a parameter nor the export's")
                self.assertEqual(value.tobytes(), exported[name].tobytes(), f"{way}: {name} changed")
        # Every parameter of the module trained (or, frozen, stayed), each as its own tensor; the
        # tied embedding and head are one.
        tied = {"embed.weight", "head.weight"}
        self.assertEqual(compared - tied, set(want) - tied, way)
        self.assertEqual(len(compared & tied), 1, way)

    def test_default_export_sgd(self):
        self.check_training(True, "sgd")

    def test_default_export_adamw(self):
        self.check_training(True, "adamw")

    def test_unoptimized_export_sgd(self):
        self.check_training(False, "sgd")

    def test_unoptimized_export_adamw(self):
        self.check_training(False, "adamw")


class PositionEmbedded(torch.nn.Module):
    """GPT-2's learned positions at a fixed length: the optimizer folds `positions(arange(SEQ))`,
    a parameter gathered by constants, into one initializer."""

    def __init__(self):
        super().__init__()
        self.embed, self.positions = torch.nn.Embedding(VOCAB, WIDTH), torch.nn.Embedding(SEQ, WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens, target):
        logits = self.head(self.embed(tokens) + self.positions(torch.arange(SEQ)))
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))


class FoldedParameter(TokenData):
    def test_a_parameter_folded_with_constants_is_refused_before_the_first_step(self):
        torch.manual_seed(0)
        model = os.path.join(self.tmp, "positions.onnx")
        export(PositionEmbedded().train(), (self.tokens[:BATCH], self.target[:BATCH]), model)
        out = os.path.join(self.tmp, "out")
        code, stdout, err = run("train", model, "--data", self.data, "--batch", BATCH, "--steps", 1, "-o", out)
        self.assertEqual(code, 1, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("was folded from 'positions.weight' and constants", err)
        self.assertIn("optimize=False", err)
        self.assertEqual(stdout, "")  # before the first step
        self.assertFalse(os.path.exists(out))
        # It still runs as exported.
        code, _, err = run("run", model, "--inputs", self.data)
        self.assertEqual(code, 0, err)


class Overflowing(torch.nn.Module):
    """exp of a product: finite at the first step, infinite after one large SGD step."""

    def __init__(self):
        super().__init__()
        self.first, self.second = torch.nn.Linear(4, 4, bias=False), torch.nn.Linear(4, 1, bias=False)

    def forward(self, x):
        return torch.exp(self.second(torch.tanh(self.first(x)))).mean()


class NonFinite(TempDirTest):
    LR = "1000"

    def setUp(self):
        super().setUp()
        torch.manual_seed(1)
        self.module = Overflowing()
        self.x = torch.rand(8, 4) + 0.5
        self.model = os.path.join(self.tmp, "overflow.onnx")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(self.module, (self.x[:4],), self.model, dynamo=True, input_names=["x"],
                              output_names=["loss"])
        self.data = os.path.join(self.tmp, "x.npz")
        np.savez(self.data, x=self.x.numpy())
        # torch: the first step is finite, the second's loss is not.
        optimizer = torch.optim.SGD(self.module.parameters(), lr=float(self.LR))
        self.module(self.x[:4]).backward()
        optimizer.step()
        with torch.no_grad():
            self.assertFalse(math.isfinite(self.module(self.x[4:]).item()))

    def train(self, *extra):
        return run("train", self.model, "--data", self.data, "--batch", 4, "--steps", 3, "--lr", self.LR, *extra)

    def test_a_non_finite_step_stops_the_run_and_writes_nothing(self):
        out = os.path.join(self.tmp, "out")  # an earlier run's output, to be left as it is
        run("train", self.model, "--data", self.data, "--batch", 4, "--steps", 1, "--lr", "0.001", "-o", out,
            check=True)
        with open(os.path.join(out, "trained.onnx"), "rb") as f:
            earlier = f.read()
        checkpoints = os.path.join(self.tmp, "ck")
        code, stdout, err = self.train("-o", out, "--checkpoint-dir", checkpoints, "--checkpoint-every", "1")
        self.assertEqual(code, 1, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("step 2: the loss is inf", err)
        self.assertIn("step 1/3", stdout)
        with open(os.path.join(out, "trained.onnx"), "rb") as f:
            self.assertEqual(f.read(), earlier)
        self.assertEqual(sorted(os.listdir(checkpoints)), ["step-00000001"])  # the last good checkpoint only

    def test_skip_nonfinite_skips_and_counts(self):
        out = os.path.join(self.tmp, "out")
        code, stdout, err = self.train("--skip-nonfinite", "--json", "-o", out)
        self.assertEqual(code, 0, err)
        lines = [json.loads(line) for line in stdout.splitlines()]
        self.assertEqual([line.get("skipped", False) for line in lines], [False, True, True])
        self.assertIn("skipped 2 of 3 step(s)", err)
        trained = initializers(os.path.join(out, "trained.onnx"))
        for name, parameter in self.module.named_parameters():  # as the first step left them
            np.testing.assert_allclose(trained[name], parameter.detach().numpy(), rtol=1e-5, atol=1e-6)

    def test_a_pipeline_stops_on_every_rank(self):
        stages = os.path.join(self.tmp, "stages")
        run("pipeline", self.model, "--stages", 2, "-o", stages, check=True)
        code, _, err = launch(2, "cleave", "train", stages, "--data", self.data, "--batch", 4, "--microbatches", 2,
                              "--steps", 3, "--lr", self.LR, "--schedule", "1f1b")
        self.assertEqual(code, 1, err)
        self.assertIn("step 2: the loss is inf", err)
        self.assertNotIn("Timed out", err)


if __name__ == "__main__":
    main()
