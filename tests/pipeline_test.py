"""`cleave pipeline`, `cleave run --pipeline` and `cleave schedule` end to end.

The modules of PyTorch's pipelining tests (test_pipe.py's ExampleCode and MultiMLP, the model with
a parameter alias, an 8-layer MLP stack split at layers.4), traced to FX with cleave_fx's tracer
(which records torch.distributed.pipelining's pipe_split() markers): the stage counts
PyTorch's tests expect, torch's own split_by_tags with cleave's assignment computing what the
model computes, and stage parameter names that are the model's own. ONNX exports: stages run
microbatch by microbatch give the original outputs."""
import json
import os
import subprocess
import sys

import torch
from torch.distributed.pipelining import pipe_split

from testlib import SOURCE_DIR, TempDirTest, main, run

sys.path.insert(0, os.path.join(SOURCE_DIR, "tools"))
import cleave_fx  # noqa: E402

D = 16


class ExampleCode(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mm_param1 = torch.nn.Parameter(torch.randn(D, D))
        self.mm_param2 = torch.nn.Parameter(torch.randn(D, D))
        self.lin1 = torch.nn.Linear(D, D)
        self.lin2 = torch.nn.Linear(D, D)

    def forward(self, x, y):
        x = torch.mm(x, self.mm_param1)  # a multi-use parameter
        skip_connection = x
        x = x + y
        x = torch.relu(x)
        pipe_split()
        x = torch.mm(x, self.mm_param1)
        x = self.lin1(x)
        pipe_split()
        x = torch.relu(x)
        x = x + skip_connection
        x = torch.mm(x, self.mm_param2)
        pipe_split()
        x = self.lin2(x)
        x = torch.relu(x)
        return x


class MLPModule(torch.nn.Module):
    def __init__(self, d_hid):
        super().__init__()
        self.net1 = torch.nn.Linear(d_hid, d_hid)
        self.relu = torch.nn.ReLU()
        self.net2 = torch.nn.Linear(d_hid, d_hid)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


class MultiMLP(torch.nn.Module):
    def __init__(self, d_hid, n_layers=4):
        super().__init__()
        self.layers = torch.nn.ModuleList([MLPModule(d_hid) for _ in range(n_layers)])
        self.split_spec = {f"layers.{i}": "BEGINNING" for i in range(1, n_layers)}

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class ModelWithParamAlias(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mm_param1 = self.mm_param0 = torch.nn.Parameter(torch.randn(D, D))
        self.lin1 = self.lin0 = torch.nn.Linear(D, D)

    def forward(self, x, y):
        x = torch.mm(x, self.mm_param0)
        x = x + y
        x = self.lin0(x)
        x = torch.relu(x)
        pipe_split()
        x = torch.mm(x, self.mm_param1)
        x = self.lin1(x)
        x = torch.relu(x)
        return x


class MLPStack(torch.nn.Module):
    def __init__(self, n_layers=8):
        super().__init__()
        self.layers = torch.nn.Sequential(*[MLPModule(D) for _ in range(n_layers)])

    def forward(self, x):
        return self.layers(x)


class PipelineFx(TempDirTest):
    def check(self, module, inputs, expected_stages, spec=None, name="m"):
        torch.manual_seed(0)
        gm = cleave_fx.symbolic_trace(module)
        fx_path = self.path(f"{name}.fx.json")
        with torch.no_grad():
            cleave_fx.export_graph(gm, inputs, fx_path)
        args = ["pipeline", fx_path, "-o", self.path(name), "--json"]
        if spec is not None:
            with open(self.path(f"{name}.spec.json"), "w") as f:
                json.dump({"split_spec": spec}, f)
            args += ["--split-spec", self.path(f"{name}.spec.json")]
        code, out, err = run(*args)
        self.assertEqual(code, 0, err)
        summary = json.loads(out)
        self.assertEqual(len(summary["stages"]), expected_stages)
        # torch's split_by_tags with cleave's assignment computes what the model computes.
        split = cleave_fx.apply_split(cleave_fx.symbolic_trace(module), self.path(name))
        with torch.no_grad():
            torch.testing.assert_close(split(*inputs), module(*inputs))
        self.assertEqual(len([c for c in split.named_children()]), expected_stages)
        # Stage parameters are the model's own names.
        names = set(module.state_dict().keys())
        for stage in summary["stages"]:
            self.assertTrue(set(stage["parameters"]) <= names, stage["parameters"])
        return summary

    def test_example_code_has_four_stages_a_shared_parameter_and_a_skip(self):
        s = self.check(ExampleCode(), (torch.randn(8, D), torch.randn(8, D)), 4, name="example")
        self.assertEqual(s["tie_groups"], [{"parameter": "mm_param1", "stages": [0, 1]}])
        self.assertEqual(s["skip_connections"], [{"value": "mm", "from": 0, "to": 2}])
        self.assertEqual(len(s["markers"]), 3)

    def test_multi_mlp_split_spec_gives_four_stages(self):
        m = MultiMLP(D, 4)
        s = self.check(m, (torch.randn(8, D),), 4, spec=m.split_spec, name="multimlp")
        self.assertTrue(all(n.startswith("layers_1") for n in s["stages"][1]["nodes"]), s["stages"][1]["nodes"])

    def test_parameter_alias_gives_two_stages(self):
        self.check(ModelWithParamAlias(), (torch.randn(8, D), torch.randn(8, D)), 2, name="alias")

    def test_eight_layer_stack_split_at_layers_4(self):
        s = self.check(MLPStack(8), (torch.randn(8, D),), 2, spec={"layers.4": "BEGINNING"}, name="stack")
        self.assertEqual(len(s["stages"][0]["nodes"]), len(s["stages"][1]["nodes"]))


class PipelineOnnx(TempDirTest):
    def export(self, module, rows, name, output="y", static=False):
        path = self.path(f"{name}.onnx")
        axes = "None" if static else "{'x': {0: 'batch'}}"
        script = ("import sys, torch\n"
                  f"sys.path.insert(0, {os.path.join(SOURCE_DIR, 'tests')!r})\n"
                  "from pipeline_test import MLPStack\n"
                  "torch.manual_seed(0)\n"
                  f"m = MLPStack({module}).eval()\n"
                  f"torch.onnx.export(m, (torch.randn({rows}, {D}),), {path!r}, input_names=['x'],\n"
                  f"                  output_names=[{output!r}], dynamic_axes={axes}, opset_version=17, dynamo=False)\n")
        subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
        return path

    def test_stages_run_microbatch_by_microbatch_give_the_original(self):
        model = self.export(8, 4, "stack")
        for policy in ("equal_nodes", "equal_flops", "optimal"):
            for multi_use in ("replicate", "transmit"):
                with self.subTest(policy=policy, multi_use=multi_use):
                    out = self.path(f"{policy}_{multi_use}")
                    code, stdout, err = run("pipeline", model, "--stages", "4", "--policy", policy,
                                            "--multi-use", multi_use, "-o", out, "--json")
                    self.assertEqual(code, 0, err)
                    self.assertEqual(len(json.loads(stdout)["stages"]), 4)
                    for rows, chunks in ((128, 2), (256, 2), (512, 2), (12, 5)):
                        code, whole, err = run("run", model, "--dim", f"batch={rows}", "--seed", "3",
                                               "--save-outputs", self.path("whole.json"))
                        self.assertEqual(code, 0, err)
                        code, piped, err = run("run", out, "--pipeline", "--microbatches", chunks, "--dim",
                                               f"batch={rows}", "--seed", "3", "--save-outputs", self.path("piped.json"),
                                               "--json")
                        self.assertEqual(code, 0, err)
                        want, got = json.load(open(self.path("whole.json"))), json.load(open(self.path("piped.json")))
                        self.assertEqual(want["y"]["dims"], [rows, D])
                        self.assertEqual(got["y"]["dims"], want["y"]["dims"])
                        diff = max(abs(a - b) for a, b in zip(want["y"]["data"], got["y"]["data"]))
                        self.assertLessEqual(diff, 1e-5)

    def test_loss_spec_errors_name_the_outputs(self):
        model = self.export(2, 4, "small")
        code, _, err = run("pipeline", model, "--stages", "2", "--loss", "objective")
        self.assertOneLineError(code, err, "'objective'", "(y)")
        code, out, err = run("pipeline", self.export(2, 4, "lossy", output="loss"), "--stages", "2", "--json")
        self.assertEqual(code, 0, err)
        summary = json.loads(out)
        self.assertEqual(summary["loss"], "loss")
        self.assertEqual([b["stage"] for b in summary["backward"]], [1, 0])

    def test_bad_requests(self):
        model = self.export(2, 4, "small")
        code, _, err = run("pipeline", model)
        self.assertOneLineError(code, err, "no split markers")
        code, _, err = run("pipeline", model, "--stages", "100")
        self.assertOneLineError(code, err, "100 stages")
        code, _, err = run("pipeline", model, "--stages", "2", "--policy", "random")
        self.assertOneLineError(code, err, "random", exit_code=2)
        with open(self.path("spec.json"), "w") as f:
            json.dump({"split_spec": {"decoder": "MIDDLE"}}, f)
        code, _, err = run("pipeline", model, "--split-spec", self.path("spec.json"))
        self.assertOneLineError(code, err, "split_spec.decoder")


class HeadsMse(torch.nn.Module):
    """Attention's head split as PyTorch code writes it: view(b * heads, s, d / heads). Exported
    with a static batch, the exporter folds b * heads into Reshape's shape constant; the loss (MSE
    against a target) makes it trainable."""

    def __init__(self):
        super().__init__()
        self.fc, self.out = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x, target):
        b, s, d = x.shape
        h = torch.relu(self.fc(x).view(b * 2, s, 4)).view(b, s, d)
        return ((self.out(h) - target) ** 2).mean()


class FixedBatch(TempDirTest):
    """A static-batch export whose constants hold the batch (issue 41): known before anything runs,
    refused in one line naming the node wherever microbatches of other rows are asked for; a free
    batch (a dynamic axis, or no constant holding it) microbatches as before."""

    def export(self, name, dynamic):
        path = self.path(f"{name}.onnx")
        script = ("import sys, torch\n"
                  f"sys.path.insert(0, {os.path.join(SOURCE_DIR, 'tests')!r})\n"
                  "from pipeline_test import HeadsMse\n"
                  "torch.manual_seed(0)\n"
                  "x, t = torch.randn(4, 5, 8), torch.randn(4, 5, 8)\n"
                  f"axes = {{'x': {{0: 'b'}}, 't': {{0: 'b'}}}} if {dynamic} else None\n"
                  f"torch.onnx.export(HeadsMse(), (x, t), {path!r}, input_names=['x', 't'], output_names=['loss'],\n"
                  "                  opset_version=17, dynamic_axes=axes, dynamo=False)\n")
        subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True)
        return path

    def test_a_batch_held_in_a_constant_shape_is_refused_before_running(self):
        model = self.export("static", False)
        code, out, err = run("inspect", model, "--json")
        self.assertEqual(code, 0, err)
        batch = json.loads(out)["batch"]
        self.assertEqual((batch["exported_rows"], batch["free"]), (4, False))
        self.assertEqual(batch["holders"][0], {"node": "/Reshape", "op": "Reshape", "shape": [8, 5, 4]})
        code, out, err = run("inspect", model)
        self.assertIn("batch:       fixed at 4 rows: node '/Reshape'", out)
        refused = self.path("refused")
        code, _, err = run("pipeline", model, "--stages", 2, "--microbatches", 2, "-o", refused)
        self.assertOneLineError(code, err, "2 microbatches cannot run", "'/Reshape'", "[8, 5, 4]",
                                "exported batch of 4", "dynamic_axes={'x': {0: 'batch'}}")
        self.assertFalse(os.path.exists(refused))
        plan = self.path("plan")
        run("pipeline", model, "--stages", 2, "-o", plan, check=True)
        code, _, err = run("run", plan, "--pipeline", "--microbatches", 2)
        self.assertOneLineError(code, err, "submodule 'stage_0'", "'/Reshape'", "exported batch of 4")
        code, _, err = run("run", plan, "--pipeline", "--microbatches", 1)
        self.assertEqual(code, 0, err)
        # Training: microbatches of other rows refused at load; the exported batch trains.
        import numpy as np
        rng = np.random.default_rng(0)
        np.savez(self.path("data.npz"), x=rng.standard_normal((8, 5, 8)).astype(np.float32),
                 t=rng.standard_normal((8, 5, 8)).astype(np.float32))
        common = ["train", plan, "--data", self.path("data.npz"), "--batch", 4, "--steps", 2]
        code, _, err = run(*common, "--microbatches", 2)
        self.assertOneLineError(code, err, "training --batch 4 in 2 microbatch(es) cannot run", "'/Reshape'")
        code, _, err = run(*common, "--microbatches", 1)
        self.assertEqual(code, 0, err)

    def test_a_free_batch_microbatches(self):
        model = self.export("dynamic", True)
        code, out, err = run("inspect", model, "--json")
        self.assertEqual(json.loads(out)["batch"], {"exported_rows": None, "free": True, "holders": []})
        plan = self.path("plan")
        run("pipeline", model, "--stages", 2, "--microbatches", 2, "-o", plan, check=True)
        code, _, err = run("run", plan, "--pipeline", "--microbatches", 2, "--dim", "b=4")
        self.assertEqual(code, 0, err)
        # A static export with no constant shape holding the batch (an MLP) is free too.
        mlp = PipelineOnnx.export(self, 2, 4, "mlp", static=True)
        code, out, err = run("inspect", mlp)
        self.assertIn("batch:       4 rows exported; free", out)
        run("pipeline", mlp, "--stages", 2, "--microbatches", 2, "-o", self.path("mlp_plan"), check=True)


