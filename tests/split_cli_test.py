"""`cleave support` and `cleave split` end to end: outputs, standalone submodels, bad input."""
import json
import os
import sys

import onnx

from testlib import EXAMPLES, SOURCE_DIR, TempDirTest, main, run

GPU = os.path.join(EXAMPLES, "profiles", "gpu.json")
NPU = os.path.join(EXAMPLES, "profiles", "npu.json")


class Split(TempDirTest):
    def test_every_example_splits_into_checked_standalone_submodels(self):
        for model in ("cnn", "transformer", "dlrm"):
            with self.subTest(model=model):
                out = self.path(model)
                code, stdout, err = run("split", os.path.join(EXAMPLES, f"{model}.onnx"), "--profile", GPU,
                                        "-o", out, "--json")
                self.assertEqual(code, 0, err)
                summary = json.loads(stdout)
                plan = json.load(open(os.path.join(out, "plan.json")))
                self.assertEqual(plan["schema"], "cleave.plan")
                self.assertEqual(len(plan["submodules"]), summary["acc_subgraphs"] + summary["cpu_subgraphs"])
                produced = {"input"}
                source = onnx.load(os.path.join(EXAMPLES, f"{model}.onnx"))
                # Constants and second names of initializers (Identity of one) are parameters,
                # not work: every submodel that reads one holds its own copy.
                source_inits = {i.name for i in source.graph.initializer}
                parameter_nodes = set()
                for n in source.graph.node:
                    if (n.op_type == "Constant" and not n.input) or (n.op_type == "Identity" and n.input[0] in source_inits):
                        source_inits.add(n.output[0])
                        parameter_nodes.add(n.name)
                # Nodes the split's shape folding removed (their outputs may become initializers).
                planned = {n for sub in plan["submodules"] for n in sub["nodes"]}
                removed = [n for n in source.graph.node if n.name not in parameter_nodes and n.name not in planned]
                self.assertEqual(len(removed), summary.get("simplify", {}).get("removed_nodes", 0))
                removed_outputs = {o for n in removed for o in n.output}
                for sub in plan["submodules"]:
                    for value in sub["inputs"]:  # plan order: every input comes from earlier
                        self.assertIn(value["from"], produced)
                    produced.add(sub["name"])
                    m = onnx.load(os.path.join(out, sub["file"]))
                    onnx.checker.check_model(m, full_check=True)
                    self.assertEqual([i.name for i in m.graph.input], [v["value"] for v in sub["inputs"]])
                    self.assertEqual([o.name for o in m.graph.output], sub["outputs"])
                    used = set()  # names read by nodes, subgraph bodies (Loop, If) included
                    def collect(graph):
                        for n in graph.node:
                            used.update(n.input)
                            for a in n.attribute:
                                if a.HasField("g"):
                                    collect(a.g)
                    collect(m.graph)
                    for init in m.graph.initializer:  # only the initializers it uses
                        self.assertIn(init.name, used)
                        if init.name not in source_inits:  # a value shape folding made a constant
                            self.assertIn(init.name, removed_outputs)
                            self.assertIn(init.data_type, (onnx.TensorProto.INT64, onnx.TensorProto.INT32,
                                                           onnx.TensorProto.BOOL, onnx.TensorProto.FLOAT))
                    for value in sub["inputs"]:  # parameters are never sent
                        self.assertNotIn(value["value"], source_inits)
                nodes = [n for sub in plan["submodules"] for n in sub["nodes"]]
                self.assertEqual(len(nodes), len(set(nodes)))  # each node in one submodule
                self.assertEqual(sorted(nodes + [n.name for n in removed]),
                                 sorted(n.name for n in source.graph.node if n.name not in parameter_nodes))
                for name in ("report.txt", "report.json"):
                    self.assertTrue(os.path.exists(os.path.join(out, name)))

    def test_every_cpu_node_has_a_reason(self):
        code, stdout, err = run("split", os.path.join(EXAMPLES, "transformer.onnx"), "--profile", NPU,
                                "--preview", "--json")
        self.assertEqual(code, 0, err)
        summary = json.loads(stdout)
        for node in summary["cpu_nodes"]:
            self.assertTrue(node["reason"])
            self.assertTrue(node["detail"], node)
        # Grouped by (op, reason), most frequent first, covering every CPU node once.
        groups = summary["cpu_reasons"]
        self.assertEqual(sum(g["count"] for g in groups), len(summary["cpu_nodes"]))
        self.assertEqual([g["count"] for g in groups], sorted((g["count"] for g in groups), reverse=True))
        pairs = {(n["target"], n["reason"]) for n in summary["cpu_nodes"]}
        self.assertEqual(pairs, {(g["op"], g["reason"]) for g in groups})
        self.assertIn(("Transpose", "not in the profile"), pairs)
        code, text, err = run("split", os.path.join(EXAMPLES, "transformer.onnx"), "--profile", NPU, "--preview")
        # The int64 Adds of attention's shape arithmetic fold to constants: 10 of 12 remain.
        self.assertIn("cpu nodes by op and reason:\n  Transpose x12: not in the profile", text)
        self.assertIn("\n  Add x10: dtype not allowed", text)
        code, text, err = run("split", os.path.join(EXAMPLES, "transformer.onnx"), "--profile", NPU, "--preview",
                              "--no-simplify")
        self.assertIn("cpu nodes by op and reason:\n  Add x12: dtype not allowed", text)

    def test_plan_only_writes_no_submodels_and_is_deterministic(self):
        args = ["split", os.path.join(EXAMPLES, "cnn.onnx"), "--profile", GPU, "--plan-only"]
        run(*args, "-o", self.path("a"), check=True)
        run(*args, "-o", self.path("b"), check=True)
        self.assertEqual(sorted(os.listdir(self.path("a"))), [".cleave-output", "plan.json", "report.json", "report.txt"])
        for name in os.listdir(self.path("a")):
            self.assertEqual(open(self.path(f"a/{name}")).read().replace(self.path("a"), ""),
                             open(self.path(f"b/{name}")).read().replace(self.path("b"), ""))

    def test_dot_draws_each_submodule_as_a_cluster(self):
        out = self.path("dot")
        run("split", os.path.join(EXAMPLES, "transformer.onnx"), "--profile", GPU, "-o", out, "--dot", check=True)
        plan = json.load(open(os.path.join(out, "plan.json")))
        dot = open(os.path.join(out, "split.dot")).read()
        self.assertTrue(dot.startswith("digraph split {"))
        for sub in plan["submodules"]:
            self.assertIn('label="%s";' % sub["name"], dot)
        self.assertEqual(dot.count("subgraph cluster_"), len(plan["submodules"]))
        self.assertIn("(not in the profile)", dot)
        code, _, err = run("split", os.path.join(EXAMPLES, "transformer.onnx"), "--profile", GPU, "--preview", "--dot")
        self.assertEqual(code, 2, err)  # --dot needs -o

    def test_max_acc_splits_limits_the_submodules(self):
        run("gen", "chain", "30", "-o", self.path("c.onnx"), check=True)
        profile = self.path("nosig.json")
        json.dump({"ops": ["MatMul", "Relu", "Tanh", "Add"]}, open(profile, "w"))
        free = json.loads(run("split", self.path("c.onnx"), "--profile", profile, "--preview", "--json", check=True)[1])
        capped = json.loads(run("split", self.path("c.onnx"), "--profile", profile, "--preview", "--json",
                                "--max-acc-splits", "3", check=True)[1])
        self.assertGreater(len(free["subgraphs"]), 3)
        self.assertLessEqual(len(capped["subgraphs"]), 3)
        self.assertTrue(any(n["reason"] == "merged for max splits" for n in capped["cpu_nodes"]))

    def test_fx_graph_gets_an_assignment(self):
        out = self.path("fx")
        run("split", os.path.join(EXAMPLES, "cnn.fx.json"), "--profile", GPU, "-o", out, check=True)
        assignment = json.load(open(os.path.join(out, "assignment.json")))
        self.assertEqual(assignment["schema"], "cleave.fx_assignment")
        self.assertTrue(set(assignment["nodes"].values()) <= set(assignment["tags"]))


