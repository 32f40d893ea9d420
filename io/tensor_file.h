// io/tensor_file.h - JSON tensor files (`cleave run --inputs`, `--save-outputs`, repro inputs):
//   {"x": {"dtype": "float32", "dims": [2, 3], "data": [1, 2, 3, 4, 5, 6]}, ...}
// Parsing lives here, without libtorch, so it can be tested and fuzzed on its own; runtime/
// turns entries into ATen tensors.
// Guarantees: dims are non-negative and their product fits in int64 before any data is looked at;
// data has exactly that many numbers (strings for dtype "string"); int64 data is read exactly (no double rounding past 2^53)
// and a value outside int64's range is refused; a field of the wrong type is a ParseError naming
// the file and the JSON path (base/json.h). O(size of the text).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/expected.h"
#include "ir/types.h"

namespace cleave::io {

struct TensorFileEntry {
  std::string name;
  ir::DType dtype = ir::DType::F32;
  std::vector<std::int64_t> dims;
  std::vector<double> values;     // the data, for every dtype but int64
  std::vector<std::int64_t> ints; // the data, for int64
  std::vector<std::string> strings; // the data, for string
};

// The dtype names tensor files use ("float32", "int64", "bool", ...), or nullopt / "" for a
// dtype tensor files do not hold.
std::optional<ir::DType> tensorFileDtype(std::string_view name);
std::string_view tensorFileDtypeName(ir::DType dtype);

// Entries in the file's order. Fails: ParseError naming `source`.
Expected<std::vector<TensorFileEntry>> parseTensorFile(std::string_view text, const std::string& source);

} // namespace cleave::io
