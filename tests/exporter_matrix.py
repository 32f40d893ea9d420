"""The exporter matrix (issue 61): the models users bring, exported both ways PyTorch 2.x exports
them, each way through every cleave command a user runs on it.

Models: resnet50, mobilenet_v3_large, vit_b_16 and swin_t (torchvision's own classes, at 64x64
images), a BERT-style encoder (token, position and segment embeddings, an attention mask input,
post-norm blocks, a pooled classifier), a GPT-2-style decoder (tools/export_zoo.py), a LLaMA-style
decoder (RMSNorm, rotary embeddings, SwiGLU, an embedding tied to the head) and a 2-layer
bidirectional LSTM tagger (tools/export_zoo.py). Random weights, fixed seeds.

Ways: torch.onnx.export's default since 2.9, the torch.export-based exporter (dynamo=True), and
the TorchScript one (dynamo=False, opset 18), each with a static batch and a dynamic one.

Cells, for each model and way:
  inspect    `cleave inspect --json` reads it (nodes, opset);
  split      `cleave split --profile examples/profiles/gpu.json` cuts it into no more submodules
             than the TorchScript export of the same model and batch (after folding);
  pipeline   `cleave pipeline --stages 4` plans 4 stages;
  run        `cleave run` equals ONNX Runtime (PyPI's) on every output: max |cleave - ORT| over the
             output's largest |ORT| at most 1e-4; a dynamic batch runs 3 rows, not the exported 2;
  verify     `cleave verify` of the 4-stage plan against the whole model;
  train      the model with its cross-entropy loss, exported the same way in training mode (dropout
             and stochastic depth at p=0, so both sides are deterministic; BatchNorm on batch
             statistics), `cleave train` for 3 SGD steps with momentum: every step's loss equals
             torch.optim's on the same module and rows (rtol 1e-4).
A second table takes every model tools/export_zoo.py exports (--small) both ways, TorchScript at
the zoo's opsets and dynamo at its default: `cleave run` against ONNX Runtime, and the split with
gpu.json (the dynamo export no larger than the TorchScript one).
An exporter that fails on a model makes its cells name the exporter's error; that is not cleave's
failure. Any other failed cell fails the script (exit 1).

usage: .venv/bin/python3 tests/exporter_matrix.py CLEAVE [--write docs/exporters.md]
                                                  [--models NAME ...] [--ways WAY ...] [--keep DIR] [--no-zoo]
ctest runs it as `exporter_matrix`, label `slow` (left out of scripts/test; `ctest -L slow`).
"""
import argparse
import copy
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

import numpy as np
import onnx
import onnxruntime
import torch
import torchvision

SOURCE_DIR = os.environ.get("CLEAVE_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tools"))
from cleave_onnx import list_fixed_tensors  # noqa: E402
from export_zoo import Gpt2, LlamaDecoder, Recurrent, randomize  # noqa: E402
from export_zoo import exporter_error as exporter_cause  # noqa: E402

GPU_PROFILE = os.path.join(SOURCE_DIR, "examples", "profiles", "gpu.json")
RUN_TOLERANCE = 1e-4
LOSS_RTOL, LOSS_ATOL = 1e-4, 1e-6
EXPORT_BATCH, OTHER_BATCH = 2, 3
TRAIN_STEPS, LR, MOMENTUM = 3, 1e-3, 0.9
WAYS = ("dynamo-static", "dynamo-dynamic", "torchscript-static", "torchscript-dynamic")
COLUMNS = ("inspect", "split", "pipeline", "run", "verify", "train")