class Support(TempDirTest):
    def test_json_and_dot(self):
        dot = self.path("s.dot")
        code, stdout, err = run("support", os.path.join(EXAMPLES, "cnn.onnx"), "--profile", NPU, "--json", "--dot", dot)
        self.assertEqual(code, 0, err)
        info = json.loads(stdout)
        self.assertEqual(sum(t["count"] for t in info["op_types"]), info["callable_nodes"])
        self.assertTrue(any(not t["supported"] and "dtype" in t["reason"] for t in info["op_types"]))
        text = open(dot).read()
        self.assertIn("crimson", text)
        self.assertIn("->", text)


    def test_segments_name_the_ops_that_cost_the_most_submodules(self):
        model = os.path.join(EXAMPLES, "transformer.onnx")
        code, stdout, err = run("support", model, "--profile", GPU, "--json", "--segments")
        self.assertEqual(code, 0, err)
        segments = json.loads(stdout)["segments"]
        self.assertTrue(segments)
        saved = [s["saved"] for s in segments]
        self.assertEqual(saved, sorted(saved, reverse=True))
        for s in segments:
            self.assertEqual(s["saved"], max(s["submodules"] - s["submodules_if_supported"], 0))
        # The claim checked by a split: the profile with the top op added splits into what it said.
        top = segments[0]
        self.assertGreater(top["saved"], 0)
        with open(GPU) as f:
            profile = json.load(f)
        if isinstance(profile["ops"], list):
            profile["ops"].append(top["op"])
        else:
            profile["ops"][top["op"]] = None
        more = self.path("more.json")
        with open(more, "w") as f:
            json.dump(profile, f)
        code, stdout, err = run("split", model, "--profile", more, "--preview", "--json")
        self.assertEqual(code, 0, err)
        report = json.loads(stdout)
        self.assertEqual(report["acc_subgraphs"] + report["cpu_subgraphs"], top["submodules_if_supported"])
        code, text, err = run("support", model, "--profile", GPU, "--segments")
        self.assertEqual(code, 0, err)
        self.assertIn(f"\n  {top['op']} x{top['cpu_nodes']}", text)
        self.assertIn(f"(saves {top['saved']})", text)

    def test_the_tensorrt_profile_takes_a_decoder_but_its_loss(self):
        """TensorRT 10.15's ONNX matrix (examples/profiles/tensorrt.json): a GPT-style decoder exported
        with its cross-entropy loss goes to the accelerator whole, its LayerNormalizations included
        (TensorRT 8.5's matrix lacked them: one submodule pair per LayerNormalization); the loss,
        which TensorRT does not take, stays on the CPU."""
        import torch
        sys.path.insert(0, os.path.join(SOURCE_DIR, "bench"))
        from real_exports import GptDecoder

        class WithLoss(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.decoder = GptDecoder(vocab=100, d=32, heads=4, layers=3, context=16)

            def forward(self, ids, target):
                logits = self.decoder(ids)
                return torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())

        torch.manual_seed(0)
        model = self.path("decoder.onnx")
        ids = torch.randint(0, 100, (2, 16))
        torch.onnx.export(WithLoss(), (ids, ids), model, input_names=["ids", "target"], output_names=["loss"],
                          opset_version=17, dynamo=False, do_constant_folding=False)
        trt = os.path.join(EXAMPLES, "profiles", "tensorrt.json")
        self.assertIn("TensorRT 10.15", json.load(open(trt))["version"])
        code, stdout, err = run("split", model, "--profile", trt, "--preview", "--json")
        self.assertEqual(code, 0, err)
        report = json.loads(stdout)
        self.assertEqual({n["target"] for n in report["cpu_nodes"]}, {"SoftmaxCrossEntropyLoss"})
        self.assertEqual((report["acc_subgraphs"], report["cpu_subgraphs"]), (1, 1))
        layer_norms = sum(n.op_type == "LayerNormalization" for n in onnx.load(model).graph.node)
        self.assertEqual(layer_norms, 7)  # two per block and the last: all on the accelerator


