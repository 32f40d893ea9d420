"""The runtime's commands end to end on the committed examples: `cleave run` (models and cut
models, repeat, saved outputs), `cleave split --dump-inputs` and `--preview --backend`
(lower-and-run with a culprit), `cleave minimize` in its four modes with a repro submodel, and
tensors in and out as .pb, .npy, .npz and folders of input_N.pb (checked with NumPy and onnx), and
the random ops by their statistics (their values are ATen's draws, reproducible per seed)."""
import json
import os
import resource
import subprocess
import sys
import zipfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from testlib import EXAMPLES, ONNX_TESTS, TempDirTest, main, run

CNN = os.path.join(EXAMPLES, "cnn.onnx")


class RuntimeCli(TempDirTest):
    def profile(self, name, drop=()):
        ops = {n.op_type for n in onnx.load(CNN).graph.node} - set(drop)
        path = self.path(f"{name}.json")
        with open(path, "w") as f:
            json.dump({"name": name, "ops": sorted(ops)}, f)
        return path

    def chain(self, name, length, input_name="x"):
        """A model of `length` elementwise ops (Relu, Neg, ...) on one 1024x1024 input."""
        nodes, previous = [], input_name
        for i in range(length):
            nodes.append(helper.make_node("Neg" if i % 2 else "Relu", [previous], [f"v{i}"]))
            previous = f"v{i}"
        shape = [1024, 1024]
        graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, shape)],
                                  [helper.make_tensor_value_info(previous, TensorProto.FLOAT, shape)])
        model = self.path(name)
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
        return model

    def test_run_prints_summaries_and_saves_outputs(self):
        code, out, err = run("run", CNN, "--seed", "3", "--repeat", "3", "--json", "--save-outputs", self.path("o.json"))
        self.assertEqual(code, 0, err)
        summary = json.loads(out)
        self.assertEqual(summary["timing"]["runs"], 3)
        self.assertEqual(list(summary["outputs"]), ["logits"])
        saved = json.load(open(self.path("o.json")))
        self.assertEqual(saved["logits"]["dims"], [1, 10])
        code, again, _ = run("run", CNN, "--seed", "3", "--json")
        self.assertEqual(json.loads(again)["outputs"], summary["outputs"])  # deterministic

    def test_repeated_runs_fault_no_pages_in_again(self):
        """A chain of 4 MiB values, each freed after its reader: with glibc's defaults every run
        after the first faulted about 1,100 pages in again (the freed heap top was trimmed);
        `cleave run` keeps freed large blocks for the next run (runtime/engine/host_memory.h), whatever
        the heap's layout (the model path's length moved it)."""
        model = self.chain("chain.onnx", 8)

        def faults(repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
            code, _, err = run("run", model, "--repeat", repeat)
            self.assertEqual(code, 0, err)
            return resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - before

        faults(2)  # warm: the first launch faults more of its own (files, libraries)
        extra = faults(12) - faults(2)  # ten more runs
        self.assertLess(extra, 300)  # the defaults: about 11,000; kept in glibc's heap: 2-4,113 by layout

    def test_profile_reports_op_types_and_the_slowest_nodes(self):
        code, out, err = run("run", CNN, "--seed", "3", "--profile", "--json")
        self.assertEqual(code, 0, err)
        summary = json.loads(out)
        graph = onnx.load(CNN).graph
        ops, names = {n.op_type for n in graph.node}, {n.name for n in graph.node}
        # Op types, or fused groups named by their ops ("Conv+Add+Relu"), timed once at their last node.
        self.assertLessEqual({op for p in summary["profile"] for op in p["op"].split("+")}, ops)
        self.assertIn("Conv+Relu", {p["op"] for p in summary["profile"]})
        nodes = summary["slowest_nodes"]
        self.assertTrue(0 < len(nodes) <= 10, nodes)
        self.assertLessEqual({n["node"] for n in nodes}, names)
        seconds = [n["seconds"] for n in nodes]
        self.assertEqual(seconds, sorted(seconds, reverse=True))
        self.assertLessEqual(sum(seconds), sum(p["seconds"] for p in summary["profile"]) + 1e-9)
        every = summary["node_seconds"]  # each timed node (a fused group at its last node), slowest first
        self.assertEqual(every[:len(nodes)], nodes)
        self.assertLessEqual({n["node"] for n in every}, names)
        self.assertAlmostEqual(sum(n["seconds"] for n in every), sum(p["seconds"] for p in summary["profile"]), places=9)
        # The last run is its kernels plus the time outside them.
        kernels = sum(p["seconds"] for p in summary["profile"])
        self.assertGreater(summary["outside_kernels_s"], 0)
        self.assertAlmostEqual(kernels + summary["outside_kernels_s"], summary["last_run_s"], places=9)
        parameters = sum(numpy_helper.to_array(t).nbytes for t in graph.initializer)
        self.assertLess(summary["peak_tensor_bytes"], summary["peak_resident_bytes"])
        # The CPU's values share one memory: nothing crosses (value_placement.h places them apart
        # only for a device with its own).
        self.assertEqual((summary["host_device_copies"], summary["host_device_copy_bytes"]), (0, 0))
        self.assertEqual((summary["seam_copies"], summary["seam_copy_bytes"], summary["seam_copy_s"]), (0, 0, 0))
        # Beside them, oneDNN's weight copies: each convolution's weight reordered (padded to its
        # blocks, so no smaller); all within the resident set.
        conv_weights = {n.input[1] for n in graph.node if n.op_type == "Conv"}
        conv_bytes = sum(numpy_helper.to_array(t).nbytes for t in graph.initializer if t.name in conv_weights)
        self.assertGreater(conv_bytes, 0)
        self.assertGreaterEqual(summary["onednn_weight_bytes"], conv_bytes)
        self.assertLess(summary["peak_tensor_bytes"] + summary["onednn_weight_bytes"], summary["peak_resident_bytes"])
        self.assertGreaterEqual(summary["last_run_s"], summary["timing"]["min_s"])
        # Peak live activations: at least the largest value a node makes (it is live when made), at
        # most all of them (float32 values, sizes from onnx's shape inference).
        inferred = onnx.shape_inference.infer_shapes(onnx.load(CNN)).graph
        made = {o for n in inferred.node for o in n.output}
        sizes = [4 * int(np.prod([d.dim_value for d in v.type.tensor_type.shape.dim]))
                 for v in list(inferred.value_info) + list(inferred.output) if v.name in made]
        self.assertGreaterEqual(summary["peak_activation_bytes"], max(sizes))
        self.assertLessEqual(summary["peak_activation_bytes"], sum(sizes))
        # Tensor memory at the last run's peak holds at least the parameters other than convolution
        # weights (those are held in oneDNN's layouts alone once reordered, counted with its copies)
        # and the largest value. Not the peak of live activations: that counts a buffer twice where
        # a convolution sums onto its dying residual in place (the output is the residual's buffer).
        self.assertGreaterEqual(summary["peak_tensor_bytes"], parameters - conv_bytes + max(sizes))
        self.assertGreaterEqual(summary["peak_tensor_bytes"] + summary["onednn_weight_bytes"], parameters + max(sizes))
        # The process's peak resident set holds at least those activations (and the libraries).
        self.assertGreater(summary["peak_resident_bytes"], summary["peak_activation_bytes"])
        code, text, err = run("run", CNN, "--seed", "3", "--profile")
        self.assertEqual(code, 0, err)
        self.assertIn("slowest nodes (last run):", text)
        self.assertRegex(text, r"outside kernels \(last run: [^)]*\): [\d.e-]+ ms of [\d.e-]+ ms")
        self.assertIn(f"peak live activations (last run): {summary['peak_activation_bytes']} bytes", text)
        self.assertRegex(text, r"peak tensor memory \(last run: [^)]*\): \d+ bytes")
        self.assertRegex(text, r"peak resident set of the process \(loading and every run, libraries included\): \d+ MiB")

    def test_optimizations_can_be_turned_off_with_the_same_results(self):
        outputs = {}
        for flags in ((), ("--no-fusion",), ("--no-blocked-layout",), ("--no-fusion", "--no-blocked-layout"),
                      ("--no-winograd",), ("--no-blocked-convolutions",), ("--no-packed-weights",)):
            # The second run reads convolution weights held only reordered (not with --no-packed-weights).
            code, _, err = run("run", CNN, "--seed", "3", "--repeat", "2", "--save-outputs", self.path("o.json"),
                               *flags)
            self.assertEqual(code, 0, err)
            outputs[flags] = json.load(open(self.path("o.json")))["logits"]["data"]
        base = outputs[()]
        # The same convolution primitives on the same values; the classifier's product may run on
        # another kernel (AVX2's packed panels against oneDNN's on the rows), so a float's rounding.
        scale = max(map(abs, base))
        self.assertLessEqual(max(abs(a - b) for a, b in zip(outputs[("--no-packed-weights",)], base)), 1e-6 * scale)
        for flags, data in outputs.items():
            self.assertEqual(len(data), len(base))
            self.assertLessEqual(max(abs(a - b) for a, b in zip(data, base)), 1e-4 * max(map(abs, base)), flags)
        # MatMul weights held packed (the default) or as read in place: the same results.
        transformer = os.path.join(EXAMPLES, "transformer.onnx")
        results = []
        # Three runs: the later ones reuse the remembered shape arithmetic (not with --no-shape-memo).
        for flags in ((), ("--no-packed-weights",), ("--no-fusion",), ("--no-shape-memo",)):
            code, _, err = run("run", transformer, "--seed", "3", "--repeat", "3", "--save-outputs", self.path("t.json"),
                               *flags)
            self.assertEqual(code, 0, err)
            results.append(json.load(open(self.path("t.json")))["y"]["data"])
        scale = max(map(abs, results[0]))
        self.assertGreater(scale, 0)
        for data in results[1:]:
            self.assertLessEqual(max(abs(a - b) for a, b in zip(data, results[0])), 1e-5 * scale)

    def test_cut_seams_join_on_one_backend_and_stay_apart_on_two(self):
        # Relu on the CPU cuts every Conv+Relu in two; on one backend the submodules run joined
        # as one graph, so the Conv+Relu fusion crosses the seams again.
        holes = self.profile("holes", drop=("Relu",))
        out = self.path("cut")
        code, _, err = run("split", CNN, "--profile", holes, "-o", out)
        self.assertEqual(code, 0, err)
        names = [s["name"] for s in json.load(open(os.path.join(out, "plan.json")))["submodules"]]
        submodules = len(names)
        self.assertGreater(submodules, 2)
        code, _, err = run("run", CNN, "--seed", "3", "--save-outputs", self.path("whole.json"))
        self.assertEqual(code, 0, err)
        whole = json.load(open(self.path("whole.json")))["logits"]["data"]

        def cut_run(*flags):
            code, out_text, err = run("run", out, "--seed", "3", "--profile", "--json",
                                      "--save-outputs", self.path("cut.json"), *flags)
            self.assertEqual(code, 0, err)
            return json.loads(out_text), json.load(open(self.path("cut.json")))["logits"]["data"]

        joined, data = cut_run()
        self.assertEqual((joined["submodules"], joined["modules"]), (submodules, 1))
        self.assertIn("Conv+Relu", {p["op"] for p in joined["profile"]})
        self.assertEqual([s["name"] for s in joined["timing"]["steps"]], [names[0] + ".." + names[-1]])
        self.assertEqual(data, whole)  # the same kernels on the same values: bit for bit
        apart, data = cut_run("--no-join")
        self.assertEqual(apart["modules"], submodules)
        self.assertNotIn("Conv+Relu", {p["op"] for p in apart["profile"]})
        self.assertLessEqual(max(abs(a - b) for a, b in zip(data, whole)), 1e-4 * max(map(abs, whole)))
        # A real second backend (the profile refuses Relu) keeps every seam.
        two, _ = cut_run("--backend", "profile:" + holes)
        self.assertEqual(two["modules"], submodules)

    def test_a_baseline_is_timed_pair_by_pair_in_the_same_process(self):
        # 32 times the work in the baseline: the paired ratios well under 1, whatever the machine's
        # speed does meanwhile (with 8 times, a loaded machine once gave 0.8: each op's threads
        # then wait for a core).
        short, long = self.chain("short.onnx", 2), self.chain("long.onnx", 64)
        code, out, err = run("run", short, "--repeat", "8", "--baseline", long, "--json")
        self.assertEqual(code, 0, err)
        summary = json.loads(out)
        baseline, ratio = summary["baseline"], summary["baseline"]["ratio"]
        self.assertEqual(baseline["model"], long)
        self.assertGreater(baseline["median_s"], summary["timing"]["median_s"])
        self.assertLessEqual(ratio["min"], ratio["p25"])
        self.assertLessEqual(ratio["p25"], ratio["median"])
        self.assertLessEqual(ratio["median"], ratio["p75"])
        self.assertLessEqual(ratio["p75"], ratio["max"])
        self.assertLess(ratio["median"], 0.5)
        self.assertGreater(ratio["min"], 0.0)
        code, out, err = run("run", long, "--repeat", "2", "--baseline", short)
        self.assertEqual(code, 0, err)
        self.assertIn("this / baseline over 2 pair(s): median ", out)
        self.assertGreater(float(out.split("this / baseline over 2 pair(s): median ")[1].split(",")[0]), 2.0)
        # Refused: a baseline with other inputs, with --profile or --distributed.
        other = self.chain("other.onnx", 4, input_name="y")
        code, _, err = run("run", short, "--baseline", other)
        self.assertOneLineError(code, err, "takes other inputs")
        code, _, err = run("run", short, "--baseline", long, "--profile")
        self.assertOneLineError(code, err, "--profile", exit_code=2)
        code, _, err = run("run", short, "--baseline", self.path("missing.onnx"))
        self.assertOneLineError(code, err, "--baseline")
        code, _, err = run("run", short, "--baseline-options", "--no-fusion")
        self.assertOneLineError(code, err, "--baseline-options goes with --baseline", exit_code=2)
        code, _, err = run("run", short, "--baseline", long, "--baseline-options", "--no-such-flag")
        self.assertOneLineError(code, err, "--baseline-options", exit_code=2)
        # Another optimization for the baseline: the same model, paired, both sides ran.
        code, out, err = run("run", CNN, "--repeat", "2", "--baseline", CNN, "--baseline-options",
                             "--no-fusion --no-winograd", "--json")
        self.assertEqual(code, 0, err)
        self.assertGreater(json.loads(out)["baseline"]["min_s"], 0.0)

    def test_dumped_inputs_are_what_each_submodule_reads(self):
        out = self.path("cut")
        code, _, err = run("split", CNN, "--profile", self.profile("holes", drop=("Relu",)), "-o", out,
                           "--dump-inputs", "--seed", "4")
        self.assertEqual(code, 0, err)
        plan = json.load(open(os.path.join(out, "plan.json")))
        dumped = json.load(open(os.path.join(out, "submodule_inputs.json")))
        self.assertEqual(sorted(dumped), sorted(s["name"] for s in plan["submodules"]))
        for index, sub in enumerate(plan["submodules"]):
            self.assertEqual(sorted(dumped[sub["name"]]), sorted(i["value"] for i in sub["inputs"]))
            if index + 1 == len(plan["submodules"]):
                continue
            # Running a submodule on its dumped inputs gives the next one's dumped inputs.
            with open(self.path("in.json"), "w") as f:
                json.dump(dumped[sub["name"]], f)
            code, _, err = run("run", os.path.join(out, sub["file"]), "--inputs", self.path("in.json"),
                               "--save-outputs", self.path("out.json"))
            self.assertEqual(code, 0, err)
            produced = json.load(open(self.path("out.json")))
            following = dumped[plan["submodules"][index + 1]["name"]]
            for name, tensor in following.items():
                if name in produced:
                    diffs = [abs(a - b) for a, b in zip(produced[name]["data"], tensor["data"])]
                    self.assertLessEqual(max(diffs), 1e-5, name)

    def test_preview_lowers_and_runs_each_acc_subgraph_and_finds_the_culprit(self):
        full, weaker = self.profile("full"), self.profile("weaker", drop=("GlobalAveragePool",))
        code, out, err = run("split", CNN, "--profile", full, "--preview", "--backend", "aten-cpu", "--json")
        self.assertEqual(code, 0, err)
        trials = json.loads(out)["lower_and_run"]["submodules"]
        self.assertTrue(trials and all(t["outcome"] == "passed" for t in trials))
        code, out, err = run("split", CNN, "--profile", full, "--preview", "--backend", f"profile:{weaker}", "--json")
        self.assertEqual(code, 0, err)
        failing = [t for t in json.loads(out)["lower_and_run"]["submodules"] if t["outcome"] != "passed"]
        self.assertEqual(len(failing), 1)
        self.assertEqual(failing[0]["outcome"], "lowering_failed")
        self.assertEqual(failing[0]["culprit"]["op"], "GlobalAveragePool")
        code, out, err = run("split", CNN, "--profile", full, "--preview", "--backend", "aten-cpu-bf16",
                             "--rtol", "0", "--atol", "0", "--json")
        self.assertEqual(code, 0, err)
        self.assertTrue(any(t["outcome"] == "mismatch" and "culprit" in t
                            for t in json.loads(out)["lower_and_run"]["submodules"]))

    def test_minimize_finds_the_refused_node_in_every_mode(self):
        full, weaker = self.profile("full"), self.profile("weaker", drop=("GlobalAveragePool",))
        pool = [n.name for n in onnx.load(CNN).graph.node if n.op_type == "GlobalAveragePool"]
        for mode in ("sequential", "binary", "accumulate", "block"):
            with self.subTest(mode=mode):
                out = self.path(mode)
                code, stdout, err = run("minimize", CNN, "--profile", full, "--backend-b", f"profile:{weaker}",
                                        "--mode", mode, "-o", out, "--json")
                self.assertEqual(code, 0, err)
                report = json.loads(stdout)
                culprit = report["culprits"][0]
                self.assertEqual(culprit["outcome"], "lowering_failed")
                self.assertIn(pool[0], culprit["nodes"])
                if mode in ("sequential", "binary", "block"):
                    self.assertEqual(culprit["nodes"], pool)
                # The repro runs on the reference backend and fails on the tested one.
                repro, inputs = os.path.join(out, "repro.onnx"), os.path.join(out, "repro_inputs.json")
                onnx.checker.check_model(repro, full_check=True)
                code, _, err = run("run", repro, "--inputs", inputs)
                self.assertEqual(code, 0, err)
                code, _, err = run("run", repro, "--inputs", inputs, "--backend", f"profile:{weaker}")
                self.assertOneLineError(code, err, "refuses node")

    def test_minimize_finds_numeric_disagreement(self):
        code, stdout, err = run("minimize", CNN, "--profile", self.profile("full"), "--backend-b", "aten-cpu-bf16",
                                "--mode", "sequential", "--rtol", "1e-6", "--atol", "0", "--json")
        self.assertEqual(code, 0, err)
        report = json.loads(stdout)
        self.assertTrue(report["culprits"])
        self.assertTrue(all(c["outcome"] == "mismatch" and c["max_abs"] > 0 for c in report["culprits"]))
        # A loose tolerance lets bfloat16 through.
        code, stdout, err = run("minimize", CNN, "--profile", self.profile("full"), "--backend-b", "aten-cpu-bf16",
                                "--mode", "binary", "--rtol", "1", "--atol", "10", "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(stdout)["culprits"], [])

    def test_shapes_completes_dynamic_dims_from_a_run(self):
        model = self.path("dynamic.onnx")
        script = (
            "import torch\n"
            "torch.manual_seed(0)\n"
            "m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()\n"
            f"torch.onnx.export(m, (torch.randn(2, 8),), {model!r}, input_names=['x'], output_names=['y'],\n"
            "                  dynamic_axes={'x': {0: 'batch'}, 'y': {0: 'batch'}}, opset_version=17, dynamo=False)\n")
        subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
        code, out, err = run("inspect", model, "--json")
        self.assertEqual(code, 0, err)
        self.assertGreater(json.loads(out)["unknown_size_values"], 0)
        typed = self.path("typed.onnx")
        code, out, err = run("shapes", model, "--dim", "batch=5", "-o", typed, "--json")
        self.assertEqual(code, 0, err)
        self.assertGreater(json.loads(out)["completed"], 0)
        code, out, err = run("inspect", typed, "--json", "--check")
        self.assertEqual(code, 0, err)
        summary = json.loads(out)
        self.assertEqual(summary["unknown_size_values"], 0)
        self.assertEqual(summary["inputs"][0]["shape"], [5, 8])
        code, whole, _ = run("run", model, "--dim", "batch=5", "--seed", "2", "--json")
        code2, again, _ = run("run", typed, "--seed", "2", "--json")
        self.assertEqual((code, code2), (0, 0))
        self.assertEqual(json.loads(whole)["outputs"], json.loads(again)["outputs"])

    def two_input_model(self):
        """y = x * w + b over float32 [2, 3] inputs x, w and an int64 [3] input k (y2 = k * 2)."""
        nodes = [helper.make_node("Mul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"]),
                 helper.make_node("Add", ["k", "k"], ["y2"])]
        f = lambda n, t, d: helper.make_tensor_value_info(n, t, d)
        graph = helper.make_graph(nodes, "g", [f("x", TensorProto.FLOAT, [2, 3]), f("w", TensorProto.FLOAT, [2, 3]),
                                               f("b", TensorProto.FLOAT, [2, 3]), f("k", TensorProto.INT64, [3])],
                                  [f("y", TensorProto.FLOAT, [2, 3]), f("y2", TensorProto.INT64, [3])])
        path = self.path("fma.onnx")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
        return path

    def test_verify_passes_a_correct_cut_and_fails_planted_errors(self):
        """verify's rule (docs/runtime.md): |cut - original| <= atol + rtol * (the output's largest
        |original|). A correct cut passes; a submodule with a wrong op, a swapped operand or a lost
        transpose fails, each naming the worst element."""
        rng = np.random.default_rng(3)
        w = numpy_helper.from_array(rng.standard_normal((6, 6)).astype(np.float32), "w")
        nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Transpose", ["m"], ["t"], perm=[1, 0]),
                 helper.make_node("Sub", ["t", "z"], ["d"]), helper.make_node("Tanh", ["d"], ["h"]),
                 helper.make_node("Relu", ["h"], ["r"]), helper.make_node("Mul", ["r", "t"], ["y"])]
        graph = helper.make_graph(nodes, "planted", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [6, 6])
                                                     for n in ("x", "z")],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 6])], [w])
        model = self.path("planted.onnx")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
        profile = self.path("no_relu.json")
        with open(profile, "w") as f:
            json.dump({"name": "no-relu", "ops": ["MatMul", "Transpose", "Sub", "Tanh", "Mul"]}, f)
        cut = self.path("cut")
        run("split", model, "--profile", profile, "-o", cut, check=True)
        code, out, err = run("verify", model, cut, "--seed", 5, "--json")
        self.assertEqual(code, 0, err)
        report = json.loads(out)
        self.assertEqual((report["ok"], report["scale"]), (True, "output"))
        self.assertEqual(set(report["outputs"]["y"]), {"max_abs", "scale", "max_scaled", "max_rel", "past_elementwise",
                                                      "within_tolerance"})
        plan = json.load(open(os.path.join(cut, "plan.json")))
        first = os.path.join(cut, plan["submodules"][0]["file"])  # MatMul, Transpose, Sub, Tanh
        pristine = onnx.load(first)

        def planted(change):
            sub = onnx.ModelProto()
            sub.CopyFrom(pristine)
            change({n.op_type: n for n in sub.graph.node})
            onnx.save(sub, first)
            code, _, err = run("verify", model, cut, "--seed", 5)
            self.assertOneLineError(code, err, "output 'y' differs past tolerance: element [",
                                    "the output's largest |expected|")

        with self.subTest(planted="wrong op"):
            planted(lambda ops: setattr(ops["Sub"], "op_type", "Add"))
        with self.subTest(planted="swapped operand"):
            planted(lambda ops: ops["Sub"].input.reverse())
        with self.subTest(planted="lost transpose"):
            planted(lambda ops: ops["Transpose"].attribute[0].ints.__setitem__(slice(None), [0, 1]))
        onnx.save(pristine, first)
        code, _, err = run("verify", model, cut, "--seed", 5, "--elementwise")
        self.assertEqual(code, 0, err)

    def test_tensors_in_npz_npy_pb_and_folders(self):
        model = self.two_input_model()
        rng = np.random.default_rng(5)
        x, w, b = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3))
        k = np.array([1, -7, 2 ** 40], dtype=np.int64)
        want = {"y": x * w + b, "y2": k * 2}
        # Named arrays, compressed; positional arrays (arr_N bind to the inputs in order), stored.
        np.savez_compressed(self.path("named.npz"), k=k, b=b, x=x, w=np.asfortranarray(w))
        np.savez(self.path("positional.npz"), x, w, b, k)
        # ONNX's test-data layout: input_N.pb, unnamed tensors bound by position.
        os.makedirs(self.path("set"))
        for n, array in enumerate((x, w, b, k)):
            with open(self.path(f"set/input_{n}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(array).SerializeToString())
        for inputs in ("named.npz", "positional.npz", "set"):
            for saved in ("out.npz", "out.json", "outdir/"):
                with self.subTest(inputs=inputs, saved=saved):
                    code, _, err = run("run", model, "--inputs", self.path(inputs), "--save-outputs", self.path(saved))
                    self.assertEqual(code, 0, err)
                    if saved == "out.npz":
                        got = dict(np.load(self.path(saved)))
                    elif saved == "out.json":
                        got = {n: np.array(t["data"]).reshape(t["dims"]) for n, t in json.load(open(self.path(saved))).items()}
                    else:
                        got = {}
                        for n, name in enumerate(("y", "y2")):
                            tensor = onnx.load_tensor(self.path(f"outdir/output_{n}.pb"))
                            self.assertEqual(tensor.name, name)
                            got[name] = numpy_helper.to_array(tensor)
                    self.assertEqual(sorted(got), ["y", "y2"])
                    np.testing.assert_array_equal(got["y"], want["y"])
                    np.testing.assert_array_equal(got["y2"], want["y2"])
        # One tensor per .npy / .pb file; a saved .npz is byte-identical run to run.
        relu = self.path("relu.onnx")
        node = helper.make_node("Relu", ["x"], ["r"])
        onnx.save(helper.make_model(helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                                                      [helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 3])]),
                                    opset_imports=[helper.make_opsetid("", 17)]), relu)
        np.save(self.path("x.npy"), np.asfortranarray(x))
        for saved in ("r.npy", "r.pb"):
            code, _, err = run("run", relu, "--inputs", self.path("x.npy"), "--save-outputs", self.path(saved))
            self.assertEqual(code, 0, err)
        np.testing.assert_array_equal(np.load(self.path("r.npy")), np.maximum(x, 0))
        np.testing.assert_array_equal(numpy_helper.to_array(onnx.load_tensor(self.path("r.pb"))), np.maximum(x, 0))
        run("run", model, "--inputs", self.path("named.npz"), "--save-outputs", self.path("again.npz"), check=True)
        self.assertEqual(open(self.path("out.npz"), "rb").read(), open(self.path("again.npz"), "rb").read())
        self.assertEqual(zipfile.ZipFile(self.path("again.npz")).testzip(), None)

    def test_sequence_inputs_and_outputs_as_pb(self):
        case = os.path.join(ONNX_TESTS, "node", "test_sequence_insert_at_back")
        model, data = os.path.join(case, "model.onnx"), os.path.join(case, "test_data_set_0")
        code, out, err = run("run", model, "--inputs", data, "--save-outputs", self.path("out") + "/")
        self.assertEqual(code, 0, err)
        self.assertIn("sequence of 4", out)
        got, want = onnx.SequenceProto(), onnx.SequenceProto()
        with open(self.path("out/output_0.pb"), "rb") as f:
            got.ParseFromString(f.read())
        with open(os.path.join(data, "output_0.pb"), "rb") as f:
            want.ParseFromString(f.read())
        self.assertEqual(len(got.tensor_values), len(want.tensor_values))
        for a, b in zip(got.tensor_values, want.tensor_values):
            np.testing.assert_array_equal(numpy_helper.to_array(a), numpy_helper.to_array(b))
        code, _, err = run("run", model, "--inputs", data, "--save-outputs", self.path("out.json"))
        self.assertOneLineError(code, err, "'output_sequence' is a sequence", "save it as .pb or to a folder")

    def test_string_tensors_cast_and_normalize(self):
        graph = helper.make_graph(
            [helper.make_node("StringNormalizer", ["words"], ["normalized"], case_change_action="LOWER",
                              stopwords=["the"]),
             helper.make_node("Cast", ["z"], ["text"], to=TensorProto.STRING),
             helper.make_node("Cast", ["text"], ["back"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["numbers"], ["parsed"], to=TensorProto.INT64)],
            "strings",
            [helper.make_tensor_value_info("words", TensorProto.STRING, [5]),
             helper.make_tensor_value_info("z", TensorProto.FLOAT, [6]),
             helper.make_tensor_value_info("numbers", TensorProto.STRING, [3])],
            [helper.make_tensor_value_info(n, t, None) for n, t in
             [("normalized", TensorProto.STRING), ("text", TensorProto.STRING), ("back", TensorProto.FLOAT),
              ("parsed", TensorProto.INT64)]])
        model = self.path("strings.onnx")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
        z = np.array([0.1, 123456.0, 1e-5, -2.5e20, 0.039187793, 0.0], np.float32)
        inputs = {"words": {"dtype": "string", "dims": [5], "data": ["The", "ÉTÉ", "Straße", "THE", "Cat"]},
                  "z": {"dtype": "float32", "dims": [6], "data": [float(v) for v in z]},
                  "numbers": {"dtype": "string", "dims": [3], "data": ["42", "+7", "-12"]}}
        with open(self.path("in.json"), "w") as f:
            json.dump(inputs, f)
        code, out, err = run("run", model, "--inputs", self.path("in.json"), "--save-outputs", self.path("out.json"))
        self.assertEqual(code, 0, err)
        self.assertIn('normalized: string[3] "été", "straße", "cat"', out)
        with open(self.path("out.json")) as f:
            got = json.load(f)
        self.assertEqual(got["normalized"]["data"], ["été", "straße", "cat"])
        self.assertEqual(got["text"]["data"], [str(v) for v in z])  # numpy's spelling, ONNX's reference
        np.testing.assert_array_equal(np.array(got["back"]["data"], np.float32), z)
        self.assertEqual(got["parsed"]["data"], [42, 7, -12])
        # The same through .pb files, which onnx reads back as strings.
        code, _, err = run("run", model, "--inputs", self.path("in.json"), "--save-outputs", self.path("pb") + "/")
        self.assertEqual(code, 0, err)
        with open(self.path("pb/output_0.pb"), "rb") as f:
            proto = onnx.TensorProto.FromString(f.read())
        self.assertEqual(list(numpy_helper.to_array(proto)), ["été", "straße", "cat"])
        code, _, err = run("run", model, "--inputs", self.path("in.json"), "--save-outputs", self.path("o.npz"))
        self.assertOneLineError(code, err, "'normalized' holds strings", "save it as .json or .pb")
        code, _, err = run("run", model)
        self.assertOneLineError(code, err, "input 'words' holds strings", "--inputs")
        inputs["numbers"]["data"][1] = "seven"
        with open(self.path("bad.json"), "w") as f:
            json.dump(inputs, f)
        code, _, err = run("run", model, "--inputs", self.path("bad.json"))
        self.assertOneLineError(code, err, "\"seven\" is not a number")

    def test_batched_scan8_with_sequence_lengths_and_reverse(self):
        vec = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("sum_in", "next", "sum_out", "scan_out")]
        body = helper.make_graph([helper.make_node("Add", ["sum_in", "next"], ["sum_out"]),
                                  helper.make_node("Identity", ["sum_out"], ["scan_out"])],
                                 "body", vec[:2], vec[2:])
        graph = helper.make_graph(
            [helper.make_node("Scan", ["lens", "initial", "x"], ["y", "z"], body=body, num_scan_inputs=1,
                              directions=[1])],
            "scan8",
            [helper.make_tensor_value_info("lens", TensorProto.INT64, [2]),
             helper.make_tensor_value_info("initial", TensorProto.FLOAT, [2, 2]),
             helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2]),
             helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3, 2])])
        model = self.path("scan8.onnx")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)]), model)
        lens = np.array([3, 2], np.int64)
        initial = np.array([[0, 1], [10, 20]], np.float32)
        x = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
        y, z = initial.copy(), np.zeros((2, 3, 2), np.float32)
        for b in range(2):  # Scan-8: per batch entry, lens[b] steps read backwards
            for t in range(lens[b]):
                y[b] = y[b] + x[b, lens[b] - 1 - t]
                z[b, t] = y[b]
        np.savez(self.path("in.npz"), lens=lens, initial=initial, x=x)
        code, out, err = run("run", model, "--inputs", self.path("in.npz"), "--save-outputs", self.path("out.npz"))
        self.assertEqual(code, 0, err)
        got = np.load(self.path("out.npz"))
        np.testing.assert_array_equal(got["y"], y)
        np.testing.assert_array_equal(got["z"], z)
        code, out, err = run("inspect", model)
        self.assertIn("converted from opset 8", out)

    def test_random_ops_follow_their_distributions_and_repeat_per_seed(self):
        n = 20000
        nodes = [
            helper.make_node("RandomUniformLike", ["x"], ["uniform"], low=-2.0, high=4.0, seed=3.0),
            helper.make_node("RandomNormal", [], ["normal"], shape=[n], mean=1.5, scale=0.5),
            helper.make_node("Bernoulli", ["p"], ["coin"], seed=5.0),
            helper.make_node("Multinomial", ["logits"], ["draws"], sample_size=n, seed=7.0),
        ]
        outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ("uniform", "normal", "coin")]
        outputs.append(helper.make_tensor_value_info("draws", TensorProto.INT32, None))
        graph = helper.make_graph(nodes, "random", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n]),
                                                    helper.make_tensor_value_info("p", TensorProto.FLOAT, [n]),
                                                    helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 3])],
                                  outputs)
        model = self.path("random.onnx")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
        np.savez(self.path("in.npz"), x=np.zeros(n, np.float32), p=np.full(n, 0.3, np.float32),
                 logits=np.log(np.array([[0.2, 0.3, 0.5]], np.float32)))
        for out in ("a.npz", "b.npz"):
            code, _, err = run("run", model, "--inputs", self.path("in.npz"), "--save-outputs", self.path(out))
            self.assertEqual(code, 0, err)
        a, b = np.load(self.path("a.npz")), np.load(self.path("b.npz"))
        for name in ("uniform", "normal", "coin", "draws"):
            np.testing.assert_array_equal(a[name], b[name])  # the same draws every run
        uniform, normal, coin, draws = a["uniform"], a["normal"], a["coin"], a["draws"]
        self.assertTrue(((uniform >= -2) & (uniform < 4)).all())
        self.assertAlmostEqual(uniform.mean(), 1.0, delta=0.05)      # (low + high) / 2; std 1.73 / sqrt(n) = 0.012
        self.assertAlmostEqual(uniform.var(), 36 / 12, delta=0.1)
        self.assertAlmostEqual(normal.mean(), 1.5, delta=0.02)       # std 0.5 / sqrt(n) = 0.0035
        self.assertAlmostEqual(normal.std(), 0.5, delta=0.02)
        self.assertEqual(set(np.unique(coin)), {0.0, 1.0})
        self.assertAlmostEqual(coin.mean(), 0.3, delta=0.02)         # std 0.0032
        self.assertEqual(draws.shape, (1, n))
        frequencies = np.bincount(draws.ravel(), minlength=3) / n
        np.testing.assert_allclose(frequencies, [0.2, 0.3, 0.5], atol=0.02)

    def test_bad_tensor_files(self):
        model = self.two_input_model()
        x = np.ones((2, 3), np.float32)
        np.savez(self.path("ok.npz"), x=x, w=x, b=x, k=np.zeros(3, np.int64))
        data = open(self.path("ok.npz"), "rb").read()
        cases = {
            "truncated.npz": data[: len(data) // 2],
            "flipped.npz": data[:60] + bytes([data[60] ^ 0xFF]) + data[61:],
            "empty.npy": b"",
            "big_endian.npy": b"\x93NUMPY\x01\x00" + (b"{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }" + b" " * 3 + b"\n").ljust(70, b" ")[:70] + bytes(24),
            "short.npy": None,
            "huge.pb": None,
        }
        huge = TensorProto(name="x", data_type=TensorProto.FLOAT, dims=[10 ** 6, 10 ** 6])  # no data for 10^12 floats
        cases["huge.pb"] = huge.SerializeToString()
        np.save(self.path("short.npy"), x)
        cases["short.npy"] = open(self.path("short.npy"), "rb").read()[:-4]
        for name, content in cases.items():
            with self.subTest(file=name):
                with open(self.path(name), "wb") as f:
                    f.write(content)
                code, _, err = run("run", model, "--inputs", self.path(name))
                self.assertOneLineError(code, err, name)
        # A folder's links are not followed: an input never comes from outside the folder given.
        os.makedirs(self.path("linked"))
        os.symlink(self.path("short.npy"), self.path("linked/x.npy"))
        code, _, err = run("run", model, "--inputs", self.path("linked"))
        self.assertOneLineError(code, err, "no input_<N>.pb or NAME.npy files")
        code, _, err = run("run", model, "--inputs", self.path("ok.npz"), "--save-outputs", self.path("two.npy"))
        self.assertOneLineError(code, err, "holds one tensor, there are 2")

    def test_bad_requests(self):
        code, _, err = run("minimize", CNN, "--profile", self.profile("full"), "--backend-b", "aten-cpu", "--mode", "magic")
        self.assertOneLineError(code, err, "magic", exit_code=2)
        code, _, err = run("split", CNN, "--profile", self.profile("full"), "--dump-inputs")
        self.assertOneLineError(code, err, "--dump-inputs requires --output", exit_code=2)
        code, _, err = run("run", CNN, "--repeat", "0")
        self.assertOneLineError(code, err, "--repeat", exit_code=2)
        code, _, err = run("run", os.path.join(EXAMPLES, "cnn.fx.json"))
        self.assertOneLineError(code, err, "FX")


if __name__ == "__main__":
    main()
