"""Tells cleave which of an ONNX export's tensors a PyTorch module trains.

ONNX does not tell a module's parameters from its registered buffers: both are initializers, and
`cleave train` would train a buffer (a rotary table, an attention mask, a frozen embedding) like a
weight. Run this beside the export to list them in the model's metadata (the entry
`cleave.fixed_parameters`, io/fixed_parameters.h; docs/distributed.md, "What trains"):

    import sys; sys.path.insert(0, "tools")
    from cleave_onnx import list_fixed_tensors
    torch.onnx.export(module, args, "model.onnx", dynamo=False, do_constant_folding=False, ...)
    list_fixed_tensors("model.onnx", module)

Every named buffer is listed as "buffer", every parameter with requires_grad=False as "frozen".
Names are the module's own (named_buffers / named_parameters), which the TorchScript exporter
keeps for initializers when constant folding is off; a listed name the model lacks is skipped.
"""
import json

import onnx

KEY = "cleave.fixed_parameters"


def fixed_tensors(module):
    """{name: "buffer" | "frozen"} for `module`, sorted by name."""
    fixed = {name: "buffer" for name, _ in module.named_buffers()}
    fixed.update({name: "frozen" for name, p in module.named_parameters() if not p.requires_grad})
    return dict(sorted(fixed.items()))


def list_fixed_tensors(path, module):
    """Writes the metadata entry for `module` into the ONNX model at `path` (in place)."""
    model = onnx.load(path, load_external_data=False)
    entry = json.dumps({"version": 1, "buffers_listed": True, "fixed": fixed_tensors(module)})
    kept = [p for p in model.metadata_props if p.key != KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    model.metadata_props.add(key=KEY, value=entry)
    onnx.save(model, path)
