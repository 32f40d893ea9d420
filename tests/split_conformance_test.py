"""`cleave split` against torch.fx's own splitter (_SplitterBase in PyTorch 2.11).

For the graph families of shared/bench/reference/graphs.py and torchvision's resnet18 and
mobilenet_v2, with the same support set and settings, the sequence of acc/cpu subgraphs cleave
makes has the same node sets, in the same order, as _SplitterBase's put_nodes_into_subgraphs +
remove_small_acc_subgraphs. Then the FX assignment is applied with torch's own split_by_tags
(tools/cleave_fx.py apply_split) and the split module must compute what the original computes.
"""
import json
import os
import random
import sys

import torch
from torch.fx.passes.operator_support import OperatorSupport
from torch.fx.passes.splitter_base import _SplitterBase, _SplitterSettingBase
from torch.fx.passes.tools_common import CALLABLE_NODE_OPS, get_node_target

from testlib import SOURCE_DIR, TempDirTest, main, run

sys.path.insert(0, os.path.join(SOURCE_DIR, "tools"))
import cleave_fx  # noqa: E402


def reference_subgraphs(gm, inputs, supported_targets, min_size):
    argv, sys.argv = sys.argv, sys.argv[:1]  # _SplitterSettingBase parses sys.argv
    try:
        settings = _SplitterSettingBase(min_acc_module_size=min_size)
    finally:
        sys.argv = argv
    support = OperatorSupport({t: None for t in supported_targets})
    splitter = _SplitterBase(gm, inputs, support, settings)
    import contextlib, io
    with contextlib.redirect_stdout(io.StringIO()):
        subgraphs = splitter.remove_small_acc_subgraphs(splitter.put_nodes_into_subgraphs())
    return [(s.is_acc, sorted(n.name for n in s.nodes)) for s in subgraphs]


def reference_extended(gm, inputs, supported_targets, min_size):
    """tag() then extend_acc_subgraph on every acc tag, in order: [(tag, sorted node names)]."""
    argv, sys.argv = sys.argv, sys.argv[:1]
    try:
        settings = _SplitterSettingBase(min_acc_module_size=min_size)
    finally:
        sys.argv = argv
    splitter = _SplitterBase(gm, inputs, OperatorSupport({t: None for t in supported_targets}), settings)
    import contextlib, io
    with contextlib.redirect_stdout(io.StringIO()):
        splitter.tag(splitter.remove_small_acc_subgraphs(splitter.put_nodes_into_subgraphs()))
    for tag in splitter.tags:
        if tag.startswith("_run_on_acc_"):
            splitter.extend_acc_subgraph(tag)
    groups = {}
    for node in gm.graph.nodes:
        if node.op in CALLABLE_NODE_OPS:
            groups.setdefault(node.tag, []).append(node.name)
            del node.tag
    return [(tag, sorted(groups[tag])) for tag in splitter.tags if tag in groups]


def targets_of(gm):
    submodules = dict(gm.named_modules())
    return sorted({get_node_target(submodules, n) for n in gm.graph.nodes if n.op in CALLABLE_NODE_OPS})


