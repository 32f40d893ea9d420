"""cleave's bridge to PyTorch FX (PyTorch 2.x: scripts/setup's .venv/bin/python3).

    from cleave_fx import export_graph
    export_graph(gm, example_inputs, "model.fx.json")

export_graph runs ShapeProp on `gm` with `example_inputs` and writes every node of
`gm.graph` in the cleave FX-graph JSON schema (docs/fx-graph-json.md), which `cleave`
reads like an ONNX model: `cleave inspect model.fx.json`.

Command line (for tests, benchmarks and examples):
    python3 tools/cleave_fx.py family FAMILY N -o FILE      # a graph of shared/bench/reference/graphs.py
    python3 tools/cleave_fx.py torchvision MODEL -o FILE    # resnet18, mobilenet_v2, ... (random weights)
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.fx as fx
from torch.fx.passes.shape_prop import ShapeProp, TensorMetadata
from torch.fx.node import _get_qualified_name
from torch.fx.passes.tools_common import get_node_target
from torch.distributed.pipelining import pipe_split
from torch.utils._python_dispatch import TorchDispatchMode

SCHEMA = "cleave.fx_graph"
SCHEMA_VERSION = 1


class _RecordPipeSplits(TorchDispatchMode):
    """Records each torch.distributed.pipelining.pipe_split() call met while `tracer` traces.

    pipe_split() runs the operator pippy::_pipe_split, which takes no tensor, so symbolic tracing
    (which follows Proxy arguments) would not see it; torch.export keeps it, and so does this
    dispatch mode: the call becomes a call_function node of pipe_split, which `cleave pipeline`
    cuts at (and which does nothing when the traced module runs)."""

    def __init__(self, tracer):
        super().__init__()
        self.tracer = tracer

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.pippy._pipe_split.default:
            self.tracer.create_proxy("call_function", pipe_split, (), {})
            return None
        return func(*args, **(kwargs or {}))


def symbolic_trace(module):
    """torch.fx.symbolic_trace that also records pipe_split() markers."""
    tracer = torch.fx.Tracer()
    with _RecordPipeSplits(tracer):
        graph = tracer.trace(module)
    return torch.fx.GraphModule(tracer.root, graph, type(module).__name__)


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def _encode_arg(value):
    """args/kwargs as JSON; node references become {"node": name}."""
    if isinstance(value, fx.Node):
        return {"node": value.name}
    if isinstance(value, list):
        return [_encode_arg(v) for v in value]
    if isinstance(value, tuple):
        return {"tuple": [_encode_arg(v) for v in value]}
    if isinstance(value, dict):
        return {"dict": {str(k): _encode_arg(v) for k, v in value.items()}}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, slice):
        return {"slice": [_encode_arg(value.start), _encode_arg(value.stop), _encode_arg(value.step)]}
    if isinstance(value, torch.dtype):
        return {"dtype": _dtype_name(value)}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    return {"repr": repr(value)}


def _tensor_value(meta):
    shape = [int(d) for d in meta.shape]
    return {"kind": "tensor", "dtype": _dtype_name(meta.dtype), "shape": shape}


def _encode_value(node):
    """What the node produces, from ShapeProp's tensor_meta and type."""
    meta = node.meta.get("tensor_meta")
    py_type = node.meta.get("type")
    type_name = py_type.__name__ if isinstance(py_type, type) else ""
    if isinstance(meta, TensorMetadata):
        return _tensor_value(meta)
    if meta is not None and isinstance(meta, (list, tuple, dict)):
        items = meta.values() if isinstance(meta, dict) else meta
        elements = [_tensor_value(m) if isinstance(m, TensorMetadata) else {"kind": "other"} for m in items]
        return {"kind": "sequence", "python_type": type_name or type(meta).__name__, "elements": elements}
    if py_type is torch.Size:
        return {"kind": "shape", "python_type": "Size"}
    if py_type in (int, float, bool):
        return {"kind": "scalar", "python_type": type_name}
    if py_type is type(None):
        return {"kind": "none", "python_type": "NoneType"}
    if py_type in (tuple, list):
        return {"kind": "sequence", "python_type": type_name, "elements": []}
    if py_type is None:
        return {"kind": "unknown"}
    return {"kind": "other", "python_type": type_name}


def _tensor_entry(name, tensor, is_buffer):
    return {"name": name, "dtype": _dtype_name(tensor.dtype), "shape": [int(d) for d in tensor.shape],
            "bytes": int(tensor.numel() * tensor.element_size()), "buffer": is_buffer}


def _parameters_of(gm, node):
    """Tensors the node owns: a call_module's weights and buffers, a get_attr's tensor."""
    if node.op == "call_module":
        module = gm.get_submodule(node.target)
        entries = [_tensor_entry(f"{node.target}.{n}", p, False) for n, p in module.named_parameters()]
        entries += [_tensor_entry(f"{node.target}.{n}", b, True) for n, b in module.named_buffers()]
        return entries
    if node.op == "get_attr":
        owner_path, _, attr = node.target.rpartition(".")
        owner = gm.get_submodule(owner_path) if owner_path else gm
        value = getattr(owner, attr)
        if isinstance(value, torch.Tensor):
            is_buffer = attr in dict(owner.named_buffers(recurse=False))
            return [_tensor_entry(node.target, value, is_buffer)]
    return []


