"""The bad-input catalogue (run by run_bad_inputs.py). One Case per input; `kind` groups them by
the input they attack. Each case builds its inputs in a fresh sandbox:

  sandbox/models/   the model's folder (inputs live here)
  sandbox/work/     the working directory cleave runs in
  sandbox/outside/  files no input may make cleave read (secret.bin), or write
  sandbox/home/     $HOME

argv entries are formatted with {models}, {work}, {outside}, {home} and {examples}.
"""
import json
import os
import shutil
import stat
import subprocess
import sys

import onnx
from onnx import TensorProto, helper

SOURCE_DIR = os.environ.get("CLEAVE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLES = os.path.join(SOURCE_DIR, "examples")
SECRET = b"SECRET-DATA-" * 4  # 48 bytes: 12 floats


class Sandbox:
    def __init__(self, root):
        self.root = root
        self.models = os.path.join(root, "models")
        self.work = os.path.join(root, "work")
        self.outside = os.path.join(root, "outside")
        self.home = os.path.join(root, "home")
        for d in (self.models, self.work, self.outside, self.home):
            os.makedirs(d)
        with open(os.path.join(self.outside, "secret.bin"), "wb") as f:
            f.write(SECRET)

    def names(self):
        return {"models": self.models, "work": self.work, "outside": self.outside, "home": self.home,
                "examples": EXAMPLES}

    def path(self, name):
        return os.path.join(self.models, name)

    def write(self, name, data):
        with open(self.path(name), "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        return self.path(name)

    def copy_example(self, name, as_name=None):
        shutil.copy(os.path.join(EXAMPLES, name), self.path(as_name or name))

    def save(self, model, name="m.onnx"):
        return self.write(name, model.SerializeToString())

    def cleave(self, *args):
        """Runs cleave during setup (to make a valid plan to tamper with)."""
        import run_bad_inputs
        subprocess.run([run_bad_inputs.CLEAVE, *args], check=True, capture_output=True, cwd=self.work)


# --- model builders ----------------------------------------------------------------------------

def relu_model(opset=13, dims=(2, 3), elem=TensorProto.FLOAT, extra_opsets=()):
    x = helper.make_tensor_value_info("x", elem, list(dims))
    y = helper.make_tensor_value_info("y", elem, list(dims))
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y])
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    return helper.make_model(graph, opset_imports=opsets)


def with_metadata(model_proto, key, value):
    model_proto.metadata_props.add(key=key, value=value)
    return model_proto


