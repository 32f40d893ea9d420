"""The ATen runtime against ONNX Runtime (PyPI onnxruntime) on the model zoo of issue 4:
torchvision resnet50, mobilenet_v3_large and a ViT (torchvision's VisionTransformer), a
torch.nn.TransformerEncoder, a GPT-2-style decoder, a DLRM-like model with EmbeddingBag and
2-layer bidirectional LSTM and GRU taggers, torchvision's segmentation models (deeplabv3, lraspp,
fcn), swin_t, MaxViT (Einsum attention), DCGAN's generator (ConvTranspose), a small 3-D ResNet (Conv3d, MaxPool3d), a wav2letter-like
stack of 1-D convolutions, ConvNeXt (depthwise 7x7, LayerNorm over channels, GELU, layer scale) and ResNeXt (grouped 3x3) (exported by tools/export_zoo.py --small with PyTorch's TorchScript exporter, opsets 11 to 17). Outputs must agree within 1e-4 relative error (max |cleave - ORT| / max |ORT|). Cut models (split with the GPU and NPU
profiles) must verify against the original with `cleave verify`, and unsupported input must be
refused with one-line errors."""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

from testlib import CLEAVE, EXAMPLES, ORACLE, SOURCE_DIR, TempDirTest, main, run

ZOO = os.path.join(os.path.dirname(os.path.abspath(CLEAVE)), "zoo_small")
MODELS = ("resnet50", "mobilenet_v3_large", "vit_b_16", "transformer_encoder", "gpt2", "dlrm", "lstm", "gru",
          "deeplabv3", "lraspp", "fcn", "swin_t", "maxvit_t", "dcgan", "r3d_18", "wav2letter", "convnext_tiny",
          "resnext50_32x4d")
GPU = os.path.join(EXAMPLES, "profiles", "gpu.json")
NPU = os.path.join(EXAMPLES, "profiles", "npu.json")


def export_zoo():
    subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "tools", "export_zoo.py"), ZOO, *MODELS, "--small"],
                   check=True, capture_output=True, text=True, timeout=900)


def relative_error(want, got):
    scale = max((abs(v) for v in want), default=0.0)
    error = max((abs(a - b) for a, b in zip(want, got)), default=0.0)
    return error / scale if scale > 0 else error


