"""`cleave simplify` on real exports (torch 2.x's TorchScript exporter): a transformer
encoder exported with static shapes and with a dynamic batch and sequence, and a model that calls
x.view(x.size(0), x.size(1), -1). The folded model must give ONNX Runtime's outputs of the
original (tests/oracle/onnxruntime_oracle.py), hold no Shape node where every shape is static, split into
fewer CPU nodes (and no more submodules) with the GPU profile, and come out byte for byte the same twice."""
import json
import math
import os
import subprocess

import numpy as np
import onnx
import torch

from testlib import EXAMPLES, ORACLE, SOURCE_DIR, TempDirTest, main, run

GPU = os.path.join(EXAMPLES, "profiles", "gpu.json")


class EncoderLayer(torch.nn.Module):
    """A transformer encoder layer whose shape arithmetic the TorchScript exporter records.
    (torch 2.x's torch.nn.TransformerEncoder exports with its batch and sequence baked into the
    attention's Reshape targets, even with dynamic_axes: ONNX Runtime refuses other shapes.)"""

    def __init__(self, width=32, heads=4, hidden=64):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, width))

    def forward(self, x):
        batch, steps, width = x.size(0), x.size(1), x.size(2)
        q, k, v = self.qkv(x).view(batch, steps, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(width // self.heads)
        attended = torch.matmul(scores.softmax(-1), v).transpose(1, 2).reshape(batch, steps, width)
        x = self.norm1(x + self.out(attended))
        return self.norm2(x + self.mlp(x))


def encoder():
    return torch.nn.Sequential(EncoderLayer(), EncoderLayer())


class Viewed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.linear(x)
        return torch.relu(y.view(y.size(0), y.size(1), 2, -1).sum(2))


class SimplifyTest(TempDirTest):
    def export(self, name, module, example, dynamic, fold=True):
        """fold=False: the exporter keeps its shape arithmetic (as training exports do), which
        torch 2.x's exporter folds itself where every shape is static."""
        path = self.path(f"{name}.onnx")
        torch.manual_seed(0)
        axes = {"x": {0: "batch", 1: "seq"}} if dynamic else None
        torch.onnx.export(module.eval(), (example,), path, input_names=["x"], output_names=["y"], opset_version=14,
                          dynamic_axes=axes, do_constant_folding=fold, dynamo=False)
        return path

    def ort(self, model, x):
        inputs, outputs = self.path("inputs.json"), self.path("outputs.json")
        with open(inputs, "w") as f:
            json.dump({"x": {"dtype": "float32", "dims": list(x.shape), "data": x.flatten().tolist()}}, f)
        subprocess.run([*ORACLE, "run", model, inputs, outputs], check=True, capture_output=True, timeout=300)
        with open(outputs) as f:
            y = json.load(f)["y"]
        return np.array(y["data"], dtype=np.float32).reshape(y["dims"])

    def simplify(self, model):
        out = model.replace(".onnx", "_simple.onnx")
        code, stdout, err = run("simplify", model, "-o", out, "--json")
        self.assertEqual(code, 0, err)
        return out, json.loads(stdout)

    def ops(self, model):
        return [node.op_type for node in onnx.load(model).graph.node]

    def split(self, model, *flags):
        """(submodules, CPU nodes) of the model split with the GPU profile, and the report."""
        out = model + ".split" + "".join(flags)
        code, stdout, err = run("split", model, "--profile", GPU, "--json", "--plan-only", "-o", out, *flags)
        self.assertEqual(code, 0, err)
        report = json.loads(stdout)
        cpu = report["cpu_nodes"]
        return len(report["subgraphs"]), len(cpu) if isinstance(cpu, list) else cpu, report

    def check_same_outputs(self, original, folded, x):
        np.testing.assert_allclose(self.ort(folded, x), self.ort(original, x), rtol=1e-6, atol=1e-6)

    def test_a_static_encoder_loses_its_shape_arithmetic(self):
        x = torch.randn(2, 6, 32)
        model = self.export("encoder", encoder(), x, dynamic=False, fold=False)
        folded, report = self.simplify(model)
        self.assertGreater(report["folded_nodes"], 0)
        # torch 2.x's exporter writes a static size as a Constant; the Reshape targets made of them
        # (Unsqueeze, Concat) fold away.
        self.assertGreater(report["folded_by_op"].get("Concat", 0), 0)
        for op in ("Shape", "Unsqueeze", "Concat"):
            self.assertNotIn(op, self.ops(folded))
        self.check_same_outputs(model, folded, x.numpy())
        (folded_parts, folded_cpu, _), (parts, cpu, _) = self.split(folded), self.split(model, "--no-simplify")
        # The sizes are constants in a static export of torch 2.x (1.13 left Shape nodes, which
        # ran on the CPU): the folded nodes ran on the accelerator, and fewer nodes remain there.
        self.assertLessEqual(folded_parts, parts)
        self.assertLessEqual(folded_cpu, cpu)
        self.assertLess(len(self.ops(folded)), len(self.ops(model)))
        # split folds by default: the same cut as the simplified model's, and the report says so.
        by_default, default_cpu, report = self.split(model)
        self.assertEqual((by_default, default_cpu), (folded_parts, folded_cpu))
        self.assertEqual(report["simplify"]["folded_nodes"], report_folded := self.simplify(model)[1]["folded_nodes"])
        self.assertGreater(report_folded, 0)
        self.assertEqual(report["simplify"]["submodules"], by_default)
        self.assertEqual(report["simplify"]["submodules_unfolded"], parts)
        code, text, err = run("split", model, "--profile", GPU, "--preview")
        self.assertEqual(code, 0, err)
        self.assertTrue(text.startswith(f"simplify: folded {report_folded} node(s) to constants ("), text)
        self.assertIn(f"the cut has {by_default} submodule(s), {parts} without folding", text)
        # The cut of the folded model equals the whole model.
        plan = self.path("encoder_cut")
        run("split", model, "--profile", GPU, "-o", plan, check=True)
        np.savez(self.path("x.npz"), x=x.numpy())
        code, out, err = run("verify", model, plan, "--inputs", self.path("x.npz"))
        self.assertEqual(code, 0, out + err)
        # Deterministic: the same model folds to the same bytes.
        with open(folded, "rb") as f:
            first = f.read()
        again, _ = self.simplify(model)
        with open(again, "rb") as f:
            self.assertEqual(f.read(), first)

    def test_a_dynamic_batch_and_sequence_keep_what_reads_them(self):
        x = torch.randn(2, 6, 8)
        model = self.export("viewed_dynamic", Viewed(), x, dynamic=True)
        folded, report = self.simplify(model)
        self.assertIn("Shape", self.ops(folded))  # the dims are symbolic: nothing to fold there
        for rows, steps in ((2, 6), (3, 5)):
            sample = np.random.default_rng(rows).standard_normal((rows, steps, 8)).astype(np.float32)
            self.check_same_outputs(model, folded, sample)
        static = self.export("viewed_static", Viewed(), x, dynamic=False)
        folded_static, report = self.simplify(static)
        self.assertNotIn("Shape", self.ops(folded_static))
        self.assertNotIn("Gather", self.ops(folded_static))
        self.check_same_outputs(static, folded_static, x.numpy())

    def test_a_dynamic_encoder_folds_the_dims_it_knows(self):
        model = self.export("encoder_dynamic", encoder(), torch.randn(2, 6, 32), dynamic=True)
        folded, report = self.simplify(model)
        # x.size(2) and the head sizes are static although batch and sequence are not.
        self.assertGreater(report["folded_by_op"].get("Gather", 0), 0)
        self.assertIn("Shape", self.ops(folded))
        for rows, steps in ((2, 6), (3, 5)):
            sample = np.random.default_rng(rows).standard_normal((rows, steps, 32)).astype(np.float32)
            self.check_same_outputs(model, folded, sample)

    def test_a_dynamic_encoder_splits_like_its_static_export(self):
        """What folding cannot remove (dims of a symbolic batch and sequence) stays with the acc
        submodules that read it as shapes (split/shape_prologue.h), and the cut still computes the
        model at other shapes, with the acc submodules on a backend that takes only the profile."""
        model = encoder()
        static = self.export("encoder_static", model, torch.randn(2, 6, 32), dynamic=False)
        dynamic = self.export("encoder_dynamic", model, torch.randn(2, 6, 32), dynamic=True)
        static_submodules, _, _ = self.split(static)
        submodules, _, report = self.split(dynamic)
        without, _, _ = self.split(dynamic, "--no-shape-prologue")
        self.assertEqual(submodules, static_submodules)
        self.assertGreater(without, submodules)
        self.assertGreater(report["shape_prologue"]["nodes"], 0)
        self.assertEqual((report["shape_prologue"]["submodules"], report["shape_prologue"]["submodules_without"]),
                         (submodules, without))
        self.assertIn("Shape", report["shape_prologue"]["by_op"])
        code, stdout, err = run("split", dynamic, "--profile", GPU, "--preview")
        self.assertEqual(code, 0, err)
        self.assertIn("shape prologue: ", stdout)
        # A batch and sequence of unknown size: the seams' bytes are a lower bound, and say so.
        self.assertIn("of unknown size", stdout)
        self.assertIn("(an upper bound: ", stdout)
        self.assertGreater(report["subgraphs"][0]["inputs_of_unknown_size"], 0)
        cut = self.path("encoder_dynamic_cut")
        code, _, err = run("split", dynamic, "--profile", GPU, "-o", cut)
        self.assertEqual(code, 0, err)
        for batch, seq in ((2, 6), (3, 5)):
            code, stdout, err = run("verify", dynamic, cut, "--backend", "profile:" + GPU, "--dim", f"batch={batch}",
                                    "--dim", f"seq={seq}", "--json")
            self.assertEqual(code, 0, err)
            self.assertTrue(json.loads(stdout)["ok"], stdout)

    def viewed_by_hand(self, rows):
        from onnx import TensorProto, helper
        ints = lambda name, values: helper.make_tensor(name, TensorProto.INT64, [len(values)], values)
        nodes = [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
            helper.make_node("Gather", ["s", "one"], ["t"], axis=0),
            helper.make_node("Concat", ["b", "t", "tail"], ["target"], axis=0),
            helper.make_node("Reshape", ["x", "target"], ["v"]),
            helper.make_node("ReduceSum", ["v", "two"], ["r"], keepdims=0),
            helper.make_node("Relu", ["r"], ["y"]),
        ]
        graph = helper.make_graph(
            nodes, "viewed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, 6, 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, 6, 4])],
            [ints("zero", [0]), ints("one", [1]), ints("tail", [2, 4]), ints("two", [2])])
        path = self.path("viewed_by_hand.onnx")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
        return path

    def test_a_pipeline_folds_only_what_any_batch_holds(self):
        # x.view(x.size(0), x.size(1), 2, 4).sum(2) as exporters write it when they keep the shape
        # logic (torch folds this one itself on a static export; its attention's views, sometimes not).
        model = self.viewed_by_hand(rows=4)
        x = np.random.default_rng(4).standard_normal((4, 6, 8)).astype(np.float32)
        # Folded for the exported batch, the Reshape holds 4 rows: microbatches cannot run it.
        whole_batch, _ = self.simplify(model)
        code, _, err = run("pipeline", whole_batch, "--stages", 2, "--microbatches", 2, "-o", self.path("refused"))
        self.assertOneLineError(code, err, "microbatches cannot run")
        # Folded for any batch (pipeline's default, and simplify --any-batch), they run.
        code, out, err = run("simplify", model, "-o", self.path("any.onnx"), "--any-batch", "--json")
        self.assertEqual(code, 0, err)
        self.assertTrue(json.loads(out)["any_batch"])
        code, _, err = run("pipeline", self.path("any.onnx"), "--stages", 2, "--microbatches", 2, "--plan-only",
                           "-o", self.path("any_plan"))
        self.assertEqual(code, 0, err)
        plan = self.path("plan")
        code, out, err = run("pipeline", model, "--stages", 2, "--microbatches", 2, "-o", plan, "--json")
        self.assertEqual(code, 0, err)
        folding = json.loads(out)["simplify"]
        self.assertTrue(folding["any_batch"])
        self.assertGreater(folding["folded_nodes"], 0)  # the sequence and head sizes are not the batch
        np.savez(self.path("x.npz"), x=x)
        piped, whole = self.path("piped.npz"), self.path("whole.npz")
        run("run", plan, "--pipeline", "--microbatches", 2, "--inputs", self.path("x.npz"), "--save-outputs", piped,
            check=True)
        run("run", model, "--inputs", self.path("x.npz"), "--save-outputs", whole, check=True)
        np.testing.assert_allclose(np.load(piped)["y"], np.load(whole)["y"], rtol=1e-5, atol=1e-5)
        # --no-simplify plans the model as read; a split spec names its nodes, so it is not folded.
        code, out, err = run("pipeline", model, "--stages", 2, "--no-simplify", "--json", "-o", self.path("asread"))
        self.assertEqual(code, 0, err)
        self.assertNotIn("simplify", json.loads(out))

    def test_bad_requests(self):
        code, _, err = run("simplify", os.path.join(EXAMPLES, "cnn.fx.json"), "-o", self.path("o.onnx"))
        self.assertOneLineError(code, err, "simplify folds ONNX models")
        code, _, err = run("simplify", self.path("missing.onnx"), "-o", self.path("o.onnx"))
        self.assertEqual(code, 1, err)
        code, _, err = run("simplify", os.path.join(EXAMPLES, "cnn.fx.json"))
        self.assertEqual(code, 2, err)


if __name__ == "__main__":
    main()