class Conformance(TempDirTest):
    def split_with_cleave(self, fx_path, supported, min_size, name):
        profile = self.path(f"{name}.profile.json")
        with open(profile, "w") as f:
            json.dump({"name": name, "ops": supported}, f)
        out_dir = self.path(f"{name}.out")
        code, out, err = run("split", fx_path, "--profile", profile, "-o", out_dir,
                             "--min-acc-size", min_size, "--json")
        self.assertEqual(code, 0, err)
        summary = json.loads(out)
        return [(s["role"] == "acc", sorted(s["nodes"])) for s in summary["subgraphs"]], out_dir

    def check(self, gm, inputs, name, support_sets, min_sizes=(1,)):
        fx_path = self.path(f"{name}.fx.json")
        with torch.no_grad():
            cleave_fx.export_graph(gm, inputs, fx_path)
        checked = 0
        for k, supported in enumerate(support_sets):
            for min_size in min_sizes:
                with self.subTest(graph=name, support=k, min_size=min_size):
                    expected = reference_subgraphs(gm, inputs, supported, min_size)
                    actual, out_dir = self.split_with_cleave(fx_path, supported, min_size, f"{name}_{k}_{min_size}")
                    self.assertEqual(actual, expected)
                    checked += 1
        # The assignment, applied by torch's split_by_tags, computes the same outputs.
        split = cleave_fx.apply_split(gm, out_dir)
        with torch.no_grad():
            torch.testing.assert_close(split(*inputs), gm(*inputs))
        return checked

    def support_sets(self, gm, seed, count=4):
        targets = targets_of(gm)
        rng = random.Random(seed)
        sets = [targets, [t for t in targets if "sigmoid" not in t]]
        for _ in range(count):
            sets.append(sorted(t for t in targets if rng.random() < 0.6))
        return sets

    def test_reference_families(self):
        graphs = cleave_fx._reference_graphs()
        for family, size in (("chain", 30), ("wide", 12), ("linear_chain", 16), ("diamonds", 10)):
            torch.manual_seed(0)
            gm, inputs = graphs.FAMILIES[family](size)
            self.assertEqual(self.check(gm, inputs, family, self.support_sets(gm, seed=len(family)),
                                        min_sizes=(1, 3, 8)), 6 * 3)

    def test_extend_acc_subgraph(self):
        graphs = cleave_fx._reference_graphs()
        compared = changed = 0
        for family, size in (("chain", 30), ("diamonds", 12), ("linear_chain", 16), ("wide", 10)):
            torch.manual_seed(0)
            gm, inputs = graphs.FAMILIES[family](size)
            fx_path = self.path(f"ext_{family}.fx.json")
            with torch.no_grad():
                cleave_fx.export_graph(gm, inputs, fx_path)
            for k, supported in enumerate(self.support_sets(gm, seed=11)):
                for min_size in (2, 5):
                    with self.subTest(family=family, support=k, min_size=min_size):
                        expected = reference_extended(gm, inputs, supported, min_size)
                        profile = self.path(f"ext_{family}_{k}.json")
                        with open(profile, "w") as f:
                            json.dump({"ops": supported}, f)
                        code, out, err = run("split", fx_path, "--profile", profile, "--min-acc-size", min_size,
                                             "--extend-acc", "--preview", "--json")
                        self.assertEqual(code, 0, err)
                        actual = [(s["name"], sorted(s["nodes"])) for s in json.loads(out)["subgraphs"]]
                        self.assertEqual(actual, expected)
                        compared += 1
                        plain = reference_subgraphs(gm, inputs, supported, min_size)
                        changed += [nodes for _, nodes in expected] != [nodes for _, nodes in plain]
        self.assertEqual(compared, 4 * 6 * 2)
        self.assertGreater(changed, 0)  # extension really moved nodes (2 of the first 36 cases)

    def test_time_splitter_support_set(self):
        """The set time_splitter.py uses: every call_function except torch.sigmoid."""
        graphs = cleave_fx._reference_graphs()
        for family in ("chain", "wide"):
            gm, inputs = graphs.FAMILIES[family](25)
            submodules = dict(gm.named_modules())
            supported = sorted({get_node_target(submodules, n) for n in gm.graph.nodes
                                if n.op == "call_function" and n.target is not torch.sigmoid})
            self.assertEqual(self.check(gm, inputs, f"ts_{family}", [supported]), 1)

    def test_torchvision_models(self):
        for model in ("resnet18", "mobilenet_v2"):
            gm, inputs = cleave_fx.torchvision_model(model)
            gm.eval()
            self.assertEqual(self.check(gm, inputs, model, self.support_sets(gm, seed=7, count=3),
                                        min_sizes=(1, 4)), 5 * 2)


if __name__ == "__main__":
    main()
