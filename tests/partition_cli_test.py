"""`cleave partition` end to end: every mode's outputs, heterogeneous devices, the memory SVG,
determinism, and bad input (one-line errors, no output directory)."""
import json
import os
import xml.etree.ElementTree as ElementTree

import onnx

from testlib import EXAMPLES, TempDirTest, main, run

MODES = ("size_based", "cost_aware", "kl_based", "optimal")


class Partition(TempDirTest):
    def setUp(self):
        super().setUp()
        self.model = self.path("t.onnx")
        run("gen", "transformer", "2", "-o", self.model, check=True)
        self.devices = self.path("devices.json")
        with open(self.devices, "w") as f:
            json.dump({"devices": [{"name": f"d{i}", "logical_id": i, "available_mem_bytes": 400000}
                                   for i in range(4)], "transfer_rate_bytes_per_sec": 1e9}, f)

    def partition(self, mode, out, *extra):
        args = ["partition", self.model, "--devices", self.devices, "--mode", mode, "-o", out, "--json", "--estimate",
                *extra]
        code, stdout, err = run(*args)
        self.assertEqual(code, 0, err)
        return json.loads(stdout)

    def test_every_mode_writes_the_dag_reports_and_an_svg(self):
        for mode in MODES:
            with self.subTest(mode=mode):
                out = self.path(mode)
                summary = self.partition(mode, out, "--memory-svg")
                self.assertGreater(len(summary["partitions"]), 1)
                self.assertIn("critical_path", summary)
                plan = json.load(open(os.path.join(out, "plan.json")))
                self.assertEqual(len(plan["submodules"]), len(summary["partitions"]))
                report = json.load(open(os.path.join(out, "report.json")))
                used = {d["logical_id"]: d["used_mem_bytes"] for d in report["devices"]}
                for p in report["partitions"]:
                    self.assertLessEqual(p["size_bytes"], 400000)
                    for device in p["logical_device_ids"]:
                        self.assertGreaterEqual(used[device], p["size_bytes"])
                svg = ElementTree.parse(os.path.join(out, "memory.svg")).getroot()
                self.assertTrue(svg.tag.endswith("svg"))
                titles = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}title")]
                self.assertEqual(len(titles), sum(len(p["logical_device_ids"]) for p in report["partitions"]))
                for name in os.listdir(out):
                    if name.endswith(".onnx"):
                        onnx.checker.check_model(os.path.join(out, name), full_check=True)

    def write_backend_devices(self, second_backend):
        devices = self.path(f"devices_{second_backend}.json")
        with open(devices, "w") as f:
            json.dump({"devices": [
                {"name": "fp32", "logical_id": 0, "available_mem_bytes": 400000, "backend": "aten-cpu"},
                {"name": "low", "logical_id": 1, "available_mem_bytes": 400000, "backend": second_backend}]}, f)
        return devices

    def test_partitions_run_on_their_devices_backends(self):
        # Two CPU "devices" with different backends: `cleave run` lowers each partition on its
        # device's backend, named in plan.json, whatever --backend says.
        out = self.path("on_backends")
        code, _, err = run("partition", self.model, "--devices", self.write_backend_devices("aten-cpu-bf16"),
                           "--mode", "size_based", "-o", out)
        self.assertEqual(code, 0, err)
        plan = json.load(open(os.path.join(out, "plan.json")))
        self.assertEqual(plan["device_backends"], {"0": "aten-cpu", "1": "aten-cpu-bf16"})
        expected = {sub["name"]: ("aten-cpu", "aten-cpu-bf16")[sub["devices"][0]] for sub in plan["submodules"]}
        self.assertEqual(set(expected.values()), {"aten-cpu", "aten-cpu-bf16"}, plan["submodules"])
        code, stdout, err = run("run", out, "--json", "--backend", "aten-cpu")
        self.assertEqual(code, 0, err)
        steps = json.loads(stdout)["timing"]["steps"]
        self.assertEqual({step["name"]: step["backend"] for step in steps}, expected)
        # The bf16 partition computes in bfloat16: close to the whole model, not equal to it.
        code, stdout, err = run("verify", self.model, out, "--json")
        self.assertEqual(code, 1, err)
        code, _, err = run("verify", self.model, out, "--json", "--rtol", "0.1", "--atol", "0.1")
        self.assertEqual(code, 0, err)

    def test_an_unknown_device_backend_is_one_line_naming_the_device(self):
        out = self.path("unknown_backend")
        code, _, err = run("partition", self.model, "--devices", self.write_backend_devices("tpu-9"),
                           "--mode", "size_based", "-o", out)
        self.assertEqual(code, 0, err)
        code, _, err = run("run", out)
        self.assertOneLineError(code, err, "runs on device 1, whose backend fails")
        self.assertIn("tpu-9", err)

    def test_output_is_deterministic(self):
        for mode in ("cost_aware", "kl_based", "optimal"):
            with self.subTest(mode=mode):
                self.partition(mode, self.path(f"{mode}_a"))
                self.partition(mode, self.path(f"{mode}_b"))
                for name in ("plan.json", "report.json", "report.txt"):
                    with open(self.path(f"{mode}_a/{name}"), "rb") as a, open(self.path(f"{mode}_b/{name}"), "rb") as b:
                        self.assertEqual(a.read(), b.read(), name)

    def test_bottleneck_objective_balances_better_than_critical_path(self):
        sums = {}
        for objective in ("critical_path", "bottleneck"):
            summary = self.partition("optimal", self.path(objective), "--objective", objective)
            sums[objective] = max(p["latency_sec"]["overall"] for p in summary["partitions"])
        self.assertLessEqual(sums["bottleneck"], sums["critical_path"])

    def test_heterogeneous_devices_run_only_what_their_profiles_allow(self):
        with open(self.path("matmul_only.json"), "w") as f:
            json.dump({"ops": ["MatMul", "Add"]}, f)
        with open(self.devices, "w") as f:
            json.dump({"devices": [{"logical_id": 0, "available_mem_bytes": 400000, "profile": "matmul_only.json"},
                                   {"logical_id": 1, "available_mem_bytes": 400000},
                                   {"logical_id": 2, "available_mem_bytes": 400000}],
                       "transfer_rate_bytes_per_sec": [[0, 1e9, 1e9], [1e9, 0, 1e9], [1e9, 1e9, 0]]}, f)
        op_type = {n.name: n.op_type for n in onnx.load(self.model).graph.node}
        for mode in MODES:
            with self.subTest(mode=mode):
                summary = self.partition(mode, self.path(f"het_{mode}"))
                for p in summary["partitions"]:
                    if 0 in p["logical_device_ids"]:
                        self.assertTrue(all(op_type[n] in ("MatMul", "Add") for n in p["nodes"]), p["nodes"])


