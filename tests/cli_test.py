"""The cleave CLI end to end: help, usage errors, bad input, determinism, atomic output."""
import filecmp
import json
import os
import shutil
import subprocess

from testlib import CLEAVE, EXAMPLES, ONNX_TESTS, TempDirTest, main, run


class Help(TempDirTest):
    def test_top_level_help_lists_commands(self):
        code, out, _ = run("--help")
        self.assertEqual(code, 0)
        for command in ("inspect", "gen", "convert", "support", "split", "partition", "run", "verify", "shapes",
                        "minimize", "pipeline", "schedule"):
            self.assertIn(command, out)

    def test_each_command_has_help(self):
        for command in ("inspect", "gen", "convert", "support", "split", "partition", "run", "verify", "shapes",
                        "minimize", "pipeline", "schedule"):
            code, out, _ = run(command, "--help")
            self.assertEqual(code, 0, command)
            self.assertIn("--", out)

    def test_unknown_command_is_a_usage_error(self):
        code, _, err = run("frobnicate")
        self.assertEqual(code, 2)
        self.assertIn("unknown command 'frobnicate'", err)

    def test_missing_argument_is_a_usage_error(self):
        code, _, err = run("inspect")
        self.assertEqual(code, 2)
        self.assertIn("MODEL", err)


