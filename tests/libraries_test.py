"""What a cleave process loads and binds (issue 59), on a machine without a GPU:
- the CUDA wing, libcleave_cuda.so, is built where libtorch has CUDA and links libtorch_cuda,
  libc10_cuda and NCCL (the one NCCL libtorch_cuda loads); `cleave --version` names it; a command
  on the CPU never maps it (nor cuDNN, cuBLAS or NCCL); asking for a CUDA device or the nccl
  transport loads it and answers in one line;
- the CPU wing's oneDNN (Debian's libdnnl) and the oneDNN inside PyPI's libtorch_cpu run in one
  process without a symbol of one bound to the other (cli/prebind.h says why they would).

argv: CLEAVE EXPECT_WING (1 when CMake built the wing: the build's own claim, which this checks).
"""
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from testlib import CLEAVE, EXAMPLES, TempDirTest, main, run

EXPECT_WING = sys.argv[2] == "1" if len(sys.argv) > 2 else True
FOLDER = os.path.dirname(CLEAVE)
WING = os.path.join(FOLDER, "libcleave_cuda.so")
CNN = os.path.join(EXAMPLES, "cnn.onnx")
# Mapped by the wheel's libtorch_cpu itself (its profiler, kineto, links CUPTI and the CUDA
# runtime), so by every process that runs a model; the wing's libraries are the rest.
LIBTORCH_CPU_CUDA_NEEDS = {"libcudart.so.13", "libcupti.so.13"}
CUDA_LIBRARY = re.compile(r"^lib(cleave_cuda|torch_cuda|c10_cuda|cudnn|cublas|cublasLt|nccl|cusparse|cufft|curand|"
                          r"cudart|cupti|nvrtc|nvJitLink|torch_nvshmem)\b")


def loaded_libraries(*args):
    """(exit code, stderr without the loader's lines, every library the loader opened)."""
    env = dict(os.environ, LD_DEBUG="files")
    env.pop("LD_DEBUG_OUTPUT", None)
    proc = subprocess.run([CLEAVE, *args], capture_output=True, text=True, timeout=300, env=env)
    opened, kept = set(), []
    for line in proc.stderr.splitlines():
        found = re.search(r"file=(\S+) \[\d+\];\s+(needed by|dynamically loaded by)", line)
        if found:
            opened.add(os.path.basename(found.group(1)))
        elif not re.match(r"^\s*\d+:", line):
            kept.append(line)
    return proc.returncode, "\n".join(kept), opened


def bindings(*args):
    """(exit code, [(from library, to library, symbol)]) of every symbol the loader bound."""
    env = dict(os.environ, LD_DEBUG="bindings")
    env.pop("LD_DEBUG_OUTPUT", None)
    proc = subprocess.run([CLEAVE, *args], capture_output=True, text=True, timeout=300, env=env)
    found = re.findall(r"binding file (\S+) \[\d+\] to (\S+) \[\d+\]: normal symbol `([^']+)'", proc.stderr)
    return proc.returncode, [(os.path.basename(a), os.path.basename(b), symbol) for a, b, symbol in found]


def needed(library):
    out = subprocess.run(["readelf", "-d", library], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out))