def _target_text(node):
    if isinstance(node.target, str):
        return node.target
    return _get_qualified_name(node.target)


def _is_embedding_module(gm, target):
    """torch's sparse_nn test (Partitioner.is_embedding_node): some module on the target's path
    prints as containing 'Embedding'."""
    module = gm
    for atom in str(target).split("."):
        module = getattr(module, atom)
        if "Embedding" in str(module):
            return True
    return False


def _scope_of(node):
    if node.op == "call_module":
        return node.target
    if node.op == "get_attr":
        return node.target.rpartition(".")[0]
    return ""


def graph_to_json(gm, example_inputs):
    """The schema's dict for `gm` after shape propagation with `example_inputs`."""
    if example_inputs is not None:
        ShapeProp(gm).propagate(*example_inputs)
    submodules = dict(gm.named_modules())
    nodes = []
    for node in gm.graph.nodes:
        entry = {"name": node.name, "op": node.op, "target": _target_text(node)}
        if node.op in ("call_function", "call_module", "call_method"):
            entry["op_target"] = get_node_target(submodules, node)
        if node.op == "call_module":
            entry["module_class"] = torch.typename(submodules[node.target])
            if _is_embedding_module(gm, node.target):
                entry["embedding"] = True
        entry["scope"] = _scope_of(node)
        entry["args"] = _encode_arg(list(node.args))
        entry["kwargs"] = _encode_arg(dict(node.kwargs))["dict"]
        entry["inputs"] = [n.name for n in node.all_input_nodes]
        entry["users"] = [u.name for u in node.users]
        if node.op != "output":
            entry["value"] = _encode_value(node)
        params = _parameters_of(gm, node)
        if params:
            entry["parameters"] = params
        nodes.append(entry)
    return {"schema": SCHEMA, "version": SCHEMA_VERSION, "torch_version": torch.__version__,
            "graph_name": type(gm).__name__, "nodes": nodes}


def export_graph(gm, example_inputs, path):
    """Runs ShapeProp and writes `gm`'s graph to `path` (cleave FX-graph JSON), atomically."""
    data = graph_to_json(gm, example_inputs)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=None, separators=(",", ":"))
        f.write("\n")
    os.replace(tmp, path)
    return data


def apply_split(gm, out_dir, return_tuple=False):
    """Splits `gm` as `cleave split graph.fx.json ... -o out_dir` decided, with torch's own
    split_by_tags: reads out_dir/assignment.json (node name -> submodule tag), tags the callable
    nodes and returns the split GraphModule (one child module per tag, in plan order).
    return_tuple=True makes every submodule return a tuple, also for one output (split_by_tags'
    return_tuple)."""
    from torch.fx.passes.split_utils import split_by_tags
    with open(os.path.join(out_dir, "assignment.json")) as f:
        assignment = json.load(f)
    if assignment.get("schema") != "cleave.fx_assignment" or assignment.get("version") != 1:
        raise ValueError(f"{out_dir}/assignment.json is not a cleave FX assignment (version 1)")
    tags = assignment["tags"]
    names = assignment["nodes"]
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_module", "call_method"):
            if node.name not in names:
                raise ValueError(f"node '{node.name}' has no submodule in {out_dir}/assignment.json")
            node.tag = names[node.name]
    return split_by_tags(gm, tags, return_tuple=return_tuple)


def _reference_graphs():
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "..", "..", "shared", "bench", "reference"),
                      os.path.join(here, "..", "shared", "bench", "reference")):
        if os.path.exists(os.path.join(candidate, "graphs.py")):
            sys.path.insert(0, os.path.abspath(candidate))
            import graphs
            return graphs
    raise SystemExit("cleave_fx: cannot find shared/bench/reference/graphs.py")


def torchvision_model(name):
    import torchvision
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    size = 224
    return fx.symbolic_trace(model), (torch.randn(1, 3, size, size),)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    fam = sub.add_parser("family", help="export a graph family of graphs.py")
    fam.add_argument("family")
    fam.add_argument("n", type=int)
    fam.add_argument("-o", "--output", required=True)
    tv = sub.add_parser("torchvision", help="export a torchvision model (random weights)")
    tv.add_argument("model")
    tv.add_argument("-o", "--output", required=True)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    if args.command == "family":
        families = _reference_graphs().FAMILIES
        if args.family not in families:
            raise SystemExit(f"cleave_fx: unknown family '{args.family}' (known: {', '.join(families)})")
        gm, inputs = families[args.family](args.n)
    else:
        gm, inputs = torchvision_model(args.model)
    with torch.no_grad():
        export_graph(gm, inputs, args.output)


if __name__ == "__main__":
    main()