class BadInput(TempDirTest):
    def test_missing_file(self):
        code, _, err = run("inspect", self.path("nope.onnx"))
        self.assertOneLineError(code, err, "nope.onnx")

    def test_truncated_protobuf(self):
        with open(os.path.join(EXAMPLES, "cnn.onnx"), "rb") as f:
            data = f.read()
        with open(self.path("cut.onnx"), "wb") as f:
            f.write(data[: len(data) // 3])
        code, _, err = run("inspect", self.path("cut.onnx"))
        self.assertOneLineError(code, err, "cut.onnx", "not a valid ONNX model")

    def test_random_bytes(self):
        with open(self.path("noise.onnx"), "wb") as f:
            f.write(bytes(range(256)) * 10)
        code, _, err = run("inspect", self.path("noise.onnx"))
        self.assertOneLineError(code, err, "noise.onnx")

    def test_empty_file(self):
        open(self.path("empty.onnx"), "wb").close()
        code, _, err = run("inspect", self.path("empty.onnx"))
        self.assertOneLineError(code, err, "empty")

    def test_directory_instead_of_model(self):
        code, _, err = run("inspect", self.tmp)
        self.assertOneLineError(code, err, "is a directory")

    def test_fx_json_of_another_schema_version(self):
        with open(os.path.join(EXAMPLES, "cnn.fx.json")) as f:
            doc = json.load(f)
        doc["version"] = 99
        with open(self.path("v99.json"), "w") as f:
            json.dump(doc, f)
        code, _, err = run("inspect", self.path("v99.json"))
        self.assertOneLineError(code, err, "version 99")

    def test_fx_json_with_a_cycle(self):
        with open(os.path.join(EXAMPLES, "cnn.fx.json")) as f:
            doc = json.load(f)
        nodes = {n["name"]: n for n in doc["nodes"]}
        # stem reads relu, which reads stem.
        nodes["stem"]["inputs"] = ["x", "relu"]
        nodes["relu"]["users"].append("stem")
        with open(self.path("cycle.json"), "w") as f:
            json.dump(doc, f)
        code, _, err = run("inspect", self.path("cycle.json"))
        self.assertOneLineError(code, err, "cycle", "'stem'")

    def test_unknown_family(self):
        code, _, err = run("gen", "pyramid", "3", "-o", self.path("p.onnx"))
        self.assertOneLineError(code, err, "unknown family 'pyramid'")
        self.assertEqual(os.listdir(self.tmp), [])

    def test_unwritable_output_leaves_nothing(self):
        code, _, err = run("gen", "chain", "3", "-o", self.path("missing_dir/c.onnx"))
        self.assertOneLineError(code, err, "c.onnx")
        self.assertEqual(os.listdir(self.tmp), [])

    def test_convert_of_an_fx_graph_is_refused(self):
        code, _, err = run("convert", os.path.join(EXAMPLES, "cnn.fx.json"), "-o", self.path("x.onnx"))
        self.assertOneLineError(code, err, "FX graph cannot be written as ONNX")
        self.assertEqual(os.listdir(self.tmp), [])


class Determinism(TempDirTest):
    def test_gen_is_byte_for_byte_repeatable(self):
        for family in ("chain", "wide", "linear_chain", "diamonds", "transformer"):
            run("gen", family, "4", "-o", self.path("a.onnx"), check=True)
            run("gen", family, "4", "-o", self.path("b.onnx"), check=True)
            self.assertTrue(filecmp.cmp(self.path("a.onnx"), self.path("b.onnx"), shallow=False), family)

    def test_inspect_output_is_repeatable(self):
        model = os.path.join(EXAMPLES, "dlrm.onnx")
        first = run("inspect", model, "--json", "--nodes", check=True)[1]
        second = run("inspect", model, "--json", "--nodes", check=True)[1]
        self.assertEqual(first, second)

    def test_convert_is_a_fixed_point(self):
        run("convert", os.path.join(EXAMPLES, "transformer.onnx"), "-o", self.path("once.onnx"), check=True)
        run("convert", self.path("once.onnx"), "-o", self.path("twice.onnx"), check=True)
        self.assertTrue(filecmp.cmp(self.path("once.onnx"), self.path("twice.onnx"), shallow=False))


class Inspect(TempDirTest):
    def test_json_summary_of_a_generated_chain(self):
        run("gen", "chain", "10", "-o", self.path("c.onnx"), check=True)
        code, out, _ = run("inspect", self.path("c.onnx"), "--json")
        self.assertEqual(code, 0)
        info = json.loads(out)
        self.assertEqual(info["nodes"], 52)
        self.assertEqual(info["callable_nodes"], 40)
        self.assertEqual(info["parameter_bytes"], 10 * 16 * 16 * 4)
        self.assertEqual(info["activation_bytes"], 40 * 4 * 16 * 4)
        self.assertEqual(info["depth"], 40)
        self.assertEqual(info["op_histogram"], {"Add": 10, "MatMul": 10, "Relu": 10, "Tanh": 8, "Sigmoid": 2})
        self.assertEqual(info["inputs"][0]["shape"], [4, 16])
        self.assertEqual(info["outputs"][0]["name"], "add_9")

    def test_wide_graph_reports_its_widest_level(self):
        run("gen", "wide", "12", "-o", self.path("w.onnx"), check=True)
        info = json.loads(run("inspect", self.path("w.onnx"), "--json", check=True)[1])
        self.assertEqual(info["widest_level"]["nodes"], 12)
        self.assertEqual(info["depth"], 5)

    def test_text_report_of_every_example(self):
        for name in sorted(os.listdir(EXAMPLES)):
            if name.endswith((".onnx", ".json")):
                code, out, err = run("inspect", os.path.join(EXAMPLES, name), "--check")
                self.assertEqual(code, 0, f"{name}: {err}")
                self.assertIn("parameters:", out)
                self.assertIn("depth:", out)

    def test_external_data_travels_with_its_model(self):
        run("gen", "linear_chain", "6", "-o", self.path("m.onnx"), "--external-data", "1024", check=True)
        self.assertTrue(os.path.exists(self.path("m.onnx.data")))
        os.mkdir(self.path("elsewhere"))
        for name in ("m.onnx", "m.onnx.data"):  # the data file is found beside the model
            shutil.move(self.path(name), self.path(f"elsewhere/{name}"))
        run("convert", self.path("elsewhere/m.onnx"), "-o", self.path("inline.onnx"), "--check", check=True)
        self.assertGreater(os.path.getsize(self.path("inline.onnx")), 6 * 32 * 32 * 4)

    def test_missing_external_data_is_named(self):
        run("gen", "linear_chain", "2", "-o", self.path("m.onnx"), "--external-data", "1024", check=True)
        os.remove(self.path("m.onnx.data"))
        code, _, err = run("convert", self.path("m.onnx"), "-o", self.path("inline.onnx"))
        self.assertOneLineError(code, err, "m.onnx.data")
        self.assertFalse(os.path.exists(self.path("inline.onnx")))

class ConcurrentOutput(TempDirTest):
    def test_concurrent_writers_to_one_output_directory(self):
        """Four splits race to one -o DIR: each one either wins whole (exit 0) or says the
        directory changed under it (exit 1); the survivor is complete and nothing is left over."""
        import subprocess
        from testlib import CLEAVE
        out = self.path("out")
        args = [CLEAVE, "split", os.path.join(EXAMPLES, "cnn.onnx"), "--profile",
                os.path.join(EXAMPLES, "profiles", "gpu.json"), "-o", out]
        procs = [subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(4)]
        results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
        self.assertTrue(any(code == 0 for code, _ in results), results)
        for code, err in results:
            self.assertIn(code, (0, 1), err)
            if code == 1:
                self.assertIn("changed while this run was writing it", err)
        with open(os.path.join(out, ".cleave-output")) as f:
            listed = sorted(f.read().splitlines()[1:])
        self.assertEqual(listed, sorted(n for n in os.listdir(out) if n != ".cleave-output"))
        with open(os.path.join(out, "plan.json")) as f:
            json.load(f)
        self.assertEqual(os.listdir(self.tmp), ["out"])  # no staging directory left behind


class OpsetsAndKernels(TempDirTest):
    DATA = ONNX_TESTS

    def test_old_opsets_are_converted_and_said_so(self):
        model = os.path.join(self.DATA, "pytorch-operator", "test_operator_conv", "model.onnx")
        code, out, err = run("inspect", model, "--json")
        self.assertEqual(code, 0, err)
        summary = json.loads(out)
        self.assertEqual(summary["opsets"]["ai.onnx"], 11)
        self.assertEqual(summary["converted_from_opset"], 6)
        code, out, err = run("inspect", model)
        self.assertIn("(converted from opset 6)", out)

    def test_inspect_lists_ops_the_runtime_lacks(self):
        code, out, err = run("inspect", os.path.join(self.DATA, "simple", "test_gradient_of_add", "model.onnx"), "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["runtime_missing_ops"], ["ai.onnx.preview.training::Gradient"])
        code, out, err = run("inspect", os.path.join(EXAMPLES, "cnn.onnx"))
        self.assertIn("runtime: a kernel for every op", out)


class RuntimeLibrary(TempDirTest):
    """The runtime is libcleave_runtime.so beside the executable, loaded only by the commands that
    run a model (cli/runtime_library.h)."""

    def loaded_files(self, executable, *args):
        """(exit code, the shared objects the dynamic loader opened) for `executable ARGS`."""
        env = dict(os.environ, LD_DEBUG="files", LD_DEBUG_OUTPUT=self.path("ld"))
        proc = subprocess.run([executable, *args], capture_output=True, text=True, env=env, timeout=300)
        opened = set()
        for name in os.listdir(self.tmp):
            if name.startswith("ld."):
                with open(self.path(name)) as f:
                    opened |= {line.split("file=")[1].split()[0] for line in f if "file=" in line}
        return proc.returncode, opened

    def test_planning_commands_never_load_libtorch(self):
        model = os.path.join(EXAMPLES, "transformer.onnx")
        code, opened = self.loaded_files(CLEAVE, "split", model, "--profile",
                                         os.path.join(EXAMPLES, "profiles", "gpu.json"), "--preview")
        self.assertEqual(code, 0)
        self.assertFalse([f for f in opened if "torch" in f or "cleave_runtime" in f], sorted(opened))
        code, opened = self.loaded_files(CLEAVE, "run", model, "--repeat", "1")
        self.assertEqual(code, 0)
        self.assertTrue([f for f in opened if "libcleave_runtime.so" in f], sorted(opened))
        self.assertTrue([f for f in opened if "libtorch_cpu" in f], sorted(opened))

    def test_without_the_library_running_commands_fail_in_one_line_and_others_run(self):
        alone = self.path("cleave")
        shutil.copy(CLEAVE, alone)
        model = os.path.join(EXAMPLES, "transformer.onnx")
        proc = subprocess.run([alone, "run", model], capture_output=True, text=True, timeout=300)
        self.assertOneLineError(proc.returncode, proc.stderr, "cleave run: error: cannot load the runtime library",
                                "libcleave_runtime.so")
        proc = subprocess.run([alone, "split", model, "--profile", os.path.join(EXAMPLES, "profiles", "gpu.json"),
                               "--preview", "--backend", "aten-cpu"], capture_output=True, text=True, timeout=300)
        self.assertOneLineError(proc.returncode, proc.stderr, "cleave split: error: cannot load the runtime library")
        proc = subprocess.run([alone, "split", model, "--profile", os.path.join(EXAMPLES, "profiles", "gpu.json"),
                               "--preview"], capture_output=True, text=True, timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("subgraphs:", proc.stdout)


if __name__ == "__main__":
    main()
