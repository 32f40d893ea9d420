"""bench/sweep.py - cleave's runtime against ONNX Runtime on a sweep of torchvision's models.

Where bench/runtime.sh times a few models every way (cut, unfused, ...), this times many: 21
classification models (one per family), 4 video models, 3 segmentation models (their "out" at
520x520) and RAFT's small optical flow (4 updates, 128x128), exported from torchvision
with random weights (tools/export_zoo.py's randomize: BatchNorm statistics random too), batch 1.
Per model: one run each of ORT (PyPI onnxruntime, default threads) and `cleave run` on the
same input, whose outputs must agree within 1e-4 of ORT's largest (else the row says DIFFERS);
then ROUNDS interleaved rounds (order alternating), each timing one block per side (its median),
blocks sized to about BUDGET ms. Printed: each side's median over the rounds and the median of
the per-round ratios cleave / ORT with their [min, max]: a range straddling 1.0 is noise.

--verify instead cuts each model twice (examples/profiles/gpu.json, and a profile that leaves Relu,
Softmax, Erf, Gather, HardSwish, Sigmoid and Tanh on the CPU, so every model is cut many times) and runs
`cleave verify` on each cut: its verdict, the largest error against the output's scale, and how
many elements the element-wise rule would have failed (issue 41's false alarms).

--dynamo exports with torch's default exporter (torch.export-based) instead of the TorchScript one.

usage: .venv/bin/python3 bench/sweep.py CLEAVE [--rounds R] [--budget-ms B] [--zoo DIR] [--verify] [--dynamo]
                                       [MODEL ...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "examples"))
ORACLE = [sys.executable, os.path.join(ROOT, "tests", "oracle", "onnxruntime_oracle.py"), "run"]


def models():
    """name -> (builder, input shape, opset)."""
    import torchvision.models as m
    image, clip = (1, 3, 224, 224), (1, 3, 8, 112, 112)
    return {
        "alexnet": (m.alexnet, image, 14), "vgg11_bn": (m.vgg11_bn, image, 14),
        "squeezenet1_0": (m.squeezenet1_0, image, 14), "densenet121": (m.densenet121, image, 14),
        "inception_v3": (lambda: m.inception_v3(init_weights=False, aux_logits=False), (1, 3, 299, 299), 14),
        "googlenet": (lambda: m.googlenet(init_weights=False, aux_logits=False), image, 14),
        "shufflenet_v2_x1_0": (m.shufflenet_v2_x1_0, image, 14), "mobilenet_v2": (m.mobilenet_v2, image, 14),
        "mobilenet_v3_small": (m.mobilenet_v3_small, image, 14), "resnet18": (m.resnet18, image, 14),
        "resnext50_32x4d": (m.resnext50_32x4d, image, 14), "mnasnet0_5": (m.mnasnet0_5, image, 14),
        "efficientnet_b0": (m.efficientnet_b0, image, 14), "efficientnet_v2_s": (m.efficientnet_v2_s, image, 14),
        "regnet_y_400mf": (m.regnet_y_400mf, image, 14), "convnext_tiny": (m.convnext_tiny, image, 14),
        "maxvit_t": (m.maxvit_t, image, 17), "vit_b_32": (m.vit_b_32, image, 14),
        "r3d_18": (m.video.r3d_18, clip, 14), "r2plus1d_18": (m.video.r2plus1d_18, clip, 14),
        "mc3_18": (m.video.mc3_18, clip, 14), "s3d": (m.video.s3d, (1, 3, 16, 224, 224), 14),
        "swin_t": (m.swin_t, image, 17),  # swin_v2_t: Debian's exporter lacks aten::zero; mvit_v2_s: the export takes over 24 GiB
        "lraspp": (lambda: Out(m.segmentation.lraspp_mobilenet_v3_large(weights_backbone=None)), (1, 3, 520, 520), 14),
        "deeplabv3_mbv3": (lambda: Out(m.segmentation.deeplabv3_mobilenet_v3_large(weights_backbone=None)), (1, 3, 520, 520), 14),
        "fcn_resnet50": (lambda: Out(m.segmentation.fcn_resnet50(weights_backbone=None)), (1, 3, 520, 520), 14),
        "raft_small": (lambda: Flow(m.optical_flow.raft_small()), (2, 3, 128, 128), 16),
        "wide_resnet50_2": (m.wide_resnet50_2, image, 14), "regnet_x_1_6gf": (m.regnet_x_1_6gf, image, 14),
    }


class Out(torch.nn.Module):
    """A segmentation model's "out" only (torchvision returns a dict)."""
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


class Flow(torch.nn.Module):
    """RAFT on a pair of frames stacked along the batch; its last flow estimate."""
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x[0:1], x[1:2], num_flow_updates=4)[-1]


def export(zoo, name, spec, dynamo=False):
    """ZOO/NAME.onnx and NAME.inputs.json, unless they exist (tools/export_zoo.py's export_onnx:
    TorchScript at the catalog's opset, or the dynamo exporter at its own); None where the dynamo
    exporter fails (said, with its error)."""
    from export_zoo import exporter_error, export_onnx, randomize, spec as tensor_spec
    path = os.path.join(zoo, f"{name}.onnx")
    if os.path.exists(path):
        return path, os.path.join(zoo, f"{name}.inputs.json")
    make, shape, opset = spec
    torch.manual_seed(0)
    model = randomize(make()).eval()  # torchvision builders default to random weights
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(3))
    try:
        export_onnx(model, (x,), path + ".tmp", opset, ["x"], dynamo)
    except Exception as error:  # noqa: BLE001 - the exporter's failure, named
        if not dynamo:
            raise
        print(f"{name:20} the dynamo exporter failed: {exporter_error(error)}", flush=True)
        return None
    with open(os.path.join(zoo, f"{name}.inputs.json"), "w") as f:
        json.dump({"x": tensor_spec(x)}, f)
    os.replace(path + ".tmp", path)
    return path, os.path.join(zoo, f"{name}.inputs.json")


