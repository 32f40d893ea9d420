// runtime/model/tensor_files.h - named tensors in the formats people already have, for `cleave run
// --inputs` / `--save-outputs`, `verify` and `shapes`:
//
//   .json    cleave's tensor file (runtime/engine/tensors.h): every tensor named
//   .pb      one ONNX TensorProto (as ONNX's test data and ONNX Runtime's tools write)
//   .npy     one NumPy array
//   .npz     NumPy's archive of arrays, each named by its key (np.savez(f, x=...) -> "x")
//   FOLDER   input_0.pb, input_1.pb, ... (ONNX's test_data_set layout) and NAME.npy files
//
// Binding: a tensor with a name keeps it (a .pb's name, an .npz key, a .npy file's stem in a
// folder); an unnamed one (a .pb without a name, a lone .npy, input_N.pb, an .npz's arr_N) takes
// the name of the graph's N-th input (`names`). Reading follows nothing outside the folder given
// (links to elsewhere are refused), refuses a tensor ATen has no dtype for, naming it, and checks
// every size before allocating.
// Writing picks the format by the path: .json, .npz, .npy / .pb (exactly one tensor), or a path
// ending in '/' or an existing folder: output_0.pb, ... in `order` (the graph's outputs).
// Complexity: linear in the files' bytes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/expected.h"
#include "runtime/engine/tensors.h"

namespace cleave::runtime {

// `kinds`: inputs held in container protos (.pb files only), by name; the rest are TensorProtos.
Expected<TensorMap> readTensors(const std::string& path, const std::vector<std::string>& names,
                                const ProtoKinds& kinds = {});
// The graph's inputs and outputs declared as ONNX sequences or optionals, by name. O(values).
ProtoKinds containerValues(const ir::Graph& graph);
Status writeTensors(const TensorMap& tensors, const std::string& path, const std::vector<std::string>& order);

} // namespace cleave::runtime