class RuntimeOracle(TempDirTest):
    @classmethod
    def setUpClass(cls):
        export_zoo()

    def model(self, name):
        return os.path.join(ZOO, f"{name}.onnx"), os.path.join(ZOO, f"{name}.inputs.json")

    def test_every_zoo_model_matches_onnx_runtime(self):
        opsets = set()
        for name in MODELS:
            with self.subTest(model=name):
                model, inputs = self.model(name)
                opsets.add(onnx.load(model, load_external_data=False).opset_import[0].version)
                ort_out, cleave_out = self.path(f"{name}.ort.json"), self.path(f"{name}.cleave.json")
                proc = subprocess.run([*ORACLE, "run", model, inputs, ort_out], capture_output=True, text=True,
                                      timeout=600)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                code, _, err = run("run", model, "--inputs", inputs, "--save-outputs", cleave_out)
                self.assertEqual(code, 0, err)
                want, got = json.load(open(ort_out)), json.load(open(cleave_out))
                self.assertEqual(sorted(want), sorted(got))
                for output in want:
                    self.assertEqual(want[output]["dims"], got[output]["dims"])
                    self.assertGreater(max(abs(v) for v in want[output]["data"]), 1e-6, "a degenerate output")
                    self.assertLessEqual(relative_error(want[output]["data"], got[output]["data"]), 1e-4, output)
        self.assertEqual(opsets, {11, 12, 13, 14, 15, 16, 17})

    def test_no_zoo_model_copies_between_host_and_device_after_its_first_run(self):
        # aten-cpu-as-gpu keeps host and device memory apart as a GPU does: the first run copies
        # constants and parameters read on the other side, and a steady-state run copies nothing
        # (inputs and outputs aside), so a CUDA-graph recording meets no host-device copy. DLRM's
        # EmbeddingBag loop reads its offsets on the host every run (data-dependent): its copies,
        # made inside the Loop's body, are named.
        for name in MODELS:
            with self.subTest(model=name):
                model, inputs = self.model(name)
                code, stdout, err = run("run", model, "--inputs", inputs, "--backend", "aten-cpu-as-gpu", "--repeat",
                                        "2", "--profile", "--json")
                self.assertEqual(code, 0, err)
                report = json.loads(stdout)
                if name == "dlrm":
                    self.assertEqual(sorted({key.split("/")[1] for key in report["host_device_copies_by_value"]}),
                                     ["embeddings.0", "embeddings.1", "embeddings.2"])
                    self.assertTrue(all(key.endswith("to the host") for key in report["host_device_copies_by_value"]))
                    continue
                self.assertEqual(report["host_device_copies_by_value"], {})
                self.assertEqual(report["host_device_copies"], 0)
        # The count is by value: a model whose shape arithmetic reads a computed value on the host
        # each run (no memo) names it.
        model, inputs = self.model("transformer_encoder")
        code, stdout, err = run("run", model, "--inputs", inputs, "--backend", "aten-cpu-as-gpu", "--no-shape-memo",
                                "--profile", "--json")
        self.assertEqual(code, 0, err)
        report = json.loads(stdout)
        self.assertGreater(report["host_device_copies"], 0)
        self.assertEqual(sum(report["host_device_copies_by_value"].values()), report["host_device_copies"])
        self.assertTrue(all("(made by " in key for key in report["host_device_copies_by_value"]))

    def test_every_zoo_model_records_for_replay_but_a_data_dependent_loop(self):
        # --graph-replay on aten-cpu-as-gpu records as a GPU would (the CPU wing's recording refuses
        # a host-device crossing inside the recorded run, naming the value): every zoo model
        # records, except DLRM, whose EmbeddingBag loop reads its offsets on the host every run.
        for name in MODELS:
            with self.subTest(model=name):
                model, inputs = self.model(name)
                code, stdout, err = run("run", model, "--inputs", inputs, "--backend", "aten-cpu-as-gpu",
                                        "--graph-replay", "--repeat", "3", "--json", "--save-outputs",
                                        self.path("replayed.json"))
                self.assertEqual(code, 0, err)
                replay = json.loads(stdout)["graph_replay"]
                if name == "dlrm":
                    self.assertEqual((replay["recorded"], replay["refused"]), (0, 1))
                    self.assertIn("node '/embeddings.0/Loop'", replay["refusal"])
                    self.assertIn("to the host would be copied inside the recording", replay["refusal"])
                    continue
                self.assertEqual((replay["recorded"], replay["refused"]), (1, 0), replay.get("refusal"))
                code, _, err = run("run", model, "--inputs", inputs, "--save-outputs", self.path("eager.json"))
                self.assertEqual(code, 0, err)
                self.assertEqual(json.load(open(self.path("replayed.json"))), json.load(open(self.path("eager.json"))))
        # A step that copies every run (no shape memo) is refused and named; aten-cpu records nothing.
        model, inputs = self.model("transformer_encoder")
        code, stdout, err = run("run", model, "--inputs", inputs, "--backend", "aten-cpu-as-gpu", "--graph-replay",
                                "--no-shape-memo", "--json")
        self.assertEqual(code, 0, err)
        self.assertIn("(made by /encoder/layers.0/self_attn/Sqrt) to the device would be copied inside the recording",
                      json.loads(stdout)["graph_replay"]["refusal"])
        code, _, err = run("run", model, "--inputs", inputs, "--graph-replay")
        self.assertOneLineError(code, err, "aten-cpu records no device work", exit_code=2)

    def test_cut_models_verify_against_the_original(self):
        for name in MODELS:
            model, inputs = self.model(name)
            # A profile that leaves a few common ops on the CPU, so every model is cut several times.
            ops = {n.op_type for n in onnx.load(model, load_external_data=False).graph.node}
            holes = self.path(f"{name}.profile.json")
            with open(holes, "w") as f:
                json.dump({"name": "holes", "ops": sorted(ops - {"Relu", "Softmax", "Erf", "Gather", "HardSwish", "Tanh"})}, f)
            for profile in (GPU, holes):
                with self.subTest(model=name, profile=os.path.basename(profile)):
                    out = self.path(f"{name}_{os.path.basename(profile)}")
                    # Folded by default; with the holes, as read, so that the Gathers of shape
                    # arithmetic (LSTM, GRU) still cut the model there.
                    flags = ["--no-simplify"] if profile == holes else []
                    code, _, err = run("split", model, "--profile", profile, "-o", out, *flags)
                    self.assertEqual(code, 0, err)
                    code, stdout, err = run("verify", model, out, "--inputs", inputs, "--json")
                    self.assertEqual(code, 0, err)
                    report = json.loads(stdout)
                    self.assertTrue(report["ok"])
                    self.assertGreater(report["submodules"], 2 if profile == holes else 0)

    def test_random_inputs_are_the_same_for_a_model_and_its_cut(self):
        model, _ = self.model("transformer_encoder")
        out = self.path("cut")
        run("split", model, "--profile", NPU, "-o", out, check=True)
        code, whole, err = run("run", model, "--seed", "7", "--json")
        self.assertEqual(code, 0, err)
        code, cut, err = run("run", out, "--seed", "7", "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(whole)["outputs"], json.loads(cut)["outputs"])
        code, _, err = run("verify", model, out, "--seed", "7")
        self.assertEqual(code, 0, err)
        # Past tolerance (bf16 accelerator submodules, zero tolerance): one line naming the worst
        # element by index, under numpy's allclose rule.
        gpu_cut = self.path("gpu_cut")
        run("split", model, "--profile", GPU, "-o", gpu_cut, check=True)
        code, _, err = run("verify", model, gpu_cut, "--seed", "7", "--backend", "aten-cpu-bf16", "--rtol", "0",
                           "--atol", "0")
        self.assertOneLineError(code, err, "differs past tolerance: element [", "expected", "atol 0 + rtol 0")


class DetectionOps(TempDirTest):
    """The ops detection models end with (torchvision's SSD, Faster R-CNN), on random inputs
    against ONNX Runtime: RoiAlign in every mode, TopK and NonMaxSuppression with tied scores
    (ONNX orders ties by index; untrained detectors score every box alike)."""

    def compare(self, name, nodes, inputs, outputs, opset, exact):
        values = {k: v for k, v in inputs.items()}
        graph = helper.make_graph(
            nodes, name, [helper.make_tensor_value_info(k, TensorProto.INT64 if v.dtype == np.int64 else
                                                        TensorProto.FLOAT, list(v.shape)) for k, v in values.items()],
            [helper.make_tensor_value_info(o, TensorProto.INT64 if o in ("indices", "selected") else TensorProto.FLOAT,
                                           None) for o in outputs])
        model = self.path(f"{name}.onnx")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), model)
        feeds = self.path(f"{name}.inputs.json")
        with open(feeds, "w") as f:
            json.dump({k: {"dtype": "int64" if v.dtype == np.int64 else "float32", "dims": list(v.shape),
                           "data": v.flatten().tolist()} for k, v in values.items()}, f)
        ort_out, cleave_out = self.path(f"{name}.ort.json"), self.path(f"{name}.cleave.json")
        proc = subprocess.run([*ORACLE, "run", model, feeds, ort_out], capture_output=True, text=True, timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        code, _, err = run("run", model, "--inputs", feeds, "--save-outputs", cleave_out)
        self.assertEqual(code, 0, err)
        want, got = json.load(open(ort_out)), json.load(open(cleave_out))
        for output in outputs:
            self.assertEqual(want[output]["dims"], got[output]["dims"], f"{name} {output}")
            if exact:
                self.assertEqual(want[output]["data"], got[output]["data"], f"{name} {output}")
            else:
                self.assertGreater(max(abs(v) for v in want[output]["data"]), 1e-3, f"{name}: a degenerate output")
                self.assertLessEqual(relative_error(want[output]["data"], got[output]["data"]), 1e-5, f"{name} {output}")

    def test_roi_align_in_every_mode_matches_onnx_runtime(self):
        rng = np.random.default_rng(7)
        x = rng.standard_normal((2, 5, 12, 10)).astype(np.float32)
        corners = rng.uniform(-8, 50, (24, 4)).astype(np.float32)  # some regions reach past the edges
        rois = np.concatenate([np.minimum(corners[:, :2], corners[:, 2:]), np.maximum(corners[:, :2], corners[:, 2:])], 1)
        batch = rng.integers(0, 2, 24).astype(np.int64)
        for opset, transform in ((10, None), (16, "half_pixel"), (16, "output_half_pixel")):
            for mode in ("avg", "max"):
                for ratio in (0, 2):
                    attrs = dict(mode=mode, output_height=3, output_width=4, sampling_ratio=ratio, spatial_scale=0.25)
                    if transform:
                        attrs["coordinate_transformation_mode"] = transform
                    with self.subTest(opset=opset, transform=transform, mode=mode, ratio=ratio):
                        node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], **attrs)
                        self.compare(f"roi_{opset}_{transform}_{mode}_{ratio}", [node],
                                     {"x": x, "rois": rois, "batch": batch}, ["y"], opset, exact=False)

    def test_topk_and_nms_with_tied_scores_match_onnx_runtime(self):
        rng = np.random.default_rng(11)
        scores = np.round(rng.uniform(0, 1, (2, 3, 400)), 1).astype(np.float32)  # ten score levels: ties
        topk = helper.make_node("TopK", ["s", "k"], ["values", "indices"], axis=-1)
        self.compare("topk_ties", [topk], {"s": scores, "k": np.array([50], dtype=np.int64)}, ["values", "indices"],
                     17, exact=True)
        corners = rng.uniform(0, 100, (2, 400, 2)).astype(np.float32)
        boxes = np.concatenate([corners, corners + rng.uniform(5, 30, (2, 400, 2)).astype(np.float32)], 2)
        limits = {"max": np.array([60], dtype=np.int64), "iou": np.array([0.4], dtype=np.float32),
                  "score": np.array([0.15], dtype=np.float32)}
        nms = helper.make_node("NonMaxSuppression", ["boxes", "s", "max", "iou", "score"], ["selected"])
        self.compare("nms_ties", [nms], {"boxes": boxes, "s": scores, **limits}, ["selected"], 17, exact=True)
        # torchvision's batched NMS: one class, its 20 real classes' boxes shifted 200 apart along x;
        # and an IoU threshold of 0 (any overlap suppresses).
        shifted = boxes[:1].repeat(5, axis=1)
        shifted[..., [1, 3]] += (np.arange(2000) % 20 * 200.0)[None, :, None].astype(np.float32)
        shifted_scores = np.round(rng.uniform(0, 1, (1, 1, 2000)), 2).astype(np.float32)
        for iou in (0.5, 0.0):
            self.compare(f"nms_shifted_{iou}", [nms], {"boxes": shifted, "s": shifted_scores, **limits, "max": np.array(
                [2000], dtype=np.int64), "iou": np.array([iou], dtype=np.float32)}, ["selected"], 17, exact=True)



