"""FX graphs import node for node: the graphs of shared/bench/reference/graphs.py and
torchvision's resnet18, exported with tools/cleave_fx.py, read by `cleave inspect --json --nodes`
and compared with what torch itself holds (names, order, opcodes, get_node_target, inputs,
ShapeProp's dtype and shape, module parameter bytes)."""
import json
import os
import sys

import torch
from torch.fx.passes.shape_prop import TensorMetadata
from torch.fx.passes.tools_common import get_node_target

from testlib import SOURCE_DIR, TempDirTest, main, run

sys.path.insert(0, os.path.join(SOURCE_DIR, "tools"))
import cleave_fx  # noqa: E402

DTYPE_NAMES = {torch.float32: "f32", torch.float16: "f16", torch.int64: "i64", torch.bool: "bool"}


class FxImport(TempDirTest):
    def assertImportsNodeForNode(self, gm, inputs, name):
        path = self.path(f"{name}.fx.json")
        with torch.no_grad():
            cleave_fx.export_graph(gm, inputs, path)
        code, out, err = run("inspect", path, "--json", "--nodes")
        self.assertEqual(code, 0, err)
        info = json.loads(out)
        mine = info["node_list"]
        theirs = list(gm.graph.nodes)
        self.assertEqual([n["name"] for n in mine], [n.name for n in theirs])
        submodules = dict(gm.named_modules())
        for node, entry in zip(theirs, mine):
            self.assertEqual(entry["op"], node.op, node.name)
            self.assertEqual(entry["inputs"], [n.name for n in node.all_input_nodes], node.name)
            if node.op in ("call_function", "call_module", "call_method"):
                self.assertEqual(entry["target"], get_node_target(submodules, node), node.name)
            if node.op == "call_module":
                module = submodules[node.target]
                expected = sum(t.numel() * t.element_size()
                               for t in list(module.parameters()) + list(module.buffers()))
                self.assertEqual(entry["parameter_bytes"], expected, node.name)
            meta = node.meta.get("tensor_meta")
            if isinstance(meta, TensorMetadata) and node.op != "output":
                value = entry["outputs"][0]
                self.assertEqual(value["shape"], list(meta.shape), node.name)
                self.assertEqual(value["dtype"], DTYPE_NAMES[meta.dtype], node.name)
        self.assertEqual(info["nodes"], len(theirs))
        return info

    def test_reference_graph_families(self):
        graphs = cleave_fx._reference_graphs()
        for family, size in (("chain", 12), ("wide", 9), ("linear_chain", 10), ("diamonds", 6)):
            with self.subTest(family=family):
                torch.manual_seed(0)
                gm, inputs = graphs.FAMILIES[family](size)
                self.assertImportsNodeForNode(gm, inputs, family)

    def test_torchvision_resnet18(self):
        gm, inputs = cleave_fx.torchvision_model("resnet18")
        info = self.assertImportsNodeForNode(gm, inputs, "resnet18")
        self.assertEqual(info["parameter_bytes"],
                         sum(t.numel() * 4 for t in list(gm.parameters()) + list(gm.buffers())
                             if t.dtype == torch.float32)
                         + sum(t.numel() * 8 for t in gm.buffers() if t.dtype == torch.int64))

    def test_exporter_command_line(self):
        path = self.path("chain.json")
        import subprocess
        subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "tools", "cleave_fx.py"), "family", "chain", "3",
                        "-o", path], check=True)
        info = json.loads(run("inspect", path, "--json", check=True)[1])
        self.assertEqual(info["nodes"], 3 * 5 + 2)
        self.assertEqual(info["format"], "fx")


if __name__ == "__main__":
    main()