class ScheduleCli(TempDirTest):
    def test_generate_validate_simulate_and_round_trip(self):
        csv, svg = self.path("s.csv"), self.path("s.svg")
        code, out, err = run("schedule", "--kind", "interleaved", "--stages", "8", "--ranks", "4", "--microbatches",
                             "8", "--comm", "--csv", csv, "--svg", svg, "--json")
        self.assertEqual(code, 0, err)
        summary = json.loads(out)
        self.assertTrue(summary["valid"])
        self.assertGreater(summary["simulation"]["makespan"], 0)
        self.assertIn("SEND_F", open(csv).read())
        self.assertIn("<svg", open(svg).read())
        code, again, err = run("schedule", "--from-csv", csv, "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(again)["actions"], summary["actions"])
        # With its SEND/RECV actions, which transports it fits: interleaved 1F1B as lowered needs
        # buffered sends (with blocking ones two ranks wait for each other's receive).
        self.assertEqual(summary["transports"]["buffered"], "ok")
        self.assertEqual(summary["transports"]["ordered_channels"], "ok")
        self.assertIn("deadlocks", summary["transports"]["rendezvous"])
        # On NCCL: cleave's issue (a stream per channel) runs it; PyTorch's (a stream per rank
        # pair, one batch per action) hangs it, each rank's send queued behind the other's.
        self.assertEqual(summary["transports"]["nccl_channel_streams"], "ok")
        self.assertIn("the schedule hangs: rank 0 before", summary["transports"]["nccl_pair_streams"])
        code, out, err = run("schedule", "--kind", "gpipe", "--stages", "3", "--microbatches", "4", "--comm")
        self.assertEqual(code, 0, err)
        self.assertIn("rendezvous sends (a send waits for its receive): ok", out)
        self.assertIn("NCCL as cleave issues it (a stream per channel, receives posted ahead in the sender's order): ok",
                      out)
        # Fewer microbatches than stages (torchtitan's hang): blocking sends deadlock, NCCL as
        # cleave issues it does not.
        code, out, err = run("schedule", "--kind", "1f1b", "--stages", "4", "--microbatches", "2", "--comm", "--json")
        self.assertEqual(code, 0, err)
        transports = json.loads(out)["transports"]
        self.assertIn("deadlocks", transports["rendezvous"])
        self.assertEqual(transports["nccl_channel_streams"], "ok")

    def test_send_and_receive_costs_lengthen_the_schedule_and_are_not_compute(self):
        def simulate(*extra):
            code, out, err = run("schedule", "--kind", "1f1b", "--stages", "2", "--microbatches", "1", "--simulate",
                                 "--costs", "1,2", *extra, "--json")
            self.assertEqual(code, 0, err)
            return json.loads(out)["simulation"]
        # Rank 0: F [0, 1], its send until 1.5; rank 1: F, B [1.5, 4.5], its send until 5; rank 0: B [5, 7].
        self.assertAlmostEqual(simulate()["makespan"], 6.0)
        timed = simulate("--send-cost", "0.5")
        self.assertAlmostEqual(timed["makespan"], 7.0)
        self.assertAlmostEqual(timed["bubble_fraction"], 1 - 6 / 14)
        code, _, err = run("schedule", "--kind", "1f1b", "--stages", "2", "--microbatches", "1", "--simulate",
                           "--send-cost", "-1")
        self.assertEqual(code, 2, err)
        self.assertIn("--send-cost", err)
        # Each message then also takes its receiver 0.25 before the action reading it: rank 1 reads
        # until 1.75, F, B [1.75, 4.75], sends until 5.25; rank 0 reads until 5.5, B [5.5, 7.5].
        both = simulate("--send-cost", "0.5", "--receive-cost", "0.25")
        self.assertAlmostEqual(both["makespan"], 7.5)
        self.assertAlmostEqual(both["bubble_fraction"], 1 - 6 / 15)
        code, _, err = run("schedule", "--kind", "1f1b", "--stages", "2", "--microbatches", "1", "--simulate",
                           "--receive-cost", "nan")
        self.assertEqual(code, 2, err)
        self.assertIn("--receive-cost", err)

    def test_action_costs_replay_single_actions(self):
        def simulate(*extra):
            return run("schedule", "--kind", "1f1b", "--stages", "2", "--microbatches", "2", "--simulate",
                       "--costs", "1,2", *extra, "--json")
        code, out, err = simulate("--action-costs", "1F0=4,0B1=0.5")
        self.assertEqual(code, 0, err)
        self.assertAlmostEqual(json.loads(out)["simulation"]["makespan"], 10.5)  # 9, +3 for 1F0, -1.5 for 0B1
        for bad, named in (("1F0", "ACTION=TIME"), ("1F0=-2", "ACTION=TIME"), ("1F0=nan", "ACTION=TIME"),
                           ("1X0=1", "not an action"), ("3F0=1", "not an F, B, I or W"),
                           ("0SEND_F0=1", "not an F, B, I or W")):
            code, out, err = simulate("--action-costs", bad)
            self.assertEqual(code, 1, bad)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertIn(named, err)
            self.assertEqual(out, "")

    def test_cost_spread_averages_seeded_plays(self):
        args = ("schedule", "--kind", "interleaved", "--stages", "4", "--ranks", "2", "--microbatches", "4",
                "--simulate", "--costs", "1,2", "--json")
        code, out, err = run(*args)
        self.assertEqual(code, 0, err)
        fixed = json.loads(out)["simulation"]
        self.assertNotIn("spread", fixed)
        code, out, err = run(*args, "--cost-spread", "0.3", "--samples", "50")
        self.assertEqual(code, 0, err)
        spread = json.loads(out)["simulation"]["spread"]
        self.assertEqual(spread["samples"], 50)
        low, high = spread["bubble_fraction_range"]
        self.assertTrue(low <= spread["mean_bubble_fraction"] <= high, spread)
        self.assertGreater(spread["mean_bubble_fraction"], fixed["bubble_fraction"])
        self.assertEqual(run(*args, "--cost-spread", "0.3", "--samples", "50")[1], out)  # seeded: the same bytes
        code, text, err = run(*args[:-1], "--cost-spread", "0.3", "--samples", "50")
        self.assertEqual(code, 0, err)
        self.assertIn("with varying action times, over 50 plays: mean makespan", text)
        for bad in (("--cost-spread", "-1"), ("--cost-spread", "0.3", "--samples", "0")):
            code, out, err = run(*args, *bad)
            self.assertEqual(code, 2, err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertEqual(out, "")

    def test_a_deadlocking_csv_is_refused(self):
        with open(self.path("bad.csv"), "w") as f:
            f.write("0F0,0B0\n1B0,1F0\n")
        code, _, err = run("schedule", "--from-csv", self.path("bad.csv"))
        self.assertOneLineError(code, err, "deadlocks", "rank 0 at 0B0")
        code, _, err = run("schedule", "--kind", "gpipe", "--stages", "4", "--ranks", "2", "--microbatches", "4")
        self.assertOneLineError(code, err, "one stage per rank")


if __name__ == "__main__":
    main()
