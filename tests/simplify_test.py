"""`cleave simplify` on real exports (Debian's torch, the TorchScript exporter): a transformer
encoder exported with static shapes and with a dynamic batch and sequence, and a model that calls
x.view(x.size(0), x.size(1), -1). The folded model must give ONNX Runtime's outputs of the
original (tests/oracle/run_model.js), hold no Shape node where every shape is static, split into
fewer CPU nodes (and no more submodules) with the GPU profile, and come out byte for byte the same twice."""
import json
import os
import subprocess

import numpy as np
import onnx
import torch

from testlib import EXAMPLES, SOURCE_DIR, TempDirTest, main, run

ORACLE = os.path.join(SOURCE_DIR, "tests", "oracle", "run_model.js")
GPU = os.path.join(EXAMPLES, "profiles", "gpu.json")


class Viewed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.linear(x)
        return torch.relu(y.view(y.size(0), y.size(1), 2, -1).sum(2))


class SimplifyTest(TempDirTest):
    def export(self, name, module, example, dynamic):
        path = self.path(f"{name}.onnx")
        torch.manual_seed(0)
        axes = {"x": {0: "batch", 1: "seq"}} if dynamic else None
        torch.onnx.export(module.eval(), (example,), path, input_names=["x"], output_names=["y"], opset_version=13,
                          dynamic_axes=axes)
        return path

    def ort(self, model, x):
        inputs, outputs = self.path("inputs.json"), self.path("outputs.json")
        with open(inputs, "w") as f:
            json.dump({"x": {"dtype": "float32", "dims": list(x.shape), "data": x.flatten().tolist()}}, f)
        subprocess.run(["node", ORACLE, model, inputs, outputs], check=True, capture_output=True, timeout=300)
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

    def split(self, model):
        """(submodules, CPU nodes) of the model split with the GPU profile."""
        code, stdout, err = run("split", model, "--profile", GPU, "--json", "--plan-only", "-o", model + ".split")
        self.assertEqual(code, 0, err)
        report = json.loads(stdout)
        cpu = report["cpu_nodes"]
        return len(report["subgraphs"]), len(cpu) if isinstance(cpu, list) else cpu

    def check_same_outputs(self, original, folded, x):
        np.testing.assert_allclose(self.ort(folded, x), self.ort(original, x), rtol=1e-6, atol=1e-6)

    def test_a_static_encoder_loses_its_shape_arithmetic(self):
        layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
        encoder = torch.nn.TransformerEncoder(layer, num_layers=2)
        x = torch.randn(2, 6, 32)
        model = self.export("encoder", encoder, x, dynamic=False)
        folded, report = self.simplify(model)
        self.assertGreater(report["folded_nodes"], 0)
        self.assertGreater(report["folded_by_op"].get("Shape", 0), 0)
        self.assertNotIn("Shape", self.ops(folded))
        self.check_same_outputs(model, folded, x.numpy())
        (folded_parts, folded_cpu), (parts, cpu) = self.split(folded), self.split(model)
        self.assertLessEqual(folded_parts, parts)
        self.assertLess(folded_cpu, cpu)  # 20 CPU nodes before, 6 after (Debian's torch 1.13)
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

    def test_bad_requests(self):
        code, _, err = run("simplify", os.path.join(EXAMPLES, "cnn.fx.json"), "-o", self.path("o.onnx"))
        self.assertOneLineError(code, err, "simplify folds ONNX models")
        code, _, err = run("simplify", self.path("missing.onnx"), "-o", self.path("o.onnx"))
        self.assertEqual(code, 1, err)
        code, _, err = run("simplify", os.path.join(EXAMPLES, "cnn.fx.json"))
        self.assertEqual(code, 2, err)


if __name__ == "__main__":
    main()