class BertStyle(torch.nn.Module):
    """A BERT-style encoder: token, position and segment embeddings with LayerNorm, post-norm
    blocks of masked self-attention (an additive mask from the attention_mask input) and a GELU
    MLP, and a tanh pooler over the first token feeding a classifier."""

    def __init__(self, vocab=1000, dim=128, heads=4, layers=2, context=64, classes=4):
        super().__init__()
        self.heads = heads
        self.tokens, self.positions = torch.nn.Embedding(vocab, dim), torch.nn.Embedding(context, dim)
        self.segments = torch.nn.Embedding(2, dim)
        self.norm = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.ModuleList([torch.nn.Linear(dim, 3 * dim) for _ in range(layers)])
        self.out = torch.nn.ModuleList([torch.nn.Linear(dim, dim) for _ in range(layers)])
        self.norm1 = torch.nn.ModuleList([torch.nn.LayerNorm(dim) for _ in range(layers)])
        self.mlp = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(),
                                                            torch.nn.Linear(4 * dim, dim)) for _ in range(layers)])
        self.norm2 = torch.nn.ModuleList([torch.nn.LayerNorm(dim) for _ in range(layers)])
        self.pooler, self.classifier = torch.nn.Linear(dim, dim), torch.nn.Linear(dim, classes)

    def forward(self, ids, segments, attention_mask):
        rows, steps = ids.shape
        positions = torch.arange(steps, dtype=torch.long).unsqueeze(0)
        x = self.norm(self.tokens(ids) + self.positions(positions) + self.segments(segments))
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        dim = x.size(-1)
        for qkv, out, norm1, mlp, norm2 in zip(self.qkv, self.out, self.norm1, self.mlp, self.norm2):
            q, k, v = (t.reshape(rows, steps, self.heads, dim // self.heads).transpose(1, 2)
                       for t in qkv(x).split(dim, dim=-1))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(dim // self.heads) + bias
            attended = torch.matmul(scores.softmax(-1), v).transpose(1, 2).reshape(rows, steps, dim)
            x = norm1(x + out(attended))
            x = norm2(x + mlp(x))
        return self.classifier(torch.tanh(self.pooler(x[:, 0])))


def image(batch, generator):
    return {"x": torch.randn(batch, 3, 64, 64, generator=generator)}


def tokens(vocab, steps):
    return lambda batch, g: {"ids": torch.randint(0, vocab, (batch, steps), generator=g)}


def bert_inputs(batch, g):
    mask = torch.ones(batch, 16, dtype=torch.long)
    mask[:, 12:] = 0
    return {"ids": torch.randint(0, 1000, (batch, 16), generator=g),
            "segments": (torch.arange(16) >= 8).long().expand(batch, 16).contiguous(), "attention_mask": mask}


def classes(count):
    return lambda batch, g: torch.randint(0, count, (batch,), generator=g)


def per_step(count, steps):
    return lambda batch, g: torch.randint(0, count, (batch, steps), generator=g)


vision = torchvision.models
# name: (make the module, its inputs for a batch, its loss target for a batch). The inference
# cells run it with tools/export_zoo.py's random weights (randomize), the train cell as made.
MODELS = {
    # Each residual branch's last BatchNorm starts at zero (torchvision's option for training):
    # else a fresh resnet50's training on batch statistics of 2 images is so ill-conditioned that
    # torch.optim's own losses differ by 1% between 1 and 2 threads after one step.
    "resnet50": (lambda: vision.resnet50(weights=None, zero_init_residual=True), image, classes(1000)),
    "mobilenet_v3": (lambda: vision.mobilenet_v3_large(weights=None), image, classes(1000)),
    "vit_b_16": (lambda: vision.vit_b_16(weights=None, image_size=64), image, classes(1000)),
    "swin_t": (lambda: vision.swin_t(weights=None), image, classes(1000)),
    "bert": (BertStyle, bert_inputs, classes(4)),
    "gpt2": (Gpt2, tokens(1000, 16), per_step(1000, 16)),
    "llama": (LlamaDecoder, tokens(256, 16), per_step(256, 16)),
    # The tagger reads the per-step outputs only: torch.export fails on the zoo's form, which also
    # reads the final hidden state (RuntimeError: a broadcast of [1, 1, 2, 1], torch 2.11).
    "lstm": (lambda: Recurrent(torch.nn.LSTM, mix_state=False), lambda batch, g: {"x": torch.randn(batch, 10, 16, generator=g)},
             per_step(8, 10)),
}


class WithLoss(torch.nn.Module):
    """The model and its cross-entropy: logits [..., C] against integer targets [...]."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *args):
        *inputs, target = args
        logits = self.model(*inputs)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1))


def deterministic_training(model):
    """Training mode with every dropout and stochastic depth at p=0: both sides draw nothing."""
    for module in model.modules():
        if isinstance(module, (torch.nn.Dropout, torchvision.ops.StochasticDepth)):
            module.p = 0.0
        if hasattr(module, "dropout") and isinstance(getattr(module, "dropout"), float):
            module.dropout = 0.0
        if hasattr(module, "attention_dropout"):
            module.attention_dropout = 0.0
        if hasattr(module, "stochastic_depth_prob"):
            module.stochastic_depth_prob = 0.0
    return model.train()


def export(module, inputs, path, way, training, optimize=True):
    """Exports `module` on `inputs` (a dict, in order) the way named (`optimize`: the dynamo
    exporter's option); raises what the exporter raises."""
    exporter, batch = way.split("-")
    names = list(inputs)
    args = tuple(inputs.values())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            shapes = None
            if batch == "dynamic":
                rows = torch.export.Dim("batch", min=1, max=1024)
                shapes = {name: {0: rows} for name in names}
                if isinstance(module, WithLoss):  # forward(*args): torch.export names them all "args"
                    shapes = {"args": tuple(shapes.values())}
            # The exporter's defaults first, for training too (optimize=True): cleave holds its
            # literals fixed and trains the parameters its optimizer merged apart, and refuses an
            # export whose notes cannot say what trains (docs/distributed.md).
            torch.onnx.export(module, args, path, dynamo=True, input_names=names, dynamic_shapes=shapes,
                              optimize=optimize, verbose=False)
        else:
            axes = {name: {0: "batch"} for name in names} if batch == "dynamic" else None
            mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
            torch.onnx.export(module, args, path, dynamo=False, opset_version=18, input_names=names,
                              dynamic_axes=axes, training=mode, do_constant_folding=not training)


def cleave(binary, *args, timeout=1800):
    proc = subprocess.run([binary, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def last_line(text):
    """cleave's error is its last line on stderr; a traceback's cause is its last line too."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else "(no message)"


class Cell:
    def __init__(self, state, text):
        # state: pass, fail, exporter, gap (KNOWN_GAPS) or unchecked (a detector's tied scores)
        self.state, self.text = state, text

    def markdown(self):
        mark = {"pass": "✓", "fail": "✗ FAIL", "exporter": "exporter failed:", "gap": "✗ known gap:",
                "unchecked": "– not compared:"}[self.state]
        return f"{mark} {self.text}".replace("|", "\\|")


def exporter_error(error):
    return Cell("exporter", exporter_cause(error))


class Row:
    def __init__(self, binary, work, name, way):
        self.binary, self.name, self.way = binary, name, way
        self.dir = os.path.join(work, f"{name}-{way}")
        os.makedirs(self.dir, exist_ok=True)
        self.cells = {}
        self.submodules = None

    def path(self, leaf):
        return os.path.join(self.dir, leaf)

    def command(self, column, *args, timeout=1800):
        code, out, err = cleave(self.binary, *args, timeout=timeout)
        if code != 0:
            self.cells[column] = Cell("fail", f"exit {code}: {last_line(err)}")
        return code, out

    def fill(self):
        make, inputs_for, _ = MODELS[self.name]
        torch.manual_seed(0)
        module = randomize(make()).eval()
        inputs = inputs_for(EXPORT_BATCH, torch.Generator().manual_seed(2))
        model = self.path("model.onnx")
        try:
            export(module, inputs, model, self.way, training=False)
        except Exception as error:  # noqa: BLE001 - any exporter failure is reported, not raised
            for column in COLUMNS[:-1]:
                self.cells[column] = exporter_error(error)
        else:
            self.inference_cells(model, module)
        self.train_cell()

    def inference_cells(self, model, module):
        code, out = self.command("inspect", "inspect", model, "--json")
        if code == 0:
            summary = json.loads(out)
            self.cells["inspect"] = Cell("pass", f"{summary['nodes']} nodes, opset {onnx.load(model, load_external_data=False).opset_import[0].version}")
        cut = self.path("cut")
        code, _ = self.command("split", "split", model, "--profile", GPU_PROFILE, "-o", cut)
        if code == 0:
            with open(os.path.join(cut, "plan.json")) as f:
                roles = [s["role"] for s in json.load(f)["submodules"]]
            self.submodules = len(roles)
            self.cells["split"] = Cell("pass", f"{roles.count('acc')} acc + {len(roles) - roles.count('acc')} cpu")
        stages = self.path("stages")
        code, _ = self.command("pipeline", "pipeline", model, "--stages", 4, "-o", stages)
        if code == 0:
            with open(os.path.join(stages, "plan.json")) as f:
                count = len(json.load(f)["submodules"])
            self.cells["pipeline"] = Cell("pass" if count == 4 else "fail", f"{count} stages")
        rows = OTHER_BATCH if self.way.endswith("dynamic") else EXPORT_BATCH
        _, inputs_for, _ = MODELS[self.name]
        feed = {k: v.numpy() for k, v in inputs_for(rows, torch.Generator().manual_seed(5)).items()}
        data = self.path("inputs.npz")
        np.savez(data, **feed)
        self.run_cell(model, data, feed)
        if "pipeline" in self.cells and self.cells["pipeline"].state == "pass":
            code, _ = self.command("verify", "verify", model, stages, "--inputs", data)
            if code == 0:
                self.cells["verify"] = Cell("pass", "4 stages equal the model")
        else:
            self.cells["verify"] = Cell("fail", "no plan to verify")

    def run_cell(self, model, data, feed):
        outputs = self.path("outputs.npz")
        code, _ = self.command("run", "run", model, "--inputs", data, "--save-outputs", outputs)
        if code != 0:
            return
        session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        wanted = session.run(None, feed)
        found = np.load(outputs)
        worst = 0.0
        for name, want in zip(names, wanted):
            got = found[name]
            if got.shape != want.shape:
                self.cells["run"] = Cell("fail", f"output {name} has shape {got.shape}, ORT {want.shape}")
                return
            scale = max(float(np.abs(want).max()), 1e-30) if want.size else 1.0
            worst = max(worst, float(np.abs(got.astype(np.float64) - want).max()) / scale if want.size else 0.0)
        state = "pass" if worst <= RUN_TOLERANCE else "fail"
        self.cells["run"] = Cell(state, f"max error {worst:.0e} of the output's scale")

    def train_cell(self):
        make, inputs_for, target_for = MODELS[self.name]
        torch.manual_seed(0)
        module = deterministic_training(WithLoss(make()))
        reference = copy.deepcopy(module)
        g = torch.Generator().manual_seed(7)
        example = inputs_for(EXPORT_BATCH, g)
        example["target"] = target_for(EXPORT_BATCH, g)
        model = self.path("loss.onnx")
        try:
            export(module, example, model, self.way, training=True)
            list_fixed_tensors(model, module)
        except Exception as error:  # noqa: BLE001
            self.cells["train"] = exporter_error(error)
            return
        rows = EXPORT_BATCH * TRAIN_STEPS
        g = torch.Generator().manual_seed(11)
        data = inputs_for(rows, g)
        data["target"] = target_for(rows, g)
        path = self.path("train.npz")
        np.savez(path, **{k: v.numpy() for k, v in data.items()})
        oracle = export_oracle(model, {k: v[:EXPORT_BATCH] for k, v in data.items()}, reference)
        if oracle is not None:
            self.cells["train"] = oracle
            return
        train = ("train", model, "--data", path, "--batch", EXPORT_BATCH, "--steps", TRAIN_STEPS, "--optimizer", "sgd",
                 "--lr", LR, "--momentum", MOMENTUM, "--json")
        code, out, err = cleave(self.binary, *train)
        refused = None
        marker = "cannot train as its module would: "
        if code != 0 and marker in err and self.way.startswith("dynamo"):
            # The default export's notes cannot say what trains (a parameter folded with
            # constants): cleave refuses it before the first step, and optimize=False trains.
            refused = last_line(err).split(marker, 1)[1].split(", and nothing says")[0]
            export(module, example, model, self.way, training=True, optimize=False)
            list_fixed_tensors(model, module)
            code, out, err = cleave(self.binary, *train)
        if code != 0:
            self.cells["train"] = Cell("fail", f"exit {code}: {last_line(err)}")
            return
        losses = [json.loads(line)["loss"] for line in out.splitlines() if line.startswith("{")]
        want = torch_losses(reference, data)
        try:
            np.testing.assert_allclose(losses, want, rtol=LOSS_RTOL, atol=LOSS_ATOL)
        except AssertionError:
            self.cells["train"] = Cell("fail", f"losses {losses} != torch.optim's {want}")
            return
        worst = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(losses, want))
        self.cells["train"] = Cell("pass", f"{TRAIN_STEPS} losses equal torch.optim's (max rel {worst:.0e})"
                                   + (f"; the default export refused ({refused}), optimize=False trained" if refused
                                      else ""))


def export_oracle(model, first_rows, module):
    """None when ONNX Runtime's loss of the export on the first step's rows is the module's own;
    else the exporter's cell: the export computes another loss than the module it came from."""
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    feed = {i.name: first_rows[i.name].numpy() for i in session.get_inputs()}
    exported = float(session.run(None, feed)[0])
    with torch.no_grad():
        wanted = float(copy.deepcopy(module)(*first_rows.values()))
    if math.isclose(exported, wanted, rel_tol=LOSS_RTOL, abs_tol=LOSS_ATOL):
        return None
    return Cell("exporter", f"the export's loss is not the module's: ONNX Runtime {exported:.6g}, torch {wanted:.6g}")


def torch_losses(module, data):
    optimizer = torch.optim.SGD(module.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for step in range(TRAIN_STEPS):
        rows = slice(step * EXPORT_BATCH, (step + 1) * EXPORT_BATCH)
        optimizer.zero_grad()
        loss = module(*(v[rows] for v in data.values()))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


ZOO_SCRIPT = os.path.join(SOURCE_DIR, "tools", "export_zoo.py")
ZOO_COLUMNS = ("dynamo run", "dynamo split", "torchscript run", "torchscript split")


def export_zoo_both_ways(work):
    """tools/export_zoo.py --small into work/zoo-dynamo and work/zoo-torchscript; returns the
    folders and the dynamo exporter's failures by model (its own words)."""
    folders, failures = {}, {}
    for exporter in ("dynamo", "torchscript"):
        folder = folders[exporter] = os.path.join(work, "zoo-" + exporter)
        flags = ["--small"] + (["--dynamo"] if exporter == "dynamo" else [])
        proc = subprocess.run([sys.executable, ZOO_SCRIPT, folder, *flags], capture_output=True, text=True, timeout=3600)
        if proc.returncode != 0:
            raise RuntimeError(f"export_zoo.py {' '.join(flags)} failed: {last_line(proc.stderr)}")
        for line in proc.stdout.splitlines():
            if line.startswith("the dynamo exporter failed on "):
                name, cause = line[len("the dynamo exporter failed on "):].split(": ", 1)
                failures[name] = cause
    return folders, failures


# The zoo's detectors return boxes, scores and labels (tools/export_zoo.py's Detector). Their random
# weights give many equal scores, whose order (and which of them a top-k keeps) is the runtime's
# choice: ONNX Runtime and cleave agree on the scores, sorted, and those are what is compared.
DETECTORS = {"ssdlite", "fasterrcnn", "retinanet", "maskrcnn", "fcos", "ssd300"}
# Cells that fail for a known reason in cleave, named: shown as such and not counted as failures,
# as tests/onnx_backend/expected_failures.txt does for the backend suite. One that passes is
# reported, to be taken off this list.
KNOWN_GAPS = {
    ("dlrm", "dynamo split"): "the dynamo exporter writes EmbeddingBag as a Loop over a sequence (its int64 offsets "
                              "arithmetic split between the acc and the CPU) and the interaction's indexing as "
                              "GatherND, which gpu.json lacks",
}


def zoo_feed(inputs_json):
    with open(inputs_json) as f:
        specs = json.load(f)
    return {name: np.array(spec["data"], dtype=spec["dtype"]).reshape(spec["dims"]) for name, spec in specs.items()}


def zoo_run_cell(binary, name, model, inputs_json, work):
    """cleave against ONNX Runtime on the zoo's sample input (a detector: its scores, sorted)."""
    outputs = os.path.join(work, "outputs.npz")
    code, _, err = cleave(binary, "run", model, "--inputs", inputs_json, "--save-outputs", outputs)
    if code != 0:
        return Cell("fail", f"exit {code}: {last_line(err)}")
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    found, worst = np.load(outputs), 0.0
    pairs = list(zip(session.get_outputs(), session.run(None, zoo_feed(inputs_json))))
    if name in DETECTORS:
        pairs = [(pairs[1][0], np.sort(pairs[1][1], axis=None))]
    for output, want in pairs:
        got = found[output.name].astype(np.float64)
        got = np.sort(got, axis=None) if name in DETECTORS else got
        if got.shape != want.shape:
            worst = math.inf
        elif want.size:
            worst = max(worst, float(np.abs(got - want).max()) / max(float(np.abs(want).max()), 1e-30))
    if name not in DETECTORS:
        return Cell("pass" if worst <= RUN_TOLERANCE else "fail", f"max error {worst:.0e}")
    if worst <= RUN_TOLERANCE:
        return Cell("pass", f"scores, sorted: max error {worst:.0e}")
    return Cell("unchecked", f"scores, sorted: max error {worst:.0e}; an untrained detector's scores tie, so which "
                             "boxes NMS keeps turns on rounding (bench/RESULTS.md, issue 16)")


def zoo_cells(binary, name, model, inputs_json, work):
    """run (zoo_run_cell), and split: gpu.json's submodules."""
    run_cell = zoo_run_cell(binary, name, model, inputs_json, work)
    cut = os.path.join(work, "cut")
    code, _, err = cleave(binary, "split", model, "--profile", GPU_PROFILE, "--plan-only", "-o", cut)
    if code != 0:
        return run_cell, Cell("fail", f"exit {code}: {last_line(err)}"), None
    with open(os.path.join(cut, "plan.json")) as f:
        roles = [m["role"] for m in json.load(f)["submodules"]]
    acc = roles.count("acc")
    return run_cell, Cell("pass", f"{acc} acc + {len(roles) - acc} cpu"), len(roles)


def zoo_rows(binary, work):
    """Every model tools/export_zoo.py exports (--small), both ways."""
    folders, failures = export_zoo_both_ways(work)
    names = sorted(f[:-len(".onnx")] for f in os.listdir(folders["torchscript"]) if f.endswith(".onnx"))
    rows = []
    for name in names:
        cells, counts = {}, {}
        for exporter in ("dynamo", "torchscript"):
            model = os.path.join(folders[exporter], name + ".onnx")
            if not os.path.exists(model):
                cells[f"{exporter} run"] = cells[f"{exporter} split"] = Cell("exporter", failures.get(name, "no export"))
                continue
            scratch = os.path.join(work, f"zoo-{name}-{exporter}")
            os.makedirs(scratch, exist_ok=True)
            inputs_json = os.path.join(folders[exporter], name + ".inputs.json")
            cells[f"{exporter} run"], cells[f"{exporter} split"], counts[exporter] = zoo_cells(binary, name, model,
                                                                                                inputs_json, scratch)
        if counts.get("dynamo") is not None and counts.get("torchscript") is not None and \
                counts["dynamo"] > counts["torchscript"]:
            cells["dynamo split"] = Cell("fail", f"{cells['dynamo split'].text}: more than TorchScript's "
                                                 f"{counts['torchscript']}")
        for column in ZOO_COLUMNS:
            gap = KNOWN_GAPS.get((name, column))
            if gap and cells[column].state == "fail":
                cells[column] = Cell("gap", f"{cells[column].text} ({gap})")
            elif gap:
                print(f"now passes (take it off KNOWN_GAPS): {name} {column}", file=sys.stderr)
        print(f"zoo {name}: " + " ".join(f"{c}={cells[c].state}" for c in ZOO_COLUMNS), flush=True)
        rows.append((name, cells))
    return rows


def compare_splits(rows):
    """split: a dynamo export cuts into no more submodules than the TorchScript export of the same model and batch."""
    by_key = {(r.name, r.way): r for r in rows}
    for row in rows:
        exporter, batch = row.way.split("-")
        twin = by_key.get((row.name, f"torchscript-{batch}"))
        if exporter != "dynamo" or row.submodules is None or twin is None or twin.submodules is None:
            continue
        cell = row.cells["split"]
        if row.submodules > twin.submodules:
            row.cells["split"] = Cell("fail", f"{cell.text}: more than TorchScript's {twin.submodules}")


def zoo_markdown(zoo):
    if not zoo:
        return []
    lines = ["", "## The zoo, both ways", "",
             "Every model `tools/export_zoo.py --small` exports (the runtime's zoo), by the TorchScript exporter at "
             "the zoo's opsets (11-17) and by the dynamo exporter at its default: `cleave run` against ONNX Runtime "
             "on the zoo's sample input (a detector's scores, sorted: its random weights tie many scores, whose order "
             "is each runtime's own, so where they differ past 1e-4 the cell says so and is not counted), and the split with `examples/profiles/gpu.json` (a dynamo export must not "
             "make more submodules than the TorchScript one). \"known gap\": a cell that fails for a reason "
             "named in the script (KNOWN_GAPS), a gap of cleave's that is still open.", "",
             "| model | " + " | ".join(ZOO_COLUMNS) + " |", "| --- | " + " | ".join("---" for _ in ZOO_COLUMNS) + " |"]
    for name, cells in zoo:
        lines.append(f"| {name} | " + " | ".join(cells[c].markdown() for c in ZOO_COLUMNS) + " |")
    return lines


def markdown(rows, seconds, zoo=()):
    lines = [
        "# Both exporters, every command",
        "",
        "Made by `tests/exporter_matrix.py` (`ctest -L slow -R exporter_matrix`, or "
        "`.venv/bin/python3 tests/exporter_matrix.py build/release/cleave --write docs/exporters.md`); "
        "the script's docstring says what each cell checks. Do not edit by hand.",
        "",
        f"- Made {datetime.date.today().isoformat()} on {platform.machine()} with torch {torch.__version__}, "
        f"torchvision {torchvision.__version__}, onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, "
        f"in {seconds / 60:.0f} min.",
        "- dynamo: `torch.onnx.export(..., dynamo=True)`, the default since torch 2.9; torchscript: "
        "`dynamo=False`, opset 18. static: batch 2 fixed; dynamic: the batch a symbol (run with 3 rows).",
        "- split: acc and cpu submodules with `examples/profiles/gpu.json`; a dynamo row must have no more "
        "than its TorchScript twin. run: `cleave run` against ONNX Runtime. train: the model with its "
        f"cross-entropy, {TRAIN_STEPS} steps of SGD (momentum {MOMENTUM}) against torch.optim.",
        "",
        "| model | export | " + " | ".join(COLUMNS) + " |",
        "| --- | --- | " + " | ".join("---" for _ in COLUMNS) + " |",
    ]
    for row in rows:
        cells = [row.cells.get(c, Cell("fail", "not run")).markdown() for c in COLUMNS]
        lines.append(f"| {row.name} | {row.way} | " + " | ".join(cells) + " |")
    lines += ["", "## Notes", "",
              "- \"the export's loss is not the module's\": ONNX Runtime, run on the training export and the first "
              "step's rows, gives another loss than the module in training mode; cleave is not run on it. With "
              "torch 2.11 this is every model with BatchNorm under the dynamo exporter: it writes a training-mode "
              "BatchNorm as an inference BatchNormalization (running statistics, no `training_mode`), so the export "
              "normalizes by the running statistics; cleave computes that export as ONNX Runtime does.",
              "- The LSTM row is a tagger that reads the per-step outputs. torch.export fails on tools/export_zoo.py's "
              "`lstm`, which also reads the final hidden state (RuntimeError: a broadcast of [1, 1, 2, 1] to "
              "[1, 2, 10, 8], torch 2.11); the TorchScript exporter exports it.",
              "- Training exports: TorchScript with `training=TrainingMode.TRAINING, do_constant_folding=False`; "
              "dynamo with its defaults (`optimize=True`: literals written as initializers, parameters of equal "
              "value merged, transposed weights folded; docs/distributed.md, \"What trains\"). Where the optimizer "
              "also folded a parameter with constants (a position embedding at fixed positions, a class token "
              "expanded to a static batch, a table gathered by an index buffer, LSTM gates), cleave refuses the "
              "default export before the first step, naming the fold; the cell says so and trains the model "
              "exported with `optimize=False`."]
    lines += zoo_markdown(zoo)
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cleave")
    parser.add_argument("--write", help="write the markdown table here")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS))
    parser.add_argument("--keep", help="keep the exports and outputs in this folder")
    parser.add_argument("--no-zoo", action="store_true", help="leave out the zoo's table (tools/export_zoo.py)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    binary = os.path.abspath(args.cleave)
    start = time.time()
    with tempfile.TemporaryDirectory() as scratch:
        work = os.path.abspath(args.keep) if args.keep else scratch
        rows = []
        for name in args.models:
            for way in args.ways:
                row = Row(binary, work, name, way)
                began = time.time()
                try:
                    row.fill()
                except Exception:  # noqa: BLE001 - a script error fails the row, and the run goes on
                    row.cells.setdefault("train", Cell("fail", "script error: " + last_line(traceback.format_exc())))
                rows.append(row)
                states = " ".join(f"{c}={row.cells.get(c, Cell('fail', '')).state}" for c in COLUMNS)
                print(f"{name} {way}: {states} ({time.time() - began:.0f} s)", flush=True)
        compare_splits(rows)
        zoo = [] if args.no_zoo else zoo_rows(binary, work)
    table = markdown(rows, time.time() - start, zoo)
    if args.write:
        with open(args.write, "w") as f:
            f.write(table)
    print(table)
    failed = [(r.name, r.way, c) for r in rows for c in COLUMNS if r.cells.get(c, Cell("fail", "")).state == "fail"]
    failed += [(name, "zoo", column) for name, cells in zoo for column in ZOO_COLUMNS if cells[column].state == "fail"]
    for name, way, column in failed:
        print(f"FAIL {name} {way} {column}", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