def ort_block(model, inputs, outputs, repeat):
    out = subprocess.run([*ORACLE, model, inputs, outputs, "--repeat", str(repeat)], capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["median_s"]


def cleave_block(cleave, model, inputs, repeat, save=None):
    cmd = [cleave, "run", model, "--inputs", inputs, "--repeat", str(repeat), "--json"]
    out = subprocess.run(cmd + (["--save-outputs", save] if save else []), capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)["timing"]["median_s"]


def relative_error(want_path, got_path):
    want, got = json.load(open(want_path)), json.load(open(got_path))
    worst = 0.0
    for name, spec in want.items():
        a, b = np.array(spec["data"], dtype=np.float64), np.array(got[name]["data"], dtype=np.float64)
        if a.shape != b.shape:
            return float("inf")
        if a.size:
            worst = max(worst, float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-30)))
    return worst


def verify_cuts(cleave, zoo, name, model, inputs):
    """One line per profile: `cleave verify`'s verdict on the model's cut."""
    import onnx
    ops = {n.op_type for n in onnx.load(model, load_external_data=False).graph.node}
    holes = os.path.join(zoo, f"{name}.holes.json")
    with open(holes, "w") as f:
        json.dump({"name": "holes", "ops": sorted(ops - {"Relu", "Softmax", "Erf", "Gather", "HardSwish", "Sigmoid",
                                                        "Tanh"})}, f)
    for profile in (os.path.join(ROOT, "examples", "profiles", "gpu.json"), holes):
        cut = os.path.join(zoo, f"{name}.cut")
        subprocess.run([cleave, "split", model, "--profile", profile, "-o", cut, "--force"], check=True,
                       capture_output=True)
        proc = subprocess.run([cleave, "verify", model, cut, "--inputs", inputs, "--json"], capture_output=True, text=True)
        if not proc.stdout.strip():
            print(f"{name:20} {profile:12} FAILED TO RUN: {proc.stderr.strip()}", flush=True)
            continue
        report = json.loads(proc.stdout)
        scaled = max(o["max_scaled"] for o in report["outputs"].values())
        past = sum(o["past_elementwise"] for o in report["outputs"].values())
        label = "gpu" if profile != holes else "holes"
        print(f"{name:20} {label:12} {report['submodules']:6d} {scaled:12.2e} {past:10d} "
              f"{'ok' if report['ok'] else 'FAILS'}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cleave")
    parser.add_argument("models", nargs="*")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget-ms", type=float, default=1500.0)
    parser.add_argument("--zoo", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "cleave_sweep"))
    parser.add_argument("--verify", action="store_true", help="verify cuts of each model instead of timing it")
    parser.add_argument("--dynamo", action="store_true",
                        help="export with torch's default (dynamo) exporter, into ZOO/dynamo, instead of TorchScript")
    args = parser.parse_args()
    catalog = models()
    names = args.models or list(catalog)
    unknown = [n for n in names if n not in catalog]
    if unknown:
        parser.error(f"unknown model {unknown[0]} (known: {', '.join(catalog)})")
    zoo = os.path.join(args.zoo, "dynamo") if args.dynamo else args.zoo
    os.makedirs(zoo, exist_ok=True)
    if args.verify:
        print(f"{'model':20} {'profile':12} {'subs':>6} {'max_scaled':>12} {'past_elem':>10} verdict", flush=True)
        for name in names:
            exported = export(zoo, name, catalog[name], args.dynamo)
            if exported:
                verify_cuts(args.cleave, zoo, name, *exported)
        return
    print(f"{'model':20} {'ort_ms':>9} {'cleave_ms':>10} {'cleave/ORT [range]':>22} {'rel_err':>9}", flush=True)
    for name in names:
        exported = export(zoo, name, catalog[name], args.dynamo)
        if not exported:
            continue
        model, inputs = exported
        ort_out, cleave_out = os.path.join(zoo, f"{name}.ort.json"), os.path.join(zoo, f"{name}.cleave.json")
        first = ort_block(model, inputs, ort_out, 1)
        cleave_block(args.cleave, model, inputs, 1, cleave_out)
        error = relative_error(ort_out, cleave_out)
        repeat = max(3, int(args.budget_ms / 1000.0 / max(first, 1e-4)))
        times = {"ort": [], "cleave": []}
        for round_ in range(args.rounds):
            for side in (("ort", "cleave") if round_ % 2 == 0 else ("cleave", "ort")):
                times[side].append(ort_block(model, inputs, ort_out, repeat) if side == "ort" else
                                   cleave_block(args.cleave, model, inputs, repeat))
        ratios = [c / o for c, o in zip(times["cleave"], times["ort"])]
        verdict = "" if error <= 1e-4 else "  DIFFERS"
        print(f"{name:20} {statistics.median(times['ort']) * 1e3:9.2f} {statistics.median(times['cleave']) * 1e3:10.2f} "
              f"{statistics.median(ratios):8.2f}x [{min(ratios):.2f},{max(ratios):.2f}] {error:9.1e}{verdict}",
              flush=True)


if __name__ == "__main__":
    main()
