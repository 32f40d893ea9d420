"""ONNX Runtime (PyPI `onnxruntime`) as the independent oracle of cleave's tests and benchmarks.

    python3 onnxruntime_oracle.py run MODEL.onnx INPUTS.json OUTPUTS.json [--repeat N]
    python3 onnxruntime_oracle.py plan MODEL.onnx OUT_DIR INPUTS.json

Tensor files are cleave's ({"name": {"dtype", "dims", "data"}}, runtime/engine/tensors.h).

run:  runs MODEL once on INPUTS and writes every graph output to OUTPUTS. With --repeat N it then
      times N more runs of the same session and prints {"median_s": ..., "min_s": ...} on one line
      (the first run is the warm-up).
plan: runs MODEL, then the submodels of OUT_DIR/plan.json in plan order, each fed by name from the
      graph inputs and earlier submodels' outputs, and prints one JSON line: per graph output the
      element count, max absolute and max relative error between the two runs.

The session is ONNX Runtime's default for Python users: the CPU execution provider, every graph
optimization, default intra-op threads (one per core). Errors are one line on stderr, exit 1.
"""
import json
import os
import sys
import time

import numpy as np
import onnxruntime as ort

# cleave's dtype names are numpy's, but for strings (numpy holds them as Python objects).
_NUMPY_TYPES = {"float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "uint16",
                "uint32", "uint64", "bool"}


def array_of(spec):
    """A numpy array from one tensor of a cleave tensor file."""
    dtype = spec.get("dtype", "float32")
    if dtype == "string":
        return np.array(spec["data"], dtype=object).reshape(spec["dims"])
    if dtype not in _NUMPY_TYPES:
        raise ValueError(f"dtype '{dtype}' is not one of cleave's tensor file types")
    return np.array(spec["data"], dtype=dtype).reshape(spec["dims"])


def spec_of(array):
    """One tensor of a cleave tensor file from a numpy array (or scalar)."""
    array = np.asarray(array)
    dtype = "string" if array.dtype == object or array.dtype.kind in "US" else array.dtype.name
    data = [str(v) for v in array.flatten()] if dtype == "string" else array.flatten().tolist()
    return {"dtype": dtype, "dims": list(array.shape), "data": data}


def read_tensors(path):
    with open(path) as f:
        return {name: array_of(spec) for name, spec in json.load(f).items()}


def write_tensors(path, arrays):
    with open(path, "w") as f:
        json.dump({name: spec_of(value) for name, value in arrays.items()}, f)


def session_for(model_path):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])


def feeds_for(session, values, where):
    feeds = {}
    for graph_input in session.get_inputs():
        if graph_input.name not in values:
            raise ValueError(f"{where}: no value for input '{graph_input.name}'")
        feeds[graph_input.name] = values[graph_input.name]
    return feeds


def run_session(session, feeds):
    """The session's outputs by name, on exactly its inputs (feeds_for)."""
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def run_model(model_path, values):
    """Every graph output of the model on `values` (a dict of numpy arrays), by name."""
    session = session_for(model_path)
    return run_session(session, feeds_for(session, values, model_path))


def time_runs(session, feeds, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    times.sort()
    return {"median_s": times[len(times) // 2], "min_s": times[0]}


def plan_errors(model_path, out_dir, values):
    """The original model against its submodels run in plan order: errors per graph output."""
    reference = run_model(model_path, values)
    with open(os.path.join(out_dir, "plan.json")) as f:
        plan = json.load(f)
    known = dict(values)
    for sub in plan["submodules"]:
        results = run_model(os.path.join(out_dir, sub["file"]), known)
        for name in sub["outputs"]:
            known[name] = results[name]
    report = {"submodules": len(plan["submodules"]), "outputs": {}}
    for output in plan["outputs"]:
        name = output["value"]
        want = np.asarray(reference[name], dtype=np.float64).ravel()
        got = np.asarray(known[name], dtype=np.float64).ravel()
        if want.size != got.size:
            raise ValueError(f"output {name}: {got.size} elements, expected {want.size}")
        diff = np.abs(want - got)
        report["outputs"][name] = {
            "elements": int(want.size),
            "max_abs": float(diff.max(initial=0.0)),
            "max_rel": float((diff / np.maximum(np.abs(want), 1e-12)).max(initial=0.0)),
        }
    return report


def main(argv):
    usage = ("usage: onnxruntime_oracle.py run MODEL INPUTS OUTPUTS [--repeat N]\n"
             "       onnxruntime_oracle.py plan MODEL OUT_DIR INPUTS")
    if len(argv) >= 4 and argv[0] == "run" and (len(argv) == 4 or (len(argv) == 6 and argv[4] == "--repeat")):
        model, inputs, outputs = argv[1:4]
        session = session_for(model)
        feeds = feeds_for(session, read_tensors(inputs), model)
        write_tensors(outputs, run_session(session, feeds))
        if len(argv) == 6:
            print(json.dumps(time_runs(session, feeds, int(argv[5]))))
        return 0
    if len(argv) == 4 and argv[0] == "plan":
        model, out_dir, inputs = argv[1:4]
        print(json.dumps(plan_errors(model, out_dir, read_tensors(inputs))))
        return 0
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception as error:  # one line for any failure: the caller shows stderr as the reason
        print(f"onnxruntime_oracle: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}",
              file=sys.stderr)
        sys.exit(1)
