"""cleave on a GPU against PyTorch on the same GPU, in one run: whole models' forward time and
peak device memory, and a split's predicted host-device copy time against the measured.

    python3 bench/gpu_models.py CLEAVE OUT_DIR [--models resnet50,bert_base,bert_base:1,vit_b_16] [--batch 8]
                                [--precisions fp32,fp16] [--runs 20] [--rounds 2] [--device cuda]
                                [--no-compile] [--seam-profile examples/profiles/gpu.json]
                                [--pipeline bert_base:4]

For each model (NAME or NAME:BATCH, the batch overriding --batch): the PyTorch module
(tools/export_zoo.py's, random weights) is exported to ONNX (TorchScript exporter, static shapes),
then, per precision and round by round, alternately:
  - PyTorch eager: --runs forwards under no_grad, synchronized, the median; fp16: each forward
    under torch.autocast(device, dtype=torch.float16), cleave with `--precision fp16` (both cast
    the weights per forward);
  - PyTorch eager replayed as one CUDA graph (torch.cuda.graphs), the median;
  - torch.compile(mode="reduce-overhead") (Inductor's kernels replayed as CUDA graphs), compiled
    once before the first round, the median, in fp32 and at a model's first batch only (about a
    minute each: the whole call fits scripts/gpu-check's four minutes; --no-compile leaves it out);
  - `cleave run MODEL --backend aten-cuda --repeat RUNS --profile --inputs-on-device --json`: its
    median, its peak device bytes and host-device copies;
  - `cleave run MODEL --backend aten-cuda --repeat RUNS --graph-replay --inputs-on-device --json`: its
    median (each input shape recorded once as a CUDA graph, then replayed), or the reason it ran
    eagerly.
Both sides' inputs are on the device before the timed runs (--inputs-on-device: cleave does not
copy them from host memory each run, as PyTorch's timing does not).
Ratios are cleave / PyTorch per round, reported as median and range over rounds; peak memory is
cleave's `peak_device_bytes` against torch.cuda.max_memory_allocated for one forward (parameters
included on both sides), PyTorch's taken before its CUDA graphs and compilation hold memory. TF32 off on both sides (PyTorch's default for products; set for
convolutions too).

Seams: the model split by --seam-profile (an accelerator that leaves some ops to the CPU), whose
`split --preview` predicts the bytes its accelerator submodules receive and send and, at the host
link's bandwidth, their time; the cut then runs with `--profile`, which times its moves between
devices (seam_copy_s, each device waited for around them). The link's bandwidth is measured here
(PyTorch copying 64 MiB from pageable host memory to the device) and given to the preview.
Pipeline (--pipeline NAME:STAGES, '' for none): the model cut into STAGES balanced stages
(`cleave pipeline`) and run whole on the one device, each stage its own module (--no-join), against
the uncut model in the same round: what a stage boundary costs on a GPU.
Writes OUT_DIR/gpu_models.json and OUT_DIR/gpu_models.md.

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


PRECISION_TYPES = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}


def model_spec(entry, default_batch):
    """("bert_base", 1) from "bert_base:1"; the default batch where none is given."""
    name, _, batch = entry.partition(":")
    return name, int(batch) if batch else default_batch


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


def compiled_side(model, inputs, device):
    """torch.compile(mode="reduce-overhead") of the model, warmed up (its compilation and CUDA-graph
    recording done), or the error that stopped it as a string."""
    if device.type != "cuda":
        return None, "no CUDA"
    try:
        compiled = torch.compile(model, mode="reduce-overhead")
        with torch.no_grad():
            for _ in range(3):
                compiled(*inputs)
        synchronize(device)
        return compiled, None
    except Exception as e:  # noqa: BLE001 - a compiler failure is a result to report, not a crash
        return None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def compiled_time(compiled, inputs, runs, device):
    if compiled is None:
        return None
    with torch.no_grad():
        return time_calls(lambda: compiled(*inputs), runs, device)


def torch_peak(model, inputs, device):
    """torch.cuda.max_memory_allocated over one forward (None off CUDA), taken before any CUDA graph
    or torch.compile holds memory of its own (their pools count as allocated while they live)."""
    if device.type != "cuda":
        return None
    with torch.no_grad():
        model(*inputs)
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        model(*inputs)
        synchronize(device)
    return torch.cuda.max_memory_allocated(device)


class Precision:
    """torch.autocast for fp16/bf16 on `device`, nothing for fp32: torch's side of --precision."""

    def __init__(self, name, device):
        self.half = PRECISION_TYPES[name]
        self.device = device

    def __call__(self):
        if self.half is None:
            return torch.autocast(self.device.type, enabled=False)
        return torch.autocast(self.device.type, dtype=self.half)