class Libraries(TempDirTest):
    def test_version_says_whether_the_wing_is_there(self):
        code, out, _ = run("--version")
        self.assertEqual(code, 0)
        self.assertRegex(out, r"^cleave \d+\.\d+\.\d+\nlibtorch \d+\.\d+\.\d+")
        if EXPECT_WING:
            self.assertRegex(out, r"\nCUDA wing: present \(.*libcleave_cuda\.so; CUDA \d+\.\d+(\.\d+)?, NCCL \d+\.\d+\.\d+\)\n")
        else:
            self.assertRegex(out, r"\nCUDA wing: absent \(")

    def test_the_wing_links_libtorch_cuda_c10_cuda_and_one_nccl(self):
        if not EXPECT_WING:
            self.skipTest("this build has no CUDA wing")
        libraries = needed(WING)
        for library in ("libtorch_cuda.so", "libc10_cuda.so", "libnccl.so.2"):
            self.assertIn(library, libraries)
        # The wing's NCCL is the file libtorch_cuda's NCCL resolves to: one NCCL in a process.
        ldd = subprocess.run(["ldd", WING], capture_output=True, text=True, check=True).stdout
        ncclPaths = {os.path.realpath(p) for p in re.findall(r"libnccl\.so\.2 => (\S+)", ldd)}
        self.assertEqual(len(ncclPaths), 1, ldd)
        self.assertNotIn("not found", ldd)
        torch_cuda = re.search(r"libtorch_cuda\.so => (\S+)", ldd).group(1)
        torch_ldd = subprocess.run(["ldd", torch_cuda], capture_output=True, text=True, check=True).stdout
        self.assertEqual({os.path.realpath(p) for p in re.findall(r"libnccl\.so\.2 => (\S+)", torch_ldd)}, ncclPaths)

    def test_a_command_on_the_cpu_maps_no_library_of_the_wing(self):
        code, err, opened = loaded_libraries("run", CNN)
        self.assertEqual(code, 0, err)
        self.assertIn("libtorch_cpu.so", opened)  # the check sees the libraries a run opens
        cuda = {name for name in opened if CUDA_LIBRARY.match(name)}
        self.assertLessEqual(cuda, LIBTORCH_CPU_CUDA_NEEDS, f"a CPU run opened {sorted(cuda)}")

    def test_the_two_onednns_bind_their_own_symbols(self):
        code, out, _ = run("--version")
        if "oneDNN: not called directly" in out:
            self.skipTest("this build calls no oneDNN of its own")
        code, bound = bindings("run", CNN)  # its classifier's one-row product calls libdnnl's sgemm
        self.assertEqual(code, 0)
        self.assertIn(("libcleave_runtime.so", "libdnnl.so.2", "dnnl_sgemm"), bound)
        is_torch = lambda name: name.startswith(("libtorch", "libc10"))
        crossed = [b for b in bound if (b[0].startswith("libdnnl") and is_torch(b[1])) or
                   (is_torch(b[0]) and b[1].startswith("libdnnl"))]
        self.assertEqual(crossed, [], f"{len(crossed)} symbols bound across the two oneDNNs, e.g. {crossed[:3]}")

    def check_cuda_asked(self, code, err, opened, failure_without_gpu):
        """A run that asked for a CUDA device: the wing and one NCCL loaded, and where there is no
        GPU, one error line."""
        if not EXPECT_WING:
            self.assertOneLineError(code, err, "this build has no CUDA wing")
            return
        for library in ("libcleave_cuda.so", "libtorch_cuda.so", "libc10_cuda.so"):
            self.assertIn(library, opened)
        self.assertEqual([name for name in opened if name.startswith("libnccl")], ["libnccl.so.2"])
        if code != 0:  # no GPU here (a GPU machine runs it: tests/gpu_test.py)
            self.assertIn(failure_without_gpu, err)

    def test_a_cuda_backend_loads_the_wing_and_answers_in_one_line(self):
        code, err, opened = loaded_libraries("run", CNN, "--backend", "aten-cuda")
        self.check_cuda_asked(code, err, opened, "backend aten-cuda: no CUDA device is usable here")
        if code != 0:
            self.assertOneLineError(code, err)

    def test_training_on_cuda_with_nccl_loads_the_wing_first(self):
        # libtorch keeps its first answer to "is there CUDA?": train seeds every GPU, so it must
        # load the wing before, or CUDA would be off for the whole run.
        model = self.path("m.onnx")
        write_model_with_loss(model)
        np.savez(self.path("d.npz"), x=np.random.default_rng(0).random((4, 4), dtype=np.float32))
        run("pipeline", model, "--stages", "2", "-o", self.path("plan"), check=True)
        code, err, opened = loaded_libraries("train", self.path("plan"), "--data", self.path("d.npz"), "--batch", "2",
                                             "--steps", "1", "--backend", "aten-cuda", "--transport", "nccl")
        self.check_cuda_asked(code, err, opened, "backend aten-cuda: no CUDA device is usable here")


def write_model_with_loss(path):
    """loss = mean((x @ w)^2), x of [n, 4]: the smallest model `cleave train` takes."""
    w = numpy_helper.from_array(np.ones((4, 2), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Mul", ["y", "y"], ["s"]),
             helper.make_node("ReduceMean", ["s"], ["loss"], keepdims=0)]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


if __name__ == "__main__":
    main()