class NodeNamesBesideValueNames(TempDirTest):
    """ONNX keeps node names apart from value names (onnx.checker passes, ONNX Runtime runs it):
    a MatMul named like its weight, a Relu named like the graph input, a node named "output"."""
    compare = DetectionOps.compare

    def test_nodes_named_like_values_run_as_onnx_runtime_runs_them(self):
        rng = np.random.default_rng(3)
        weight = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], rng.standard_normal(16).astype(np.float32))
        nodes = [helper.make_node("Constant", [], ["w"], name="weight", value=weight),
                 helper.make_node("MatMul", ["x", "w"], ["h"], name="w"),
                 helper.make_node("Relu", ["h"], ["r"], name="x"),
                 helper.make_node("Relu", ["r"], ["y"], name="output")]
        x = rng.standard_normal((3, 4)).astype(np.float32) + 1.0
        self.compare("names", nodes, {"x": x}, ["y"], 17, exact=False)

class BadInput(TempDirTest):
    def write_model(self, op_type, domain="", opset=17):
        node = helper.make_node(op_type, ["x"], ["y"], name="odd_node", domain=domain)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
        imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
        path = self.path(f"{op_type}.onnx")
        onnx.save(helper.make_model(graph, opset_imports=imports), path)
        return path

    def test_an_op_without_kernel_is_named_with_node_and_opset(self):
        path = self.write_model("Frobnicate", domain="com.example")
        code, _, err = run("run", path)
        self.assertOneLineError(code, err, "com.example::Frobnicate", "'odd_node'", "opset 17")

    def test_a_kernel_refusing_its_operands_names_the_node(self):
        node = helper.make_node("Reshape", ["x", "shape"], ["y"], name="bad_reshape")
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                  [helper.make_tensor("shape", TensorProto.INT64, [2], [4, 4])])
        path = self.path("reshape.onnx")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
        code, _, err = run("run", path)
        self.assertOneLineError(code, err, "'bad_reshape'", "Reshape")

    def test_missing_and_corrupt_inputs(self):
        path = self.write_model("Relu")
        bad = self.path("inputs.json")
        with open(bad, "w") as f:
            json.dump({"other": {"dtype": "float32", "dims": [2], "data": [1, 2]}}, f)
        code, _, err = run("run", path, "--inputs", bad)
        self.assertOneLineError(code, err, "no value for input 'x'")
        with open(bad, "w") as f:
            json.dump({"x": {"dtype": "float32", "dims": [3], "data": [1, 2]}}, f)
        code, _, err = run("run", path, "--inputs", bad)
        self.assertOneLineError(code, err, "'x'", "dims need 3")
        code, _, err = run("run", path, "--backend", "tpu-9000")
        self.assertOneLineError(code, err, "unknown backend 'tpu-9000'", exit_code=1)

    def test_profile_backend_refuses_what_its_profile_does_not_support(self):
        model = os.path.join(EXAMPLES, "cnn.onnx")
        with open(self.path("relu_only.json"), "w") as f:
            json.dump({"ops": ["Relu"]}, f)
        code, _, err = run("run", model, "--backend", f"profile:{self.path('relu_only.json')}")
        self.assertOneLineError(code, err, "refuses node", "not in the profile")

    def test_verify_needs_a_cut_directory(self):
        model = os.path.join(EXAMPLES, "cnn.onnx")
        code, _, err = run("verify", model, self.path("nothing"))
        self.assertOneLineError(code, err, "no plan.json")


if __name__ == "__main__":
    main()
