"""torch.export programs (.pt2, torch.export.save) as cleave's FX front end, read without Python.

Against PyTorch 2.x's own passes on the same program:
- split: the acc/cpu subgraphs cleave makes from the .pt2 have the same node sets, in the same
  order, as torch.fx's _SplitterBase (put_nodes_into_subgraphs + remove_small_acc_subgraphs) on
  the program's graph module, for the same support set of ATen targets;
- pipeline: cut at torch.distributed.pipelining.pipe_split() markers, each stage holds the
  parameters and buffers that torch.distributed.pipelining.pipeline() gives the same stage;
- the program's signature tells parameters, buffers and frozen parameters apart, and symbolic
  (dynamic) dims keep their names;
- other archive and schema versions, and archives that are not programs, are refused in one line.
"""
import contextlib
import io
import json
import os
import random
import shutil
import zipfile

import torch
from torch.distributed.pipelining import pipe_split, pipeline
from torch.fx.passes.operator_support import OperatorSupport
from torch.fx.passes.splitter_base import _SplitterBase, _SplitterSettingBase
from torch.fx.passes.tools_common import CALLABLE_NODE_OPS, get_node_target

from testlib import EXAMPLES, TempDirTest, main, run

import sys


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = torch.nn.Linear(d, d)
        self.norm = torch.nn.LayerNorm(d)
        self.register_buffer("scale", torch.full((d,), 0.5))

    def forward(self, x):
        return self.norm(torch.relu(self.fc(x))) * self.scale + torch.sigmoid(x)


class Blocks(torch.nn.Module):
    """A stack of blocks with a pipe_split() between each, and a head."""

    def __init__(self, d=16, n=4, markers=True):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(d) for _ in range(n)])
        self.head = torch.nn.Linear(d, 4)
        self.markers = markers

    def forward(self, x):
        for i, block in enumerate(self.blocks):
            x = block(x)
            if self.markers and i < len(self.blocks) - 1:
                pipe_split()
        return self.head(x)


def graph_inputs(program, user_inputs):
    """The lifted graph module's inputs in signature order: parameters, buffers, user inputs."""
    state = {**dict(program.named_parameters()), **dict(program.named_buffers()), **program.constants}
    values, users = [], iter(user_inputs)
    for spec in program.graph_signature.input_specs:
        values.append(state[spec.target] if spec.target is not None else next(users))
    return values


def reference_subgraphs(program, user_inputs, supported, min_size):
    gm = program.graph_module
    argv, sys.argv = sys.argv, sys.argv[:1]  # _SplitterSettingBase parses sys.argv
    try:
        settings = _SplitterSettingBase(min_acc_module_size=min_size)
    finally:
        sys.argv = argv
    splitter = _SplitterBase(gm, graph_inputs(program, user_inputs), OperatorSupport({t: None for t in supported}),
                             settings)
    with contextlib.redirect_stdout(io.StringIO()):
        subgraphs = splitter.remove_small_acc_subgraphs(splitter.put_nodes_into_subgraphs())
    return [(s.is_acc, sorted(n.name for n in s.nodes)) for s in subgraphs]


def aten_targets(program):
    gm = program.graph_module
    submodules = dict(gm.named_modules())
    return sorted({get_node_target(submodules, n) for n in gm.graph.nodes if n.op in CALLABLE_NODE_OPS})