def torch_side(model, inputs, runs, device, precision):
    """Median seconds of eager and of CUDA-graph replay (None off CUDA), each forward in its own
    `precision` scope, as an inference loop calls a model under autocast (its weight casts made per
    forward, as cleave's are; a scope around many forwards would cast each weight once)."""
    def forward():
        with precision():
            return model(*inputs)
    with torch.no_grad():
        for _ in range(3):
            forward()
        synchronize(device)
        eager = time_calls(forward, runs, device)
        graph_time = None
        if device.type == "cuda":
            graph = torch.cuda.CUDAGraph()
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                forward()
            torch.cuda.current_stream().wait_stream(stream)
            with torch.cuda.graph(graph):
                forward()
            graph_time = time_calls(graph.replay, runs, device)
            del graph
            torch.cuda.empty_cache()
    return eager, graph_time


def cleave_json(cleave, *args):
    proc = subprocess.run([cleave, *map(str, args), "--json"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"cleave {' '.join(map(str, args))}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def cleave_side(cleave, path, runs, backend, precision, *flags):
    summary = cleave_json(cleave, "run", path, "--backend", backend, "--repeat", runs, "--profile", "--inputs-on-device",
                          "--precision", precision, *flags)
    return summary["timing"]["median_s"], summary.get("peak_device_bytes"), summary["host_device_copies"]


def cleave_replayed(cleave, path, runs, backend, precision):
    """(median seconds, None) with --graph-replay, or (None, why) where it is not run or refused."""
    if backend != "aten-cuda":
        return None, "no CUDA"
    summary = cleave_json(cleave, "run", path, "--backend", backend, "--repeat", runs, "--graph-replay",
                          "--inputs-on-device", "--precision", precision)
    replay = summary["graph_replay"]
    return summary["timing"]["median_s"], replay.get("refusal") if replay["refused"] else None


def link_bytes_per_second(device):
    """PyTorch's copy of 64 MiB from pageable host memory to the device, bytes per second (best of 5)."""
    if device.type != "cuda":
        return None
    host = torch.empty(64 << 20, dtype=torch.uint8).fill_(1)
    best = float("inf")
    for _ in range(5):
        synchronize(device)
        start = time.perf_counter()
        host.to(device)
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return host.numel() / best


def seams(cleave, path, profile, backend, link, tmp):
    """The split's predicted seam bytes and seconds (split --preview at `link` bytes/s) against the
    cut's measured moves between devices (run --profile, the median of 5 runs' last)."""
    cut = os.path.join(tmp, os.path.basename(path) + ".split")
    args = ["split", path, "--profile", profile, "-o", cut, "--preview"]
    if link:
        args += ["--pcie-gbps", link / (1 << 30)]
    report = cleave_json(cleave, *args)
    acc = [s for s in report["subgraphs"] if s["role"] == "acc"]
    predicted_bytes = sum(s["input_bytes"] + s["output_bytes"] for s in acc)
    run = cleave_json(cleave, "run", cut, "--backend", backend, "--repeat", 5, "--profile")
    return {"profile": os.path.basename(profile), "acc_subgraphs": report["acc_subgraphs"],
            "cpu_subgraphs": report["cpu_subgraphs"], "link_bytes_per_s": report["pcie_bytes_per_sec"],
            "predicted_bytes": predicted_bytes, "predicted_s": predicted_bytes / report["pcie_bytes_per_sec"],
            "measured_copies": run["seam_copies"], "measured_bytes": run["seam_copy_bytes"],
            "measured_s": run["seam_copy_s"]}


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def exported(name, batch, tmp):
    """(module, inputs, ONNX path) of `name` at `batch`, exported once per run (the pipeline row
    reuses the model rows' export)."""
    model, inputs = make_model(name, batch)
    path = os.path.join(tmp, f"{name}_{batch}.onnx")
    if not os.path.exists(path):
        export_zoo.export_onnx(model, inputs, path, 17, ["x"])
    return model, inputs, path


def compare(cleave, entry, args, device, tmp):
    """One result per precision in --precisions for the --models entry."""
    name, batch = model_spec(entry, args.batch)
    model, inputs, path = exported(name, batch, tmp)
    model, inputs = model.to(device), tuple(t.to(device) for t in inputs)
    # torch.compile takes about a minute a model: once per model, at the first batch it is asked at.
    compile_here = args.compile and name not in args.compiled
    args.compiled.add(name)
    results = []
    for precision in args.precisions.split(","):
        results.append(compare_at(cleave, name, batch, model, inputs, path, precision, args, device, compile_here))
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return results


def compare_at(cleave, name, batch, model, inputs, path, precision, args, device, compile_here):
    backend = "aten-cuda" if device.type == "cuda" else "aten-cpu"
    autocast = Precision(precision, device)
    with autocast():
        torch_peak_bytes = torch_peak(model, inputs, device)
    # torch.compile in fp32 only: its autocast graphs are a study of their own.
    compiled, compile_error = compiled_side(model, inputs, device) if compile_here and precision == "fp32" else \
        (None, "not asked" if precision == "fp32" and not args.compile else None)
    rounds, refusal = [], None
    for _ in range(args.rounds):
        eager, graph_time = torch_side(model, inputs, args.runs, device, autocast)
        compile_time = compiled_time(compiled, inputs, args.runs, device)
        ours, our_peak, copies = cleave_side(cleave, path, args.runs, backend, precision)
        replayed, refusal = cleave_replayed(cleave, path, args.runs, backend, precision)
        rounds.append({"torch_eager_s": eager, "torch_cuda_graph_s": graph_time, "torch_compile_s": compile_time,
                       "cleave_s": ours, "cleave_replay_s": None if refusal else replayed,
                       "torch_peak_bytes": torch_peak_bytes, "cleave_peak_bytes": our_peak, "host_device_copies": copies})
        print(f"{name} (batch {batch}, {precision}): torch {eager * 1e3:.3f} ms, cleave {ours * 1e3:.3f} ms"
              + (f", torch graph {graph_time * 1e3:.3f} ms, cleave replay {replayed * 1e3:.3f} ms"
                 if graph_time and replayed else ""), flush=True)
    del compiled
    result = {"model": name, "batch": batch, "precision": precision, "rounds": rounds,
              "cleave_over_eager": spread([r["cleave_s"] / r["torch_eager_s"] for r in rounds])}
    if compile_error:
        result["torch_compile_error"] = compile_error
    if refusal:
        result["cleave_replay_refusal"] = refusal
    if device.type == "cuda":
        result["cleave_over_cuda_graph"] = spread([r["cleave_s"] / r["torch_cuda_graph_s"] for r in rounds])
        replays = [r for r in rounds if r["cleave_replay_s"]]
        if replays:
            result["replay_over_cuda_graph"] = spread([r["cleave_replay_s"] / r["torch_cuda_graph_s"] for r in replays])
            if all(r["torch_compile_s"] for r in replays):
                result["replay_over_compile"] = spread([r["cleave_replay_s"] / r["torch_compile_s"] for r in replays])
        result["peak_ratio"] = rounds[-1]["cleave_peak_bytes"] / rounds[-1]["torch_peak_bytes"]
    if args.seam_profile and precision == "fp32":
        try:
            result["seams"] = seams(cleave, path, args.seam_profile, backend, args.link, os.path.dirname(path))
        except RuntimeError as e:
            result["seams"] = {"error": str(e)}
    return result


def pipeline(cleave, entry, args, device, tmp):
    """The model cut into STAGES pipeline stages, run on the one device stage by stage (--no-join),
    against the uncut model, round by round: medians and the ratio's spread."""
    name, stages = entry.split(":")
    backend = "aten-cuda" if device.type == "cuda" else "aten-cpu"
    path = exported(name, args.batch, tmp)[2]
    cut = os.path.join(tmp, f"{name}_pipeline")
    cleave_json(cleave, "pipeline", path, "--stages", stages, "-o", cut)
    rounds = []
    for _ in range(args.rounds):
        whole = cleave_side(cleave, path, args.runs, backend, "fp32")[0]
        staged = cleave_side(cleave, cut, args.runs, backend, "fp32", "--no-join")[0]
        rounds.append({"whole_s": whole, "stages_s": staged})
        print(f"{name} in {stages} stages: {staged * 1e3:.3f} ms, whole {whole * 1e3:.3f} ms", flush=True)
    return {"model": name, "batch": args.batch, "stages": int(stages), "rounds": rounds,
            "stages_over_whole": spread([r["stages_s"] / r["whole_s"] for r in rounds])}


def cell(value, digits=3):
    return "-" if value is None else f"{value:.{digits}f}"


def median_ms(rounds, key):
    values = [x[key] for x in rounds if x.get(key)]
    return statistics.median(values) * 1e3 if values else None


def ratio_cell(r, key):
    ratio = r.get(key)
    return "-" if not ratio else f"{ratio['median']:.2f} ({ratio['min']:.2f}-{ratio['max']:.2f})"


def markdown(results, device_name, link):
    lines = [f"device: {device_name}; PyTorch {torch.__version__}; host-to-device link (pageable, 64 MiB): "
             + (f"{link / 1e9:.1f} GB/s" if link else "-"), "",
             "| model | batch | precision | torch eager ms | torch CUDA graph ms | torch.compile ms | cleave ms "
             "| cleave replay ms | cleave/eager | replay/graph | replay/compile | peak cleave/torch | copies |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        if "stages" in r:
            continue
        rounds = r["rounds"]
        lines.append(f"| {r['model']} | {r['batch']} | {r['precision']} | {cell(median_ms(rounds, 'torch_eager_s'))} | "
                     f"{cell(median_ms(rounds, 'torch_cuda_graph_s'))} | {cell(median_ms(rounds, 'torch_compile_s'))} | "
                     f"{cell(median_ms(rounds, 'cleave_s'))} | {cell(median_ms(rounds, 'cleave_replay_s'))} | "
                     f"{ratio_cell(r, 'cleave_over_eager')} | {ratio_cell(r, 'replay_over_cuda_graph')} | "
                     f"{ratio_cell(r, 'replay_over_compile')} | {cell(r.get('peak_ratio'), 2)} | "
                     f"{rounds[-1]['host_device_copies']} |")
    notes = [f"- {r['model']}: torch.compile: {r['torch_compile_error']}" for r in results if r.get("torch_compile_error")]
    notes += [f"- {r['model']} ({r['precision']}): cleave --graph-replay not replayed: {r['cleave_replay_refusal']}"
              for r in results if "cleave_replay_refusal" in r]
    staged = [r for r in results if "stages" in r]
    if staged:
        lines += ["", "| model | batch | stages | whole ms | stages ms | stages/whole |", "| --- | --- | --- | --- | --- | --- |"]
        for r in staged:
            lines.append(f"| {r['model']} | {r['batch']} | {r['stages']} | {cell(median_ms(r['rounds'], 'whole_s'))} | "
                         f"{cell(median_ms(r['rounds'], 'stages_s'))} | {ratio_cell(r, 'stages_over_whole')} |")
    seam_rows = [r for r in results if "seams" in r]
    if seam_rows:
        lines += ["", "| model | split by | acc/cpu submodules | predicted bytes | predicted ms | measured copies "
                  "| measured bytes | measured ms |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in seam_rows:
            s = r["seams"]
            if "error" in s:
                notes.append(f"- {r['model']}: seams not measured: {s['error']}")
                continue
            lines.append(f"| {r['model']} | {s['profile']} | {s['acc_subgraphs']}/{s['cpu_subgraphs']} | "
                         f"{s['predicted_bytes']} | {s['predicted_s'] * 1e3:.3f} | {s['measured_copies']} | "
                         f"{s['measured_bytes']} | {s['measured_s'] * 1e3:.3f} |")
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cleave")
    parser.add_argument("out_dir")
    parser.add_argument("--models", default="resnet50,bert_base,bert_base:1,vit_b_16",
                        help="NAME or NAME:BATCH, comma-separated")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--precisions", default="fp32,fp16", help="fp32, fp16, bf16, comma-separated")
    parser.add_argument("--pipeline", default="bert_base:4",
                        help="NAME:STAGES: the model cut into stages on the one device against it whole ('' for none)")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--no-compile", dest="compile", action="store_false",
                        help="leave torch.compile's column out (its compilation takes a minute a model)")
    parser.add_argument("--seam-profile", default=os.path.join(HERE, "..", "examples", "profiles", "gpu.json"),
                        help="the support profile that splits each model for the seam comparison ('' for none)")
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
    args.link = link_bytes_per_second(device)
    args.compiled = set()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for entry in args.models.split(","):
            try:
                results.extend(compare(os.path.abspath(args.cleave), entry, args, device, tmp))
            except ImportError as e:  # torchvision absent: the model is named as not run
                print(f"{entry}: not run ({e})", flush=True)
            write(args.out_dir, results, device_name, args.link)  # after each model: a time limit keeps the rest
        if args.pipeline:
            results.append(pipeline(os.path.abspath(args.cleave), args.pipeline, args, device, tmp))
            write(args.out_dir, results, device_name, args.link)
    print(markdown(results, device_name, args.link))


def write(out_dir, results, device_name, link):
    with open(os.path.join(out_dir, "gpu_models.json"), "w") as f:
        json.dump({"device": device_name, "torch": torch.__version__, "link_bytes_per_s": link,
                   "results": results}, f, indent=1)
    with open(os.path.join(out_dir, "gpu_models.md"), "w") as f:
        f.write(markdown(results, device_name, link))


if __name__ == "__main__":
    main()