class BadInput(TempDirTest):
    def test_malformed_profile_names_its_location(self):
        bad = self.path("bad.json")
        open(bad, "w").write('{"ops": {"Conv": {"inputs": [["f99"]]}}}')
        code, _, err = run("split", os.path.join(EXAMPLES, "cnn.onnx"), "--profile", bad, "-o", self.path("o"))
        self.assertOneLineError(code, err, "ops.Conv.inputs[0][0]", "f99")
        self.assertFalse(os.path.exists(self.path("o")))

    def test_missing_profile(self):
        code, _, err = run("support", os.path.join(EXAMPLES, "cnn.onnx"), "--profile", self.path("none.json"))
        self.assertOneLineError(code, err, "none.json")

    def test_unwritable_output_leaves_nothing(self):
        code, _, err = run("split", os.path.join(EXAMPLES, "cnn.onnx"), "--profile", GPU,
                           "-o", self.path("missing/out"))
        self.assertOneLineError(code, err, "missing")
        self.assertEqual(os.listdir(self.tmp), [])

    def test_negative_min_size(self):
        code, _, err = run("split", os.path.join(EXAMPLES, "cnn.onnx"), "--profile", GPU, "-o", self.path("o"),
                           "--min-acc-size", "-2")
        self.assertOneLineError(code, err, "min-acc-size")
        self.assertEqual(os.listdir(self.tmp), [])


if __name__ == "__main__":
    main()
