"""ONNX's backend test suite, as the installed onnx release defines it, written as the case folders
that tests/onnx_backend/backend_suite.cpp reads.

usage: generate_cases.py OUT_DIR

onnx's wheel ships the node cases as code (onnx.backend.test.case.node: each operator's examples,
with the expected outputs computed by numpy or onnx's reference evaluator), not as data, and its
other suites (pytorch-converted, pytorch-operator, simple) as data. This writes
OUT_DIR/node/CASE/{model.onnx, test_data_set_0/{input,output}_K.pb} for every node case and copies
the other suites beside them. NumPy's global generator is seeded first, so every machine generates
the same inputs. scripts/setup runs it once per onnx release (the .onnx-tests folder).
Exit: 0 written; 1 a case could not be written (named); 2 usage.
"""

import os
import shutil
import sys
import warnings

import numpy as np


def proto_of(value, declared, name):
    """The TensorProto, SequenceProto or OptionalProto that stores VALUE as DECLARED's type."""
    from onnx import TensorProto, numpy_helper

    if declared.HasField("sequence_type"):
        return numpy_helper.from_list(value, name)
    if declared.HasField("optional_type"):
        return numpy_helper.from_optional(value, name)
    if declared.HasField("map_type"):
        return numpy_helper.from_dict(value, name)
    if isinstance(value, TensorProto):
        return value
    return numpy_helper.from_array(np.asarray(value), name)


def write_case(case, out_dir):
    folder = os.path.join(out_dir, case.kind, case.name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "model.onnx"), "wb") as f:
        f.write(case.model.SerializeToString())
    graph = case.model.graph
    for index, (inputs, outputs) in enumerate(case.data_sets):
        data = os.path.join(folder, f"test_data_set_{index}")
        os.makedirs(data, exist_ok=True)
        for kind, values, declared in (("input", inputs, graph.input), ("output", outputs, graph.output)):
            for k, value in enumerate(values):
                proto = proto_of(value, declared[k].type, declared[k].name)
                with open(os.path.join(data, f"{kind}_{k}.pb"), "wb") as f:
                    f.write(proto.SerializeToString())


def main():
    if len(sys.argv) != 2:
        print("usage: generate_cases.py OUT_DIR", file=sys.stderr)
        return 2
    out_dir = sys.argv[1]
    np.random.seed(0)
    warnings.simplefilter("ignore")  # the cases' own divisions by zero, which make their infinities
    import onnx.backend.test
    from onnx.backend.test.case import node

    shipped = os.path.join(os.path.dirname(onnx.backend.test.__file__), "data")
    for suite in ("pytorch-converted", "pytorch-operator", "simple"):
        shutil.copytree(os.path.join(shipped, suite), os.path.join(out_dir, suite), dirs_exist_ok=True)
    cases = sorted(node.collect_testcases(), key=lambda case: case.name)
    for case in cases:
        try:
            write_case(case, out_dir)
        except Exception as error:  # one line naming the case, not a traceback
            print(f"generate_cases.py: cannot write node case {case.name}: {error}", file=sys.stderr)
            return 1
    print(f"generate_cases.py: {len(cases)} node cases of onnx {onnx.__version__} in {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
