"""cleave on a GPU against PyTorch on the same GPU, in one run: whole models' forward time and
peak device memory.

    python3 bench/gpu_models.py CLEAVE OUT_DIR [--models bert_base,resnet50,vit_b_16] [--batch 8]
                                [--runs 50] [--rounds 3] [--device cuda]

For each model: the PyTorch module (tools/export_zoo.py's, random weights) is exported to ONNX
(TorchScript exporter, static shapes), then, round by round, alternately:
  - PyTorch eager: --runs forwards under no_grad, synchronized, the median;
  - PyTorch eager replayed as one CUDA graph (torch.cuda.graphs), the median;
  - `cleave run MODEL --backend aten-cuda --repeat RUNS --profile --json`: its median, its peak
    device bytes and host-device copies.
Ratios are cleave / PyTorch per round, reported as median and range over rounds; peak memory is
cleave's `peak_device_bytes` against torch.cuda.max_memory_allocated for one forward (parameters
included on both sides). TF32 off on both sides (PyTorch's default for products; set for
convolutions too). Writes OUT_DIR/gpu_models.json and OUT_DIR/gpu_models.md.

--device cpu runs the same comparison on the CPU (aten-cpu, no CUDA graph), to check the script
where no GPU is.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
import export_zoo  # noqa: E402


def make_model(name, batch):
    """(module, example inputs) for `name`, random weights (export_zoo.randomize)."""
    g = torch.Generator().manual_seed(3)
    if name == "bert_base":
        model = export_zoo.Encoder(768, 12, 12, 3072, activation="gelu")
        inputs = (torch.randn(batch, 128, 768, generator=g),)
    elif name == "transformer_encoder":
        model = export_zoo.Encoder(64, 4, 2, 128, activation="gelu")
        inputs = (torch.randn(batch, 16, 64, generator=g),)
    elif name in ("resnet50", "vit_b_16"):
        import torchvision  # only these need it
        model = getattr(torchvision.models, name)(weights=None)
        inputs = (torch.randn(batch, 3, 224, 224, generator=g),)
    else:
        raise SystemExit(f"gpu_models: unknown model {name}")
    torch.manual_seed(0)
    return export_zoo.randomize(model).eval(), inputs


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(call, runs, device):
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        synchronize(device)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def torch_side(model, inputs, runs, device):
    """Median seconds of eager and of CUDA-graph replay (None off CUDA), and peak bytes."""
    with torch.no_grad():
        for _ in range(3):
            model(*inputs)
        synchronize(device)
        eager = time_calls(lambda: model(*inputs), runs, device)
        graph_time = None
        if device.type == "cuda":
            graph = torch.cuda.CUDAGraph()
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                model(*inputs)
            torch.cuda.current_stream().wait_stream(stream)
            with torch.cuda.graph(graph):
                model(*inputs)
            graph_time = time_calls(graph.replay, runs, device)
            del graph
            torch.cuda.empty_cache()
        peak = None
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            model(*inputs)
            synchronize(device)
            peak = torch.cuda.max_memory_allocated(device)
    return eager, graph_time, peak


def cleave_side(cleave, path, runs, backend):
    out = subprocess.run([cleave, "run", path, "--backend", backend, "--repeat", str(runs), "--profile", "--json"],
                         capture_output=True, text=True, check=True).stdout
    summary = json.loads(out)
    return summary["timing"]["median_s"], summary.get("peak_device_bytes"), summary["host_device_copies"]


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def compare(cleave, name, args, device, tmp):
    model, inputs = make_model(name, args.batch)
    path = os.path.join(tmp, f"{name}.onnx")
    export_zoo.export_onnx(model, inputs, path, 17, ["x"])
    model, inputs = model.to(device), tuple(t.to(device) for t in inputs)
    backend = "aten-cuda" if device.type == "cuda" else "aten-cpu"
    rounds = []
    for _ in range(args.rounds):
        eager, graph_time, torch_peak = torch_side(model, inputs, args.runs, device)
        ours, our_peak, copies = cleave_side(cleave, path, args.runs, backend)
        rounds.append({"torch_eager_s": eager, "torch_cuda_graph_s": graph_time, "cleave_s": ours,
                       "torch_peak_bytes": torch_peak, "cleave_peak_bytes": our_peak, "host_device_copies": copies})
        print(f"{name}: torch {eager * 1e3:.3f} ms, cleave {ours * 1e3:.3f} ms", flush=True)
    result = {"model": name, "batch": args.batch, "rounds": rounds,
              "cleave_over_eager": spread([r["cleave_s"] / r["torch_eager_s"] for r in rounds])}
    if device.type == "cuda":
        result["cleave_over_cuda_graph"] = spread([r["cleave_s"] / r["torch_cuda_graph_s"] for r in rounds])
        result["peak_ratio"] = rounds[-1]["cleave_peak_bytes"] / rounds[-1]["torch_peak_bytes"]
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def cell(value, digits=3):
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(results, device_name):
    lines = [f"device: {device_name}; PyTorch {torch.__version__}", "",
             "| model | batch | torch eager ms | torch CUDA graph ms | cleave ms | cleave/eager (median, range) "
             "| cleave/graph | peak cleave/torch | copies |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        rounds = r["rounds"]
        eager = statistics.median(x["torch_eager_s"] for x in rounds) * 1e3
        graphs = [x["torch_cuda_graph_s"] for x in rounds if x["torch_cuda_graph_s"]]
        graph = statistics.median(graphs) * 1e3 if graphs else None
        ours = statistics.median(x["cleave_s"] for x in rounds) * 1e3
        ratio = r["cleave_over_eager"]
        over_graph = r.get("cleave_over_cuda_graph", {}).get("median")
        lines.append(f"| {r['model']} | {r['batch']} | {eager:.3f} | {cell(graph)} | {ours:.3f} | "
                     f"{ratio['median']:.2f} ({ratio['min']:.2f}-{ratio['max']:.2f}) | {cell(over_graph, 2)} | "
                     f"{cell(r.get('peak_ratio'), 2)} | {rounds[-1]['host_device_copies']} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cleave")
    parser.add_argument("out_dir")
    parser.add_argument("--models", default="bert_base,resnet50,vit_b_16")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("gpu_models: torch sees no CUDA device")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    os.makedirs(args.out_dir, exist_ok=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            try:
                results.append(compare(os.path.abspath(args.cleave), name, args, device, tmp))
            except ImportError as e:  # torchvision absent: the model is named as not run
                print(f"{name}: not run ({e})", flush=True)
    with open(os.path.join(args.out_dir, "gpu_models.json"), "w") as f:
        json.dump({"device": device_name, "torch": torch.__version__, "results": results}, f, indent=1)
    text = markdown(results, device_name)
    with open(os.path.join(args.out_dir, "gpu_models.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
