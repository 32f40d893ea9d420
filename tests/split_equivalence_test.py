"""Cut models compute what the original computes, checked by an independent runtime.

For the example models (and generated ones) and several profiles (the bundled GPU- and NPU-like
ones, and seeded random halves of each model's op types, which cut in many places), `cleave split`
writes submodels; ONNX Runtime (PyPI onnxruntime, tests/oracle/onnxruntime_oracle.py) runs the original
and the submodels in plan order on the same inputs, and the outputs must agree within 1e-4
relative / 1e-5 absolute error.
"""
import json
import os
import random
import subprocess

from testlib import EXAMPLES, ORACLE, SOURCE_DIR, TempDirTest, main, run



def tensor(dtype, dims, data):
    return {"dtype": dtype, "dims": dims, "data": data}


def random_floats(rng, dims):
    count = 1
    for d in dims:
        count *= d
    return tensor("float32", dims, [rng.gauss(0.0, 1.0) for _ in range(count)])


def example_inputs(model, rng):
    if model == "dlrm":  # 3 EmbeddingBag tables, 4 bags of 3 ids each
        return {"dense": random_floats(rng, [4, 13]),
                "indices": tensor("int64", [3, 12], [rng.randrange(200) for _ in range(36)]),
                "offsets": tensor("int64", [3, 4], [0, 3, 6, 9] * 3)}
    return None


class Equivalence(TempDirTest):
    def inputs_for(self, model_path, name, rng):
        fixed = example_inputs(name, rng)
        if fixed:
            return fixed
        info = json.loads(run("inspect", model_path, "--json", check=True)[1])
        return {i["name"]: random_floats(rng, i["shape"]) for i in info["inputs"]}

    def profiles_for(self, model_path, seeds):
        info = json.loads(run("inspect", model_path, "--json", check=True)[1])
        ops = sorted(info["op_histogram"])
        profiles = [os.path.join(EXAMPLES, "profiles", "gpu.json"), os.path.join(EXAMPLES, "profiles", "npu.json")]
        for seed in seeds:
            rng = random.Random(seed)
            path = self.path(f"random_{seed}.json")
            with open(path, "w") as f:
                json.dump({"name": f"random-{seed}", "ops": [op for op in ops if rng.random() < 0.5] or ["None"]}, f)
            profiles.append(path)
        return profiles

    def assertSplitComputesTheSame(self, model_path, name, seeds=(1, 2, 3), extra_args=()):
        rng = random.Random(42)
        inputs = self.path(f"{name}.inputs.json")
        with open(inputs, "w") as f:
            json.dump(self.inputs_for(model_path, name, rng), f)
        cuts = 0
        for k, profile in enumerate(self.profiles_for(model_path, seeds)):
            with self.subTest(model=name, profile=os.path.basename(profile)):
                out = self.path(f"{name}.{k}")
                run("split", model_path, "--profile", profile, "-o", out, *extra_args, check=True)
                proc = subprocess.run([*ORACLE, "plan", model_path, out, inputs], capture_output=True, text=True,
                                      timeout=300)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                report = json.loads(proc.stdout)
                cuts += report["submodules"] - 1
                self.assertTrue(report["outputs"])
                for value, error in report["outputs"].items():
                    self.assertGreater(error["elements"], 0)
                    self.assertTrue(error["max_abs"] <= 1e-5 or error["max_rel"] <= 1e-4, (value, error))
        return cuts

    def test_example_models(self):
        total = 0
        for name in ("cnn", "transformer", "dlrm"):
            total += self.assertSplitComputesTheSame(os.path.join(EXAMPLES, f"{name}.onnx"), name)
        self.assertGreater(total, 20)  # the random profiles really cut the models

    def test_generated_models_with_min_size_and_max_splits(self):
        for family in ("chain", "diamonds", "transformer"):
            path = self.path(f"{family}.onnx")
            run("gen", family, "6", "-o", path, check=True)
            self.assertSplitComputesTheSame(path, family, seeds=(4, 5), extra_args=("--min-acc-size", "3"))
            self.assertSplitComputesTheSame(path, f"{family}_capped", seeds=(6,), extra_args=("--max-acc-splits", "3"))

    def test_partitioned_models(self):
        """Partitions of generated models in every cost mode, run in plan order, give the outputs too."""
        rng = random.Random(7)
        for family, n, device_bytes in (("linear_chain", 12, 20000), ("transformer", 2, 400000)):
            with self.subTest(family=family):
                model = self.path(f"{family}.onnx")
                run("gen", family, n, "-o", model, check=True)
                devices = self.path(f"{family}.devices.json")
                with open(devices, "w") as f:
                    json.dump({"devices": [{"logical_id": i, "available_mem_bytes": device_bytes} for i in range(8)]}, f)
                inputs = self.path(f"{family}.inputs.json")
                with open(inputs, "w") as f:
                    json.dump(self.inputs_for(model, family, rng), f)
                for mode in ("size_based", "cost_aware", "kl_based", "optimal"):
                    out = self.path(f"{family}.{mode}")
                    code, stdout, err = run("partition", model, "--devices", devices, "--mode", mode, "--estimate",
                                            "-o", out, "--json")
                    self.assertEqual(code, 0, err)
                    self.assertGreater(len(json.loads(stdout)["partitions"]), 1, mode)
                    proc = subprocess.run([*ORACLE, "plan", model, out, inputs], capture_output=True, text=True,
                                          timeout=300)
                    self.assertEqual(proc.returncode, 0, proc.stderr)
                    for value, error in json.loads(proc.stdout)["outputs"].items():
                        self.assertTrue(error["max_abs"] <= 1e-5 or error["max_rel"] <= 1e-4, (mode, value, error))


if __name__ == "__main__":
    main()
