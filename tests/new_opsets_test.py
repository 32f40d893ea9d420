"""ONNX opsets past 18 end to end (issue 61): models at every opset up to the newest that cleave's
ONNX library defines read, split and run; the ops added since opset 18 run equal to onnx's own
reference evaluator (onnx.reference, the onnx release scripts/requirements.txt pins) and, where
its opset reaches, ONNX Runtime.

Ops with a kernel run whole (RMSNormalization, RotaryEmbedding, Swish, CumProd, Gelu); the others
that ONNX defines as functions (Attention, SwiGLU, Mish, ...) run as their function bodies
(io/onnx_functions.h), while split and its profiles still see one node.

usage: new_opsets_test.py CLEAVE
"""
import json
import os
import tempfile
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from testlib import EXAMPLES, main, run

NEWEST = onnx.defs.onnx_opset_version()


def model_of(nodes, inputs, outputs, opset, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def tensor(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


class NewOpsets(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def run_both(self, model, feeds, name, rtol=1e-4, atol=1e-5):
        """Runs MODEL on cleave and on onnx's reference evaluator; asserts equal outputs."""
        path = os.path.join(self.dir, name + ".onnx")
        onnx.save(model, path)
        inputs = os.path.join(self.dir, name + ".inputs.npz")
        np.savez(inputs, **feeds)
        outputs = os.path.join(self.dir, name + ".outputs.npz")
        code, _, err = run("run", path, "--inputs", inputs, "--save-outputs", outputs)
        self.assertEqual(code, 0, f"{name}: {err}")
        found = np.load(outputs)
        expected = ReferenceEvaluator(model).run(None, feeds)
        for info, want in zip(model.graph.output, expected):
            np.testing.assert_allclose(found[info.name], want, rtol=rtol, atol=atol, err_msg=f"{name}: {info.name}")
        return path, inputs

    def test_every_opset_up_to_the_newest_reads_and_runs(self):
        self.assertGreaterEqual(NEWEST, 23)
        x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
        for opset in range(19, NEWEST + 1):
            model = model_of([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [3, 4])], [tensor("y", [3, 4])], opset)
            path, _ = self.run_both(model, {"x": x}, f"relu{opset}")
            code, out, err = run("inspect", path)
            self.assertEqual(code, 0, err)
        # One past the newest is refused in one line that names it.
        model = model_of([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [3, 4])], [tensor("y", [3, 4])], NEWEST)
        model.opset_import[0].version = NEWEST + 1
        path = os.path.join(self.dir, "too_new.onnx")
        onnx.save(model, path)
        code, _, err = run("inspect", path)
        self.assertEqual(code, 1)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn(f"opset {NEWEST + 1}", err)

    def test_rms_normalization_swish_gelu_cumprod(self):
        rng = np.random.default_rng(1)
        x = rng.standard_normal((2, 5, 8)).astype(np.float32)
        scale = rng.standard_normal(8).astype(np.float32)
        model = model_of([helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=-1, epsilon=1e-6)],
                         [tensor("x", [2, 5, 8]), tensor("scale", [8])], [tensor("y", [2, 5, 8])], 23)
        self.run_both(model, {"x": x, "scale": scale}, "rms")
        model = model_of([helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=1)],
                         [tensor("x", [2, 5, 8]), tensor("scale", [5, 8])], [tensor("y", [2, 5, 8])], 23)
        self.run_both(model, {"x": x, "scale": rng.standard_normal((5, 8)).astype(np.float32)}, "rms_axis1")
        model = model_of([helper.make_node("Swish", ["x"], ["y"], alpha=1.5)], [tensor("x", [2, 5, 8])],
                         [tensor("y", [2, 5, 8])], 24)
        self.run_both(model, {"x": x}, "swish")
        model = model_of([helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")], [tensor("x", [2, 5, 8])],
                         [tensor("y", [2, 5, 8])], 20)
        self.run_both(model, {"x": x}, "gelu")
        for exclusive in (0, 1):
            for reverse in (0, 1):
                model = model_of([helper.make_node("CumProd", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)],
                                 [tensor("x", [2, 5, 8]), tensor("axis", [], TensorProto.INT64)],
                                 [tensor("y", [2, 5, 8])], 26)
                self.run_both(model, {"x": x, "axis": np.array(1, dtype=np.int64)}, f"cumprod{exclusive}{reverse}")

    def test_rotary_kernel_and_function_bodies_attention_swiglu_mish(self):
        rng = np.random.default_rng(2)
        batch, seq, heads, kv_heads, head = 2, 6, 4, 2, 8
        q = rng.standard_normal((batch, seq, heads * head)).astype(np.float32)
        k = rng.standard_normal((batch, seq, kv_heads * head)).astype(np.float32)
        v = rng.standard_normal((batch, seq, kv_heads * head)).astype(np.float32)
        angles = np.outer(np.arange(seq), 1.0 / 10000 ** (np.arange(head // 2) * 2 / head)).astype(np.float32)
        feeds = {"q": q, "cos": np.cos(angles), "sin": np.sin(angles),
                 "ids": np.tile(np.arange(seq, dtype=np.int64), (batch, 1))}
        for interleaved in (0, 1):
            model = model_of([helper.make_node("RotaryEmbedding", ["q", "cos", "sin", "ids"], ["y"],
                                               num_heads=heads, interleaved=interleaved)],
                             [tensor("q", [batch, seq, heads * head]), tensor("cos", [seq, head // 2]),
                              tensor("sin", [seq, head // 2]), tensor("ids", [batch, seq], TensorProto.INT64)],
                             [tensor("y", [batch, seq, heads * head])], 23)
            self.run_both(model, feeds, f"rotary{interleaved}")
        for opset in (23, 24, NEWEST):
            for causal in (0, 1):
                model = model_of([helper.make_node("Attention", ["q", "k", "v"], ["y"], q_num_heads=heads,
                                                   kv_num_heads=kv_heads, is_causal=causal)],
                                 [tensor("q", [batch, seq, heads * head]), tensor("k", [batch, seq, kv_heads * head]),
                                  tensor("v", [batch, seq, kv_heads * head])],
                                 [tensor("y", [batch, seq, heads * head])], opset)
                self.run_both(model, {"q": q, "k": k, "v": v}, f"attention{opset}_{causal}")
        a = rng.standard_normal((3, 8)).astype(np.float32)
        model = model_of([helper.make_node("Mish", ["a"], ["y"])], [tensor("a", [3, 8])], [tensor("y", [3, 8])], 22)
        self.run_both(model, {"a": a}, "mish")
        if NEWEST >= 28:
            model = model_of([helper.make_node("SwiGLU", ["a", "b"], ["y"])], [tensor("a", [3, 8]), tensor("b", [3, 8])],
                             [tensor("y", [3, 8])], 28)
            self.run_both(model, {"a": a, "b": a[::-1].copy()}, "swiglu")

    def test_a_decoder_block_at_opset_23_splits_keeping_its_ops_whole(self):
        """RMSNormalization, RotaryEmbedding and Attention: TensorRT 10's profile takes all three as
        whole nodes; the cut runs equal to the whole model and to ONNX Runtime."""
        rng = np.random.default_rng(3)
        batch, seq, heads, head = 1, 4, 2, 4
        width = heads * head
        weights = {name: helper.make_tensor(name, TensorProto.FLOAT, shape, rng.standard_normal(shape).astype(np.float32).ravel())
                   for name, shape in (("norm", [width]), ("wq", [width, width]), ("wk", [width, width]), ("wv", [width, width]))}
        angles = np.outer(np.arange(seq), 1.0 / 10000 ** (np.arange(head // 2) * 2 / head)).astype(np.float32)
        weights["cos"] = helper.make_tensor("cos", TensorProto.FLOAT, [seq, head // 2], np.cos(angles).ravel())
        weights["sin"] = helper.make_tensor("sin", TensorProto.FLOAT, [seq, head // 2], np.sin(angles).ravel())
        weights["ids"] = helper.make_tensor("ids", TensorProto.INT64, [batch, seq], np.tile(np.arange(seq), batch))
        nodes = [
            helper.make_node("RMSNormalization", ["x", "norm"], ["h"], name="rms"),
            helper.make_node("MatMul", ["h", "wq"], ["q0"], name="q"),
            helper.make_node("MatMul", ["h", "wk"], ["k0"], name="k"),
            helper.make_node("MatMul", ["h", "wv"], ["v"], name="v"),
            helper.make_node("RotaryEmbedding", ["q0", "cos", "sin", "ids"], ["q"], num_heads=heads, name="rope_q"),
            helper.make_node("RotaryEmbedding", ["k0", "cos", "sin", "ids"], ["k"], num_heads=heads, name="rope_k"),
            helper.make_node("Attention", ["q", "k", "v"], ["a"], q_num_heads=heads, kv_num_heads=heads, is_causal=1,
                             name="attention"),
            helper.make_node("Add", ["x", "a"], ["y"], name="residual"),
        ]
        model = model_of(nodes, [tensor("x", [batch, seq, width])], [tensor("y", [batch, seq, width])], 23,
                         weights.values())
        x = rng.standard_normal((batch, seq, width)).astype(np.float32)
        path, inputs = self.run_both(model, {"x": x}, "block")
        out = os.path.join(self.dir, "cut")
        code, _, err = run("split", path, "--profile", os.path.join(EXAMPLES, "profiles", "tensorrt.json"), "-o", out,
                           "--json")
        self.assertEqual(code, 0, err)
        with open(os.path.join(out, "plan.json")) as f:
            plan = json.load(f)
        self.assertEqual(len(plan["submodules"]), 1, "every op of the block runs on TensorRT 10")
        ops = {n.op_type for sub in plan["submodules"]
               for n in onnx.load(os.path.join(out, sub["file"])).graph.node}
        self.assertTrue({"RMSNormalization", "RotaryEmbedding", "Attention"} <= ops, ops)
        code, _, err = run("verify", path, out, "--inputs", inputs)
        self.assertEqual(code, 0, err)
        # ONNX Runtime (PyPI's, in this process) runs opset 23 too: its outputs against cleave's.
        import onnxruntime
        want = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        saved = os.path.join(self.dir, "block.cleave.npz")
        run("run", path, "--inputs", inputs, "--save-outputs", saved, check=True)
        np.testing.assert_allclose(np.load(saved)["y"], want, rtol=1e-4, atol=1e-5)


if __name__ == "__main__":
    main()