def add_model(weight):
    """y = x + w, with `weight` the TensorProto initializer w (shape [12])."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [12])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [12])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g", [x], [y], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def raw_tensor(dims, data):
    """A float initializer 'w' with any dims and raw bytes (onnx.helper checks what we must not)."""
    w = TensorProto()
    w.name = "w"
    w.data_type = TensorProto.FLOAT
    w.dims.extend(dims)
    w.raw_data = data
    return w


def external_weight(location, offset=None, length=None):
    w = TensorProto()
    w.name = "w"
    w.data_type = TensorProto.FLOAT
    w.dims.extend([12])
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            entry = w.external_data.add()
            entry.key, entry.value = key, str(value)
    return w


def chain_model(nodes, inputs=("x",), outputs=("y",), dims=(4,)):
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, list(dims))  # noqa: E731
    graph = helper.make_graph(nodes, "g", [vi(n) for n in inputs], [vi(n) for n in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def batch_held_model():
    """x [4, 6] -> Reshape to the constant [4, 2, 3] (the exported batch of 4 held) -> Relu."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [3], [4, 2, 3])
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["r"], name="held"),
                               helper.make_node("Relu", ["r"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 2, 3])], [shape])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def non_utf8_model():
    """A model whose node and value names hold bytes that are not UTF-8 (protobuf's Python API
    refuses to set them, so same-length placeholders are patched in the serialized bytes)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    nodes = [helper.make_node("Relu", ["x"], ["hQQQQ"], name="nQQQQ"),
             helper.make_node("Neg", ["hQQQQ"], ["y"], name="m")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 13)])
    return model.SerializeToString().replace(b"QQQQ", b"\xff\xfe\x80\xc3")


def nested(depth, leaf="0"):
    return "[" * depth + leaf + "]" * depth


# --- FX JSON edits -------------------------------------------------------------------------------

def fx_example():
    with open(os.path.join(EXAMPLES, "cnn.fx.json")) as f:
        return json.load(f)


def first_with(doc, key):
    return next(n for n in doc["nodes"] if n.get(key))


def fx_case(edit):
    def setup(s):
        doc = fx_example()
        edit(doc)
        s.write("m.fx.json", json.dumps(doc) if not isinstance(doc, str) else doc)
    return setup


def fx_text_case(make_text):
    def setup(s):
        s.write("m.fx.json", make_text(fx_example()))
    return setup



# A torch.export program (fuzz/seeds/pt2_reader: an MLP with a pipe_split marker), its members
# rewritten by `edit(members)`: a dict of member name (without the archive's folder) to bytes.
PT2_SEED = os.path.join(EXAMPLES, "..", "fuzz", "seeds", "pt2_reader", "pipe_split.pt2")


def pt2_case(edit):
    def setup(s):
        import io
        import zipfile
        with zipfile.ZipFile(PT2_SEED) as z:
            folder = z.namelist()[0].split("/")[0] + "/"
            members = {n[len(folder):]: z.read(n) for n in z.namelist()}
        edit(members)
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as z:
            for name, data in members.items():
                z.writestr(folder + name, data)
        s.write("m.pt2", out.getvalue())
    return setup


def program_edit(change):
    """pt2_case's edit of the program's JSON: change(doc) edits the parsed models/model.json."""
    def edit(members):
        doc = json.loads(members["models/model.json"])
        change(doc)
        members["models/model.json"] = json.dumps(doc).encode()
    return edit


def pt2_graph(doc):
    return doc["graph_module"]["graph"]

# --- the cases ------------------------------------------------------------------------------------

class Case:
    def __init__(self, kind, name, setup, argv, message, exit=1, timeout=30, check=None):
        self.kind, self.name, self.setup, self.argv = kind, name, setup, argv
        self.message, self.exit, self.timeout, self.check = message, exit, timeout, check


def nothing(s):
    pass


def model(builder, name="m.onnx"):
    return lambda s: s.save(builder(), name)


def raw(data, name="m.onnx"):
    return lambda s: s.write(name, data)


def both(*setups):
    def setup(s):
        for f in setups:
            f(s)
    return setup


def fifo(name):
    return lambda s: os.mkfifo(s.path(name))


def symlink(target, name):
    return lambda s: os.symlink(target.format(**s.names()), s.path(name))


def example(name, as_name=None):
    return lambda s: s.copy_example(name, as_name)


def profile(text, name="p.json"):
    return lambda s: s.write(name, text)


def split_plan(edit_plan):
    """A real split of the CNN into models/plan, then `edit_plan(plan_dict, sandbox)`."""
    def setup(s):
        s.copy_example("cnn.onnx")
        s.copy_example("profiles/gpu.json", "gpu.json")
        s.cleave("split", s.path("cnn.onnx"), "--profile", s.path("gpu.json"), "-o", s.path("plan"))
        path = os.path.join(s.path("plan"), "plan.json")
        with open(path) as f:
            plan = json.load(f)
        result = edit_plan(plan, s)
        with open(path, "w") as f:
            f.write(result if isinstance(result, str) else json.dumps(plan))
    return setup


def set_first_file(value):
    def edit(plan, s):
        plan["submodules"][0]["file"] = value.format(**s.names())
    return edit


DEVICES_OK = '{"devices": [{"name": "d0", "logical_id": 0, "available_mem_bytes": 100000000}]}'
CNN = "{models}/cnn.onnx"
M = "{models}/m.onnx"


def output_dir_case(name, prepare, out, message, extra=(), exit=1):
    """`cleave split` of the CNN with -o OUT after `prepare(sandbox)`."""
    return Case("output-path", name, both(example("cnn.onnx"), example("profiles/gpu.json", "gpu.json"), prepare),
                ["split", CNN, "--profile", "{models}/gpu.json", "-o", out, *extra], message, exit=exit)


def make_dirs(*names_and_files):
    def setup(s):
        for item in names_and_files:
            path = item.format(**s.names())
            if path.endswith("/"):
                os.makedirs(path, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write("user data\n")
    return setup


def accepted_earlier_output(s):
    s.copy_example("cnn.onnx")
    s.copy_example("profiles/gpu.json", "gpu.json")
    s.cleave("split", s.path("cnn.onnx"), "--profile", s.path("gpu.json"), "-o", os.path.join(s.work, "out"))


def check_replaced(ctx, before, after, stdout):
    if not os.path.exists(os.path.join(ctx.work, "out", "plan.json")):
        return "out/plan.json missing after replacing an earlier output"
    leftovers = [k for k in after if k.startswith("work/.out")]
    return f"staging left behind: {leftovers}" if leftovers else None


def check_non_utf8_json(ctx, before, after, stdout):
    try:
        doc = json.loads(stdout)
    except ValueError as e:
        return f"stdout is not JSON: {e}"
    names = [n["name"] for n in doc.get("node_list", [])]
    return None if any("\ufffd" in n for n in names) else f"no escaped name among {names}"


def check_non_utf8_split(ctx, before, after, stdout):
    with open(os.path.join(ctx.work, "out", "plan.json"), encoding="utf-8") as f:
        json.load(f)
    return None


CASES = [
    # --- ONNX bytes ---------------------------------------------------------------------------
    Case("onnx-bytes", "empty-file", raw(b""), ["inspect", M], r"m\.onnx' is empty"),
    Case("onnx-bytes", "garbage", raw(bytes(range(256)) * 8), ["inspect", M], r"not a valid ONNX model"),
    Case("onnx-bytes", "truncated", lambda s: s.write("m.onnx", open(os.path.join(EXAMPLES, "cnn.onnx"), "rb").read()[:5000]),
         ["inspect", M], r"not a valid ONNX model|corrupt"),
    Case("onnx-bytes", "json-as-onnx", raw(b'{"schema": "cleave.fx_graph"}', "m.onnx"), ["inspect", M],
         r"m\.onnx: FX graph schema version null is not supported"),
    Case("onnx-bytes", "no-graph", raw(helper.make_model(helper.make_graph([], "g", [], [])).SerializeToString()[:4]),
         ["inspect", M], r"ONNX model"),
    Case("onnx-bytes", "fifo-model", fifo("m.onnx"), ["inspect", M], r"is a FIFO, not a regular file", timeout=10),
    Case("onnx-bytes", "device-model", nothing, ["inspect", "/dev/zero"], r"is a device, not a regular file", timeout=10),
    Case("onnx-bytes", "directory-model", nothing, ["inspect", "{models}/"], r"is a directory|not a regular file"),
    Case("onnx-bytes", "missing-model", nothing, ["inspect", "{models}/nope.onnx"], r"cannot open .*nope\.onnx"),
    Case("onnx-bytes", "fifo-convert", fifo("m.onnx"), ["convert", M, "-o", "{work}/o.onnx"], r"is a FIFO", timeout=10),

    # --- graph structure and opsets -----------------------------------------------------------
    Case("graph", "undefined-input", model(lambda: chain_model([helper.make_node("Relu", ["nowhere"], ["y"], name="r")])),
         ["inspect", M], r"nowhere"),
    Case("graph", "undefined-input-inferred", model(lambda: helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["h"], name="r"), helper.make_node("Add", ["h", "nowhere"], ["y"], name="a")],
        "g", [helper.make_tensor_value_info("x", 1, [4])], [helper.make_tensor_value_info("y", 1, [4])]),
        opset_imports=[helper.make_opsetid("", 13)])),
         ["inspect", M], r"node 'a' \(Add\) reads 'nowhere', which no node, input or initializer defines"),
    # A fuzzed model whose constant crashed onnx 1.12's shape inference (onnx 1.23's types it; a crash
    # there would still be an error: base/isolated_call_test.cpp): its mangled op is named on running.
    Case("graph", "fuzzed-op-named",
         lambda s: shutil.copy(os.path.join(SOURCE_DIR, "fuzz", "seeds", "onnx_reader", "out_of_range_constant_in_inference.onnx"),
                               s.path("m.onnx")),
         ["run", M], r"no kernel for op Sh\[pe \(node '/Shape_1', opset 17\)"),
    Case("graph", "cycle", model(lambda: chain_model([helper.make_node("Add", ["x", "b"], ["a"], name="p"),
                                                       helper.make_node("Relu", ["a"], ["b"], name="q"),
                                                       helper.make_node("Relu", ["a"], ["y"], name="r")])),
         ["inspect", M], r"cycle"),
    Case("graph", "duplicate-output", model(lambda: chain_model([helper.make_node("Relu", ["x"], ["y"], name="p"),
                                                                  helper.make_node("Neg", ["x"], ["y"], name="q")])),
         ["inspect", M], r"'y'"),
    Case("graph", "output-not-produced", model(lambda: chain_model([helper.make_node("Relu", ["x"], ["z"], name="p")])),
         ["inspect", M], r"'y'"),
    Case("graph", "opset-too-old", model(lambda: relu_model(opset=0)), ["inspect", M], r"opset 0 is not supported"),
    Case("graph", "int4-input", model(lambda: relu_model(opset=21, elem=TensorProto.INT4)), ["inspect", M],
         r"input 'x' has type i4, packed several to a byte: no ATen tensor type holds it"),
    Case("graph", "opset-too-new", model(lambda: relu_model(opset=999)), ["run", M],
         r"opset 999, newer than the newest cleave knows \(28\)"),
    Case("graph", "fixed-parameters-not-json", model(lambda: with_metadata(relu_model(), "cleave.fixed_parameters", "{oops")),
         ["inspect", M], r"metadata 'cleave\.fixed_parameters'"),
    Case("graph", "fixed-parameters-bad-reason", model(lambda: with_metadata(
        relu_model(), "cleave.fixed_parameters", '{"version": 1, "fixed": {"x": "maybe"}}')),
         ["inspect", M], r"cleave\.fixed_parameters.*'x': the reason must be"),
    Case("cli-numbers", "frozen-pattern-matches-nothing", example("cnn.onnx"),
         ["pipeline", CNN, "--stages", "2", "--frozen", "nothing.*"], r"--frozen 'nothing\.\*' matches no floating tensor"),
    Case("graph", "no-default-opset", model(lambda: helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", 1, [2])], [helper.make_tensor_value_info("y", 1, [2])]),
        opset_imports=[helper.make_opsetid("com.example", 1)])), ["inspect", M], r"no ai\.onnx opset"),
    Case("graph", "unknown-op-run", model(lambda: chain_model([helper.make_node("FrobnicateOp", ["x"], ["y"], name="f")])),
         ["run", M], r"FrobnicateOp"),

    # --- dims and dtypes ------------------------------------------------------------------------
    Case("dims", "negative-input-dim", model(lambda: relu_model(dims=(-5, 3))), ["inspect", M], r"negative dimension -5"),
    Case("dims", "overflowing-input-dims", model(lambda: relu_model(dims=(2 ** 62, 4))), ["inspect", M],
         r"overflows 64 bits"),
    Case("dims", "overflowing-input-dims-run", model(lambda: relu_model(dims=(2 ** 62, 2 ** 62))), ["run", M],
         r"overflows 64 bits"),
    Case("dims", "negative-initializer-dim", model(lambda: add_model(raw_tensor([-3], b""))),
         ["inspect", M], r"negative dimension -3"),
    Case("dims", "overflowing-initializer", model(lambda: add_model(raw_tensor([2 ** 40, 2 ** 40], b""))),
         ["inspect", M], r"overflows 64 bits"),
    Case("dims", "initializer-size-mismatch", model(lambda: add_model(raw_tensor([12], b"\0" * 20))),
         ["inspect", M], r"holds 20 bytes, its shape needs 48"),
    Case("dims", "unknown-elem-type", model(lambda: relu_model(elem=77)), ["inspect", M], r"dtype|type"),
    Case("dims", "huge-input-run", model(lambda: relu_model(dims=(2 ** 40, 2 ** 10))), ["run", M],
         r"cannot (allocate|make)|too large|memory"),

    # --- external data --------------------------------------------------------------------------
    Case("external-data", "dotdot-location", model(lambda: add_model(external_weight("../outside/secret.bin"))),
         ["convert", M, "-o", "{work}/o.onnx"], r"external data location '\.\./outside/secret\.bin' lies outside its folder"),
    Case("external-data", "deep-dotdot-location", model(lambda: add_model(external_weight("../../../../../../etc/passwd"))),
         ["run", M, "--save-outputs", "{work}/o.json"], r"lies outside its folder"),
    Case("external-data", "absolute-location", model(lambda: add_model(external_weight("/etc/passwd"))),
         ["inspect", M], r"'/etc/passwd' is an absolute path"),
    Case("external-data", "symlink-out", both(symlink("{outside}/secret.bin", "w.bin"),
                                              model(lambda: add_model(external_weight("w.bin")))),
         ["convert", M, "-o", "{work}/o.onnx"], r"'w\.bin' lies outside its folder"),
    Case("external-data", "symlinked-folder-out", both(symlink("{outside}", "sub"),
                                                       model(lambda: add_model(external_weight("sub/secret.bin")))),
         ["convert", M, "-o", "{work}/o.onnx"], r"lies outside its folder"),
    Case("external-data", "offset-past-end", both(raw(b"\0" * 48, "w.bin"), model(lambda: add_model(external_weight("w.bin", offset=4096)))),
         ["convert", M, "-o", "{work}/o.onnx"], r"past the end"),
    Case("external-data", "length-past-end", both(raw(b"\0" * 48, "w.bin"),
                                                  model(lambda: add_model(external_weight("w.bin", offset=8, length=48)))),
         ["convert", M, "-o", "{work}/o.onnx"], r"runs past the end"),
    Case("external-data", "huge-offset", both(raw(b"\0" * 48, "w.bin"),
                                              model(lambda: add_model(external_weight("w.bin", offset=2 ** 64 - 8)))),
         ["convert", M, "-o", "{work}/o.onnx"], r"past the end"),
    Case("external-data", "missing-file", model(lambda: add_model(external_weight("gone.bin"))),
         ["convert", M, "-o", "{work}/o.onnx"], r"external data of parameter 'w'.*gone\.bin"),
    Case("external-data", "fifo-data", both(fifo("w.bin"), model(lambda: add_model(external_weight("w.bin")))),
         ["convert", M, "-o", "{work}/o.onnx"], r"is a FIFO", timeout=10),
    Case("external-data", "no-location", model(lambda: add_model(external_weight(None))), ["inspect", M],
         r"external data without a location"),

    # --- support profiles -----------------------------------------------------------------------
    Case("profile-json", "invalid-json", both(example("cnn.onnx"), profile("{\"ops\": ")),
         ["support", CNN, "--profile", "{models}/p.json"], r"p\.json: invalid JSON"),
    Case("profile-json", "deep-nesting", both(example("cnn.onnx"), profile('{"all_of": ' + nested(100000, "{}") + "}")),
         ["support", CNN, "--profile", "{models}/p.json"], r"nested deeper than 256 levels"),
    Case("profile-json", "deep-all-of", both(example("cnn.onnx"),
                                             profile('{"all_of": [' * 5000 + '{"ops": {"Relu": null}}' + "]}" * 5000)),
         ["support", CNN, "--profile", "{models}/p.json"], r"nested deeper than 256 levels"),
    Case("profile-json", "name-not-string", both(example("cnn.onnx"), profile('{"name": [1], "ops": {"Relu": null}}')),
         ["support", CNN, "--profile", "{models}/p.json"], r"p\.json: .*name.*must be string, but is array"),
    Case("profile-json", "fifo-profile", both(example("cnn.onnx"), fifo("p.json")),
         ["support", CNN, "--profile", "{models}/p.json"], r"is a FIFO", timeout=10),
    Case("profile-json", "dev-zero-profile", example("cnn.onnx"), ["support", CNN, "--profile", "/dev/zero"],
         r"is a device", timeout=10),
    Case("profile-json", "no-ops", both(example("cnn.onnx"), profile('{"name": "x"}')),
         ["support", CNN, "--profile", "{models}/p.json"], r"lists no ops"),
    Case("profile-json", "array-top", both(example("cnn.onnx"), profile('[1, 2]')),
         ["support", CNN, "--profile", "{models}/p.json"], r"p\.json"),

    # --- devices ------------------------------------------------------------------------------
    Case("devices-json", "name-not-string", both(example("cnn.onnx"), profile('{"devices": [{"name": 5, "logical_id": 0, "available_mem_bytes": 100}]}', "d.json")),
         ["partition", CNN, "--devices", "{models}/d.json"], r"d\.json: .*name.*must be string"),
    Case("devices-json", "memory-not-number", both(example("cnn.onnx"), profile('{"devices": [{"logical_id": 0, "available_mem_bytes": "x"}]}', "d.json")),
         ["partition", CNN, "--devices", "{models}/d.json"], r"available_mem_bytes: expected an integer"),
    Case("devices-json", "memory-sum-overflow", both(example("cnn.onnx"), profile(
        '{"devices": [{"logical_id": 0, "available_mem_bytes": 9223372036854775807},'
        ' {"logical_id": 1, "available_mem_bytes": 9223372036854775807}]}', "d.json")),
         ["partition", CNN, "--devices", "{models}/d.json"], r"available_mem_bytes: expected an integer in \[1, 1125899906842624\]"),
    Case("devices-json", "float-logical-id", both(example("cnn.onnx"), profile('{"devices": [{"logical_id": 1.5, "available_mem_bytes": 100}]}', "d.json")),
         ["partition", CNN, "--devices", "{models}/d.json"], r"logical_id: expected an integer"),
    Case("devices-json", "profile-outside", both(example("cnn.onnx"), example("profiles/gpu.json", "../outside/gpu.json"),
                                                 profile('{"devices": [{"logical_id": 0, "available_mem_bytes": 100000000, "profile": "../outside/gpu.json"}]}', "d.json")),
         ["partition", CNN, "--devices", "{models}/d.json"], r"profile '\.\./outside/gpu\.json' lies outside its folder"),
    Case("devices-json", "no-devices", both(example("cnn.onnx"), profile('{"devices": []}', "d.json")),
         ["partition", CNN, "--devices", "{models}/d.json"], r"no devices"),
    Case("devices-json", "deep-nesting", both(example("cnn.onnx"), profile('{"devices": ' + nested(300) + "}", "d.json")),
         ["partition", CNN, "--devices", "{models}/d.json"], r"nested deeper than 256"),

    # --- latency, AOT mapping, split spec, tensors --------------------------------------------
    Case("latency-json", "negative-latency", both(example("cnn.onnx"), profile(DEVICES_OK, "d.json"),
                                                  lambda s: s.write("lat.json", json.dumps({"/stem/Conv": {"mem_latency_sec": -1, "computer_latency_sec": 1}}))),
         ["partition", CNN, "--devices", "{models}/d.json", "--mode", "cost_aware", "--latency", "{models}/lat.json"],
         r"finite non-negative"),
    Case("latency-json", "wrong-type", both(example("cnn.onnx"), profile(DEVICES_OK, "d.json"), profile('{"/stem/Conv": 3}', "lat.json")),
         ["partition", CNN, "--devices", "{models}/d.json", "--mode", "cost_aware", "--latency", "{models}/lat.json"],
         r"lat\.json: /stem/Conv: needs numbers"),
    Case("aot-json", "unknown-device", both(example("cnn.onnx"), profile(DEVICES_OK, "d.json"),
                                            profile('{"node_to_partition": {}, "partition_to_logical_devices": {"0": [7]}}', "aot.json")),
         ["partition", CNN, "--devices", "{models}/d.json", "--mode", "aot_based", "--aot", "{models}/aot.json"],
         r"unknown logical device 7"),
    Case("aot-json", "wrong-type", both(example("cnn.onnx"), profile(DEVICES_OK, "d.json"),
                                        profile('{"node_to_partition": [], "partition_to_logical_devices": {}}', "aot.json")),
         ["partition", CNN, "--devices", "{models}/d.json", "--mode", "aot_based", "--aot", "{models}/aot.json"],
         r"aot\.json: expected"),
    Case("spec-json", "unknown-key", both(example("cnn.onnx"), profile('{"split_somewhere": 1}', "spec.json")),
         ["pipeline", CNN, "--split-spec", "{models}/spec.json"], r"unknown key 'split_somewhere'"),
    Case("spec-json", "deep-nesting", both(example("cnn.onnx"), profile('{"split_before": ' + nested(100000) + "}", "spec.json")),
         ["pipeline", CNN, "--split-spec", "{models}/spec.json"], r"nested deeper than 256"),
    Case("inputs-json", "dims-overflow", both(example("cnn.onnx"),
                                              profile('{"x": {"dtype": "float32", "dims": [4611686018427387904, 4], "data": []}}', "in.json")),
         ["run", CNN, "--inputs", "{models}/in.json"], r"dims overflow"),
    Case("inputs-json", "count-mismatch", both(example("cnn.onnx"), profile('{"x": {"dtype": "float32", "dims": [2], "data": [1]}}', "in.json")),
         ["run", CNN, "--inputs", "{models}/in.json"], r"data has 1 values, dims need 2"),
    Case("inputs-json", "bad-dtype", both(example("cnn.onnx"), profile('{"x": {"dtype": "float99", "dims": [1], "data": [1]}}', "in.json")),
         ["run", CNN, "--inputs", "{models}/in.json"], r"unknown dtype"),
    Case("inputs-json", "int64-out-of-range", both(example("cnn.onnx"), profile('{"x": {"dtype": "int64", "dims": [1], "data": [1e300]}}', "in.json")),
         ["run", CNN, "--inputs", "{models}/in.json"], r"not an int64"),
    Case("inputs-json", "negative-dim", both(example("cnn.onnx"), profile('{"x": {"dtype": "float32", "dims": [-1], "data": []}}', "in.json")),
         ["run", CNN, "--inputs", "{models}/in.json"], r"dims: expected an integer in \[0,"),

    # --- FX graph JSON --------------------------------------------------------------------------
    Case("fx-json", "target-array", fx_case(lambda d: first_with(d, "op_target").__setitem__("target", [])),
         ["inspect", "{models}/m.fx.json"], r"m\.fx\.json: .*target.*must be string, but is array"),
    Case("fx-json", "param-bytes-string", fx_case(lambda d: first_with(d, "parameters")["parameters"][0].__setitem__("bytes", "x")),
         ["inspect", "{models}/m.fx.json"], r"bytes: expected an integer"),
    Case("fx-json", "deep-args", fx_text_case(lambda d: json.dumps(d, separators=(",", ":")).replace('"args":[{"node":"x"}]', '"args":' + nested(100000), 1)),
         ["inspect", "{models}/m.fx.json"], r"nested deeper than 256"),
    Case("fx-json", "dim-overflow", fx_case(lambda d: d["nodes"][0]["value"].__setitem__("shape", [2 ** 62, 2 ** 62])),
         ["inspect", "{models}/m.fx.json"], r"overflows 64 bits"),
    Case("fx-json", "negative-dim", fx_case(lambda d: d["nodes"][0]["value"].__setitem__("shape", [-2])),
         ["inspect", "{models}/m.fx.json"], r"bad dimension -2"),
    Case("fx-json", "wrong-schema", fx_case(lambda d: d.__setitem__("schema", "other")),
         ["inspect", "{models}/m.fx.json"], r"not a cleave FX graph"),
    Case("fx-json", "nodes-not-list", fx_case(lambda d: d.__setitem__("nodes", {"a": 1})),
         ["inspect", "{models}/m.fx.json"], r"no 'nodes' list"),
    Case("fx-json", "node-name-number", fx_case(lambda d: d["nodes"][1].__setitem__("name", 17)),
         ["inspect", "{models}/m.fx.json"], r"a node lacks 'name' or 'op'"),
    Case("fx-json", "dev-zero", nothing, ["inspect", "/dev/zero"], r"is a device", timeout=10),

    # --- torch.export programs (.pt2) -------------------------------------------------------------
    Case("pt2", "archive-version", pt2_case(lambda m: m.__setitem__("archive_version", b"7")),
         ["inspect", "{models}/m.pt2"], r"pt2 archive version '7' is not one cleave reads"),
    Case("pt2", "schema-major", pt2_case(program_edit(lambda d: d["schema_version"].__setitem__("major", 9))),
         ["inspect", "{models}/m.pt2"], r"ExportedProgram schema 9\.\d+ is not one cleave reads"),
    Case("pt2", "no-program", pt2_case(lambda m: m.pop("models/model.json")),
         ["inspect", "{models}/m.pt2"], r"no program \(models/\*\.json\)"),
    Case("pt2", "not-json", pt2_case(lambda m: m.__setitem__("models/model.json", b"{\"graph_module\": [")),
         ["inspect", "{models}/m.pt2"], r"m\.pt2"),
    Case("pt2", "deep-json", pt2_case(lambda m: m.__setitem__("models/model.json", nested(100000).encode())),
         ["inspect", "{models}/m.pt2"], r"nested deeper than 256"),
    Case("pt2", "node-name-number", pt2_case(program_edit(lambda d: pt2_graph(d)["nodes"][0].__setitem__("name", 17))),
         ["inspect", "{models}/m.pt2"], r"node has a name that is not a string"),
    Case("pt2", "input-name-number", pt2_case(program_edit(
        lambda d: pt2_graph(d)["nodes"][0]["inputs"][0]["arg"]["as_tensor"].__setitem__("name", 5))),
         ["inspect", "{models}/m.pt2"], r"m\.pt2: .*must be string"),
    Case("pt2", "dangling-input", pt2_case(program_edit(
        lambda d: pt2_graph(d)["nodes"][0]["inputs"][0]["arg"]["as_tensor"].__setitem__("name", "nowhere"))),
         ["inspect", "{models}/m.pt2"], r"nowhere"),
    Case("pt2", "negative-size", pt2_case(program_edit(
        lambda d: next(iter(pt2_graph(d)["tensor_values"].values()))["sizes"][0].__setitem__("as_int", -3))),
         ["inspect", "{models}/m.pt2"], r"size: expected an integer in \[0,"),
    Case("pt2", "size-overflow", pt2_case(program_edit(
        lambda d: next(iter(pt2_graph(d)["tensor_values"].values())).__setitem__("sizes", [{"as_int": 2 ** 62}] * 2))),
         ["inspect", "{models}/m.pt2"], r"overflows 64 bits"),
    Case("pt2", "unknown-dtype", pt2_case(program_edit(
        lambda d: next(iter(pt2_graph(d)["tensor_values"].values())).__setitem__("dtype", 99))),
         ["inspect", "{models}/m.pt2"], r"unknown dtype 99"),
    Case("pt2", "custom-object-input", pt2_case(program_edit(
        lambda d: d["graph_module"]["signature"]["input_specs"].__setitem__(0, {"custom_obj": {"arg": {"name": "o"}}}))),
         ["inspect", "{models}/m.pt2"], r"an input of kind 'custom_obj'"),
    Case("pt2", "truncated", lambda s: s.write("m.pt2", open(PT2_SEED, "rb").read()[:3000]),
         ["inspect", "{models}/m.pt2"], r"m\.pt2: not a zip archive"),

    # --- plan.json ------------------------------------------------------------------------------
    Case("plan-json", "file-dotdot", split_plan(set_first_file("../../outside/secret.bin")),
         ["run", "{models}/plan"], r"file '\.\./\.\./outside/secret\.bin' lies outside its folder"),
    Case("plan-json", "file-absolute", split_plan(set_first_file("{examples}/cnn.onnx")),
         ["run", "{models}/plan"], r"is an absolute path"),
    Case("plan-json", "file-symlink-out", split_plan(lambda p, s: (os.symlink(os.path.join(EXAMPLES, "cnn.onnx"),
                                                                              os.path.join(s.path("plan"), "evil.onnx")),
                                                                   set_first_file("evil.onnx")(p, s))),
         ["run", "{models}/plan"], r"'evil\.onnx' lies outside its folder"),
    Case("plan-json", "wrong-schema", split_plan(lambda p, s: p.__setitem__("schema", "x")),
         ["run", "{models}/plan"], r"not a cleave plan"),
    Case("plan-json", "inputs-wrong-type", split_plan(lambda p, s: p["submodules"][0].__setitem__("outputs", [1])),
         ["run", "{models}/plan"], r"plan\.json: .*must be string"),
    Case("plan-json", "deep-nesting", split_plan(lambda p, s: '{"schema": "cleave.plan", "x": ' + nested(100000) + "}"),
         ["run", "{models}/plan"], r"nested deeper than 256"),

    # --- schedules ------------------------------------------------------------------------------
    Case("schedule", "billion-microbatches", nothing, ["schedule", "--kind", "gpipe", "--stages", "4", "--microbatches", "1000000000"],
         r"schedule too large"),
    Case("schedule", "billion-stages", nothing, ["schedule", "--kind", "interleaved", "--stages", "1000000000", "--ranks", "2",
                                                 "--microbatches", "4"], r"schedule too large"),
    Case("schedule", "zero-stages", nothing, ["schedule", "--kind", "gpipe", "--stages", "0", "--microbatches", "4"],
         r"usage error.*--stages", exit=2),
    Case("schedule", "negative-stages", nothing, ["schedule", "--stages", "-3", "--microbatches", "4"], r"usage error", exit=2),
    Case("schedule", "csv-garbage", profile("0F0,0B0\nhello world\n", "s.csv"), ["schedule", "--from-csv", "{models}/s.csv"],
         r"line 2"),
    Case("schedule", "csv-huge-stage", profile("4294967295F0\n", "s.csv"), ["schedule", "--from-csv", "{models}/s.csv"],
         r"schedule too large|stage"),
    Case("schedule", "csv-dev-zero", nothing, ["schedule", "--from-csv", "/dev/zero"], r"is a device", timeout=10),
    Case("schedule", "csv-fifo", fifo("s.csv"), ["schedule", "--from-csv", "{models}/s.csv"], r"is a FIFO", timeout=10),
    Case("schedule", "pipeline-billion-stages", example("cnn.onnx"), ["pipeline", CNN, "--stages", "1000000000"],
         r"usage error: --stages: .*not in range", exit=2),
    Case("schedule", "pipeline-zero-microbatches", example("cnn.onnx"),
         ["pipeline", CNN, "--stages", "2", "--microbatches", "0"], r"usage error: --microbatches: .*not in range", exit=2),
    Case("schedule", "pipeline-batch-held-in-a-constant", model(batch_held_model),
         ["pipeline", "{models}/m.onnx", "--stages", "2", "--microbatches", "2", "-o", "{work}/out"],
         r"2 microbatches cannot run: node 'held' \(Reshape\) has the constant shape \[4, 2, 3\], which holds the "
         r"exported batch of 4"),
    Case("schedule", "run-billion-microbatches", split_plan(lambda p, s: None),
         ["run", "{models}/plan", "--pipeline", "--microbatches", "1000000000"],
         r"usage error: --microbatches: .*not in range", exit=2),

    # --- output paths -----------------------------------------------------------------------------
    output_dir_case("dot", nothing, ".", r"it is or holds the current directory"),
    output_dir_case("dotdot", nothing, "..", r"it is or holds the (current directory|home folder)"),
    output_dir_case("root", nothing, "/", r"it is the file system root"),
    output_dir_case("home", nothing, "{home}", r"it is or holds the home folder"),
    output_dir_case("home-with-force", nothing, "{home}/", r"home folder", extra=("--force",)),
    output_dir_case("models-folder", nothing, "{models}", r"it holds the input '.*cnn\.onnx'"),
    output_dir_case("models-folder-force", nothing, "{models}/", r"it holds the input", extra=("--force",)),
    output_dir_case("foreign-dir", make_dirs("{work}/mine/notes.txt"), "{work}/mine", r"not a cleave output"),
    output_dir_case("foreign-dir-trailing-slash", make_dirs("{work}/mine/notes.txt"), "{work}/mine/", r"not a cleave output"),
    output_dir_case("existing-file", make_dirs("{work}/afile"), "{work}/afile", r"exists and is not a directory"),
    output_dir_case("symlink-dir", both(make_dirs("{outside}/target/"), lambda s: os.symlink(s.outside + "/target", s.work + "/link")),
                    "{work}/link", r"symbolic link"),
    output_dir_case("missing-parent", nothing, "{work}/no/such/out", r"parent directory .* does not exist"),
    output_dir_case("dot-inside", make_dirs("{work}/sub/"), "{work}/sub/.", r"current directory|not '\.' or '\.\.'"),
    Case("output-path", "convert-onto-directory", example("cnn.onnx"), ["convert", CNN, "-o", "{work}"], r"cannot write"),
    Case("output-path", "replace-earlier-output", accepted_earlier_output,
         ["split", CNN, "--profile", "{models}/gpu.json", "-o", "{work}/out"], "", exit=0, check=check_replaced),

    # --- names that are not UTF-8 (must work) -------------------------------------------------------
    Case("names", "non-utf8-inspect-json", raw(non_utf8_model()), ["inspect", M, "--json", "--nodes"], "", exit=0,
         check=check_non_utf8_json),
    Case("names", "non-utf8-split", both(raw(non_utf8_model()), example("profiles/gpu.json", "gpu.json")),
         ["split", M, "--profile", "{models}/gpu.json", "-o", "{work}/out"], "", exit=0, check=check_non_utf8_split),

    # --- numbers on the command line -------------------------------------------------------------
    Case("cli-numbers", "gen-huge-n", nothing, ["gen", "chain", "100000000000", "-o", "{work}/g.onnx"],
         r"N must be in \[1, 5000000\]"),
    Case("cli-numbers", "gen-huge-width", nothing, ["gen", "chain", "10", "--width", "100000000", "-o", "{work}/g.onnx"],
         r"must be in \[0, 65536\]"),
    Case("cli-numbers", "negative-transfer-latency", nothing,
         ["schedule", "--stages", "4", "--microbatches", "4", "--transfer-latency", "-1", "--simulate"],
         r"--transfer-latency: Value -1 not in range", exit=2),
    Case("cli-numbers", "nan-costs", nothing, ["schedule", "--stages", "4", "--microbatches", "4", "--costs", "nan,1", "--simulate"],
         r"--costs 'nan,1'"),
    # CLI11's range checks let NaN through (every comparison with it is false): every floating
    # option checks that its value is finite first.
    Case("cli-numbers", "nan-transfer-latency", nothing,
         ["schedule", "--stages", "4", "--microbatches", "4", "--transfer-latency", "nan", "--simulate"],
         r"--transfer-latency: 'nan' is not a finite number", exit=2),
    Case("cli-numbers", "nan-send-cost", nothing,
         ["schedule", "--stages", "4", "--microbatches", "4", "--send-cost", "nan", "--simulate"],
         r"--send-cost: 'nan' is not a finite number", exit=2),
    Case("cli-numbers", "nan-pair-cost", nothing,
         ["schedule", "--kind", "dualpipev", "--stages", "4", "--ranks", "2", "--microbatches", "4", "--pair-cost", "nan",
          "--simulate"], r"--pair-cost: 'nan' is not a finite number", exit=2),
    Case("usage", "zbv-one-stage-per-rank", nothing,
         ["schedule", "--kind", "zbv", "--stages", "4", "--microbatches", "8"],
         r"zbv runs two stages per rank in a V \(4 stages on 4 ranks; it needs 8\)"),
    Case("cli-numbers", "nan-cost-spread", nothing,
         ["schedule", "--stages", "4", "--microbatches", "4", "--cost-spread", "NaN", "--simulate"],
         r"--cost-spread: 'NaN' is not a finite number", exit=2),
    Case("cli-numbers", "nan-learning-rate", example("cnn.onnx"), ["train", CNN, "--data", CNN, "--lr", "nan"],
         r"--lr: 'nan' is not a finite number", exit=2),
    Case("cli-numbers", "nan-adamw-beta", example("cnn.onnx"), ["train", CNN, "--data", CNN, "--betas", "0.9,nan"],
         r"--betas: 'nan' is not a finite number", exit=2),
    Case("cli-numbers", "nan-clip-grad-norm", example("cnn.onnx"), ["train", CNN, "--data", CNN, "--clip-grad-norm", "nan"],
         r"--clip-grad-norm: 'nan' is not a finite number", exit=2),
    Case("cli-numbers", "negative-warmup", example("cnn.onnx"), ["train", CNN, "--data", CNN, "--warmup", "-1"],
         r"--warmup: Value -1 not in range", exit=2),
    Case("cli-numbers", "huge-input-bytes", nothing,
         ["schedule", "--stages", "4", "--microbatches", "4", "--recompute", "stage", "--input-bytes", "9223372036854775807",
          "--simulate"], r"--input-bytes: Value .* not in range", exit=2),
    Case("cli-numbers", "dropped-more-than-made", nothing,
         ["schedule", "--stages", "4", "--microbatches", "4", "--recompute", "selective", "--activation-bytes", "10",
          "--dropped-bytes", "11", "--simulate"], r"dropped bytes at most its activation bytes .*dropped 11"),
    Case("cli-numbers", "unknown-recompute", nothing,
         ["schedule", "--stages", "4", "--microbatches", "4", "--recompute", "layer", "--simulate"],
         r"unknown recompute 'layer'", exit=2),
    Case("cli-numbers", "tf32-off-cuda", example("cnn.onnx"), ["run", CNN, "--tf32"],
         r"--tf32 applies to --backend aten-cuda; aten-cpu computes float32 as float32", exit=2),
    Case("cli-numbers", "infinite-rtol", example("cnn.onnx"), ["verify", CNN, "{work}", "--rtol", "inf"],
         r"--rtol: 'inf' is not a finite number", exit=2),
    Case("cli-numbers", "nan-flops", example("cnn.onnx"), ["partition", CNN, "--devices", CNN, "--flops", "nan"],
         r"--flops: 'nan' is not a finite number", exit=2),
    Case("cli-numbers", "nan-pcie", example("cnn.onnx"), ["split", CNN, "--profile", CNN, "--pcie-gbps", "-nan"],
         r"--pcie-gbps: '-nan' is not a finite number", exit=2),
    Case("cli-numbers", "huge-activation-bytes", nothing,
         ["schedule", "--stages", "4", "--microbatches", "4", "--activation-bytes", "9223372036854775807", "--simulate"],
         r"--activation-bytes: Value .* not in range", exit=2),
    Case("cli-numbers", "negative-dim-override", example("cnn.onnx"), ["run", CNN, "--dim", "x=-1"], r"expected NAME=SIZE"),

    # --- usage -----------------------------------------------------------------------------------
    Case("usage", "checkpoint-dir-is-a-file", example("cnn.onnx"),
         ["train", CNN, "--data", CNN, "--batch", "1", "--checkpoint-dir", CNN], r"is not a folder \(checkpoints\)"),
    Case("usage", "resume-without-checkpoint", example("cnn.onnx"),
         ["train", CNN, "--data", CNN, "--batch", "1", "--resume", "{work}/none"], r"no complete checkpoint there"),
    Case("usage", "stop-after-without-folder", example("cnn.onnx"),
         ["train", CNN, "--data", CNN, "--batch", "1", "--stop-after", "1"], r"--stop-after needs a folder", exit=2),
    Case("usage", "pipeline-ranks-of-a-whole-model", example("cnn.onnx"),
         ["train", CNN, "--data", CNN, "--batch", "2", "--pipeline-ranks", "2"],
         r"--pipeline-ranks is for plan directories", exit=2),
    Case("usage", "pipeline-ranks-in-one-process", split_plan(lambda plan, s: None),
         ["train", "{models}/plan", "--data", CNN, "--batch", "2", "--pipeline-ranks", "2"],
         r"--pipeline-ranks 2 does not divide the 1 rank\(s\) of a single process", exit=2),
    Case("usage", "nccl-transport-for-stages-on-the-cpu", split_plan(lambda plan, s: None),
         ["train", "{models}/plan", "--data", CNN, "--batch", "2", "--transport", "nccl"],
         r"--transport nccl moves CUDA tensors: train the stages on aten-cuda", exit=2),
    Case("usage", "cuda-backend-index-not-a-number", example("cnn.onnx"), ["run", CNN, "--backend", "aten-cuda:one"],
         r"backend 'aten-cuda:one': expected aten-cuda or aten-cuda:N, N a device's index"),
    Case("usage", "graph-replay-on-the-cpu", example("cnn.onnx"), ["run", CNN, "--graph-replay"],
         r"--graph-replay: aten-cpu records no device work to replay \(graph replay needs aten-cuda, or "
         r"aten-cpu-as-gpu to check a recording on the CPU\)", exit=2),
    Case("usage", "precision-on-a-bfloat16-backend", example("cnn.onnx"),
         ["run", CNN, "--backend", "aten-cpu-bf16", "--precision", "fp16"],
         r"--precision fp16 on backend aten-cpu-bf16, which computes everything in BFloat16 already", exit=2),
    Case("usage", "graph-replay-of-a-pipeline", split_plan(lambda plan, s: None),
         ["run", "{models}/plan", "--pipeline", "--graph-replay"], r"--pipeline excludes --graph-replay", exit=2),
    Case("usage", "unknown-transport", split_plan(lambda plan, s: None),
         ["train", "{models}/plan", "--data", CNN, "--batch", "2", "--transport", "mpi"], r"--transport: mpi not in", exit=2),
    Case("usage", "unknown-flag", example("cnn.onnx"), ["inspect", CNN, "--frobnicate"], r"usage error", exit=2),
    Case("usage", "missing-profile", example("cnn.onnx"), ["split", CNN, "-o", "{work}/out"], r"usage error.*--profile", exit=2),
    Case("usage", "unknown-command", nothing, ["frobnicate"], r"unknown command", exit=2),
]
