"""Round trips checked by an independent reader: Python's onnx package (PyPI's, the release whose C++ library cleave builds).

For every generated family and every example model, `cleave convert` must write a model that
passes onnx.checker's full check and holds the same nodes (op, domain, inputs, outputs,
attributes), graph inputs/outputs and initializers (names, dtypes, dims, values) as the source.
"""
import glob
import os

import numpy as np
import onnx
from onnx import numpy_helper

from testlib import EXAMPLES, TempDirTest, main, run


def node_signature(node):
    attrs = []
    for a in sorted(node.attribute, key=lambda a: a.name):
        value = onnx.helper.get_attribute_value(a)
        if isinstance(value, (onnx.TensorProto, onnx.GraphProto)):
            value = value.SerializeToString()
        attrs.append((a.name, a.type, repr(value)))
    return (node.op_type, node.domain, tuple(node.input), tuple(node.output), tuple(attrs))


class RoundTrip(TempDirTest):
    def assertSameModel(self, source_path, written_path):
        source = onnx.load(source_path)
        written = onnx.load(written_path)
        onnx.checker.check_model(written, full_check=True)
        self.assertEqual([n.name for n in source.graph.node], [n.name for n in written.graph.node])
        self.assertEqual([node_signature(n) for n in source.graph.node],
                         [node_signature(n) for n in written.graph.node])
        self.assertEqual([i.name for i in source.graph.input], [i.name for i in written.graph.input])
        self.assertEqual([o.name for o in source.graph.output], [o.name for o in written.graph.output])
        self.assertEqual(sorted(i.name for i in source.graph.initializer),
                         sorted(i.name for i in written.graph.initializer))
        written_inits = {i.name: i for i in written.graph.initializer}
        for init in source.graph.initializer:
            mine = written_inits[init.name]
            self.assertEqual(init.data_type, mine.data_type, init.name)
            self.assertEqual(list(init.dims), list(mine.dims), init.name)
            np.testing.assert_array_equal(numpy_helper.to_array(init), numpy_helper.to_array(mine))
        self.assertEqual({(o.domain, o.version) for o in source.opset_import},
                         {(o.domain, o.version) for o in written.opset_import})

    def test_generated_families(self):
        for family in ("chain", "wide", "linear_chain", "diamonds", "transformer"):
            with self.subTest(family=family):
                src, out = self.path(f"{family}.onnx"), self.path(f"{family}.out.onnx")
                run("gen", family, "5", "-o", src, check=True)
                onnx.checker.check_model(onnx.load(src), full_check=True)
                run("convert", src, "-o", out, "--check", check=True)
                self.assertSameModel(src, out)

    def test_example_models(self):
        models = sorted(glob.glob(os.path.join(EXAMPLES, "*.onnx")))
        self.assertGreaterEqual(len(models), 3)
        for model in models:
            with self.subTest(model=os.path.basename(model)):
                out = self.path(os.path.basename(model))
                run("convert", model, "-o", out, "--check", check=True)
                self.assertSameModel(model, out)

    def test_inferred_shapes_match_onnx(self):
        """The types cleave reports for every value agree with onnx's own shape inference."""
        import json
        model = os.path.join(EXAMPLES, "cnn.onnx")
        inferred = onnx.shape_inference.infer_shapes(onnx.load(model))
        expected = {}
        for info in list(inferred.graph.value_info) + list(inferred.graph.output):
            dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in info.type.tensor_type.shape.dim]
            expected[info.name] = dims
        info = json.loads(run("inspect", model, "--json", "--nodes", check=True)[1])
        checked = 0
        for node in info["node_list"]:
            for value in node["outputs"]:
                if value["name"] in expected:
                    self.assertEqual(value["shape"], expected[value["name"]], value["name"])
                    checked += 1
        self.assertEqual(checked, len(expected))


if __name__ == "__main__":
    main()