class BadInput(TempDirTest):
    def setUp(self):
        super().setUp()
        self.model = os.path.join(EXAMPLES, "cnn.onnx")

    def devices(self, content):
        path = self.path("devices.json")
        with open(path, "w") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))
        return path

    def test_cost_modes_need_latencies(self):
        devices = self.devices({"devices": [{"logical_id": 0, "available_mem_bytes": 1000}]})
        code, _, err = run("partition", self.model, "--devices", devices, "--mode", "cost_aware", "-o", self.path("o"))
        self.assertOneLineError(code, err, "--latency FILE or --estimate", exit_code=2)
        self.assertFalse(os.path.exists(self.path("o")))

    def test_unknown_mode_and_objective(self):
        devices = self.devices({"devices": [{"logical_id": 0, "available_mem_bytes": 1000}]})
        code, _, err = run("partition", self.model, "--devices", devices, "--mode", "best")
        self.assertOneLineError(code, err, "unknown mode 'best'", exit_code=2)
        code, _, err = run("partition", self.model, "--devices", devices, "--mode", "optimal", "--estimate",
                           "--objective", "fastest")
        self.assertOneLineError(code, err, "fastest", exit_code=2)

    def test_bad_device_files(self):
        cases = [({"devices": []}, "no devices"),
                 ({"devices": [{"logical_id": 0, "available_mem_bytes": 10}, {"logical_id": 0, "available_mem_bytes": 10}]},
                  "repeats logical id 0"),
                 ({"devices": [{"logical_id": 0, "available_mem_bytes": -5}]}, "available_mem_bytes: expected an integer in [1, "),
                 ({"devices": [{"logical_id": 0, "available_mem_bytes": 10}], "transfer_rate_bytes_per_sec": [[1, 2]]},
                  "needs 1 numbers"),
                 ({"devices": [{"logical_id": 0, "available_mem_bytes": 10, "profile": "missing.json"}]}, "missing.json"),
                 ({"devices": [{"logical_id": 0, "available_mem_bytes": 10, "backend": 5}]},
                  "devices[0].backend: expected a backend name"),
                 ("{not json", "invalid JSON")]
        for content, message in cases:
            with self.subTest(message=message):
                code, _, err = run("partition", self.model, "--devices", self.devices(content), "--mode", "kl_based",
                                   "--estimate", "-o", self.path("o"))
                self.assertOneLineError(code, err, message)
                self.assertFalse(os.path.exists(self.path("o")))

    def test_a_model_that_cannot_fit_says_by_how_much(self):
        devices = self.devices({"devices": [{"logical_id": i, "available_mem_bytes": 1000} for i in range(2)]})
        for mode in MODES:
            with self.subTest(mode=mode):
                code, _, err = run("partition", self.model, "--devices", devices, "--mode", mode, "--estimate",
                                   "-o", self.path("o"))
                self.assertOneLineError(code, err, "short")
                self.assertFalse(os.path.exists(self.path("o")))


if __name__ == "__main__":
    main()