class ExportedPrograms(TempDirTest):
    def save(self, module, inputs, name, **export_options):
        module.eval()
        program = torch.export.export(module, inputs, **export_options)
        path = self.path(f"{name}.pt2")
        torch.export.save(program, path)
        return program, path

    def split(self, path, supported, min_size, name):
        profile = self.path(f"{name}.profile.json")
        with open(profile, "w") as f:
            json.dump({"name": name, "ops": supported}, f)
        code, out, err = run("split", path, "--profile", profile, "-o", self.path(f"{name}.out"), "--min-acc-size",
                             min_size, "--json")
        self.assertEqual(code, 0, err)
        return [(s["role"] == "acc", sorted(s["nodes"])) for s in json.loads(out)["subgraphs"]]

    def check_split(self, module, inputs, name, sets=4, min_sizes=(1, 3)):
        torch.manual_seed(0)
        program, path = self.save(module, inputs, name)
        targets = aten_targets(program)
        rng = random.Random(len(name))
        support_sets = [targets, [t for t in targets if "relu" not in t]]
        support_sets += [sorted(t for t in targets if rng.random() < 0.6) for _ in range(sets)]
        compared = 0
        for k, supported in enumerate(support_sets):
            for min_size in min_sizes:
                with self.subTest(model=name, support=k, min_size=min_size):
                    expected = reference_subgraphs(program, inputs, supported, min_size)
                    self.assertEqual(self.split(path, supported, min_size, f"{name}_{k}_{min_size}"), expected)
                    compared += 1
        return compared

    def test_split_is_node_for_node_torchs_splitter(self):
        self.assertEqual(self.check_split(Blocks(markers=False), (torch.randn(8, 16),), "blocks"), 6 * 2)

    def test_split_of_a_torchvision_model_is_node_for_node_torchs_splitter(self):
        import torchvision
        model = torchvision.models.resnet18(weights=None)
        self.assertEqual(self.check_split(model, (torch.randn(1, 3, 64, 64),), "resnet18", sets=2), 4 * 2)

    def test_pipeline_stages_hold_what_torchs_pipeline_stages_hold(self):
        torch.manual_seed(0)
        module, x = Blocks(), torch.randn(8, 16)
        _, path = self.save(module, (x,), "piped")
        code, out, err = run("pipeline", path, "-o", self.path("stages"), "--json")
        self.assertEqual(code, 0, err)
        summary = json.loads(out)
        self.assertEqual(len(summary["markers"]), 3)
        pipe = pipeline(module, mb_args=(x,))
        self.assertEqual(len(summary["stages"]), pipe.num_stages)
        for i, stage in enumerate(summary["stages"]):
            theirs = pipe.get_stage_module(i)
            held = {n for n, _ in theirs.named_parameters()} | {n for n, _ in theirs.named_buffers()}
            self.assertEqual(set(stage["parameters"]), held, f"stage {i}")
        # examples/profiles/gpu.json names the ATen ops a program holds: only the markers stay off it.
        code, out, err = run("split", path, "--profile", os.path.join(EXAMPLES, "profiles", "gpu.json"), "--preview",
                             "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual({n["target"] for n in json.loads(out)["cpu_nodes"]}, {"torch.ops.pippy._pipe_split.default"})
        # The signature's buffers are buffers: held fixed, never trained.
        fixed = {p["name"]: p.get("fixed") for p in summary["parameters"]}
        self.assertEqual({n for n, why in fixed.items() if why == "buffer"}, {f"blocks.{i}.scale" for i in range(4)})
        self.assertTrue(all(fixed[n] is None for n in fixed if not n.endswith("scale")))

    def test_inspect_reads_the_signature_and_symbolic_dims(self):
        module = Blocks(markers=False)
        module.head.weight.requires_grad_(False)
        batch = torch.export.Dim("batch", min=2)
        program, path = self.save(module, (torch.randn(8, 16),), "dynamic", dynamic_shapes={"x": {0: batch}})
        code, out, err = run("inspect", path, "--json")
        self.assertEqual(code, 0, err)
        info = json.loads(out)
        callable_nodes = [n for n in program.graph.nodes if n.op == "call_function"]
        self.assertEqual(info["callable_nodes"], len(callable_nodes))
        self.assertEqual(info["parameters"], len(program.state_dict))
        self.assertEqual(info["parameter_bytes"], sum(t.numel() * t.element_size() for t in program.state_dict.values()))
        self.assertEqual(len(info["inputs"]), 1)
        self.assertEqual(info["inputs"][0]["shape"][1:], [16])
        self.assertIsInstance(info["inputs"][0]["shape"][0], str)  # the batch's symbol, not a number
        code, out, err = run("pipeline", path, "--stages", 2, "--json")
        self.assertEqual(code, 0, err)
        fixed = {p["name"]: p.get("fixed") for p in json.loads(out)["parameters"]}
        self.assertEqual(fixed["head.weight"], "frozen")
        self.assertIsNone(fixed["head.bias"])

    def rewritten(self, path, name, member, contents):
        """A copy of the archive at `path` with `member` (a suffix of its name) replaced."""
        out = self.path(name)
        with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
            for item in src.infolist():
                data = src.read(item.filename)
                dst.writestr(item, contents(data) if item.filename.endswith(member) else data)
        return out

    def test_other_versions_and_other_archives_are_refused_in_one_line(self):
        _, path = self.save(Blocks(n=1, markers=False), (torch.randn(2, 16),), "small")
        newer_archive = self.rewritten(path, "archive1.pt2", "/archive_version", lambda _: b"1")
        newer_schema = self.rewritten(path, "schema9.pt2", "models/model.json",
                                      lambda data: data.replace(b'"major": 8', b'"major": 9').replace(
                                          b'"major":8', b'"major":9'))
        not_a_program = self.path("arrays.pt2")
        with zipfile.ZipFile(not_a_program, "w") as z:
            z.writestr("x.npy", b"\x93NUMPY")
        truncated = self.path("truncated.pt2")
        with open(path, "rb") as f:
            data = f.read()
        with open(truncated, "wb") as f:
            f.write(data[: len(data) // 2])
        for bad, words in ((newer_archive, "pt2 archive version '1'"), (newer_schema, "ExportedProgram schema 9."),
                           (not_a_program, "without archive_format"), (truncated, "truncated.pt2")):
            with self.subTest(bad=bad):
                code, out, err = run("inspect", bad)
                self.assertEqual(code, 1, err)
                self.assertEqual(out, "")
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertIn(words, err)
        shutil.copy(path, self.path("copy.pt2"))
        self.assertEqual(run("inspect", self.path("copy.pt2"))[0], 0)


if __name__ == "__main__":
    main()
