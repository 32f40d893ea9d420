// io/npy.h - NumPy's .npy array format (versions 1.0, 2.0 and 3.0), read and written without
// libtorch; runtime/model/tensor_files.h turns arrays into ATen tensors.
//
//   \x93NUMPY <major> <minor> <header length: u16 (1.0) or u32 (2.0, 3.0)>
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }   (padded with spaces, '\n')
//   <data>
//
// Guarantees of parseNpy: the magic, version and header are checked; descr is a little-endian
// (or byte-order-free) bool, int8-64, uint8-64 or float16/32/64; dims are non-negative with a
// product that fits in int64; the data holds exactly the bytes the shape needs (no trailing
// bytes either); anything else is a ParseError (Unsupported for a big-endian or other dtype)
// naming `what`. The result views `bytes`: no copy.
// Complexity: O(header length) plus O(1) for the data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/expected.h"
#include "ir/types.h"

namespace cleave::io {

struct NpyArray {
  ir::DType dtype = ir::DType::F32;
  std::vector<std::int64_t> dims;
  bool fortranOrder = false; // column-major data: the reader reverses dims and transposes back
  std::string_view data;
};

Expected<NpyArray> parseNpy(std::string_view bytes, const std::string& what);

// A version 1.0 file's bytes before the data, for a C-order array (header padded to 64 bytes).
// Fails: Unsupported for a dtype .npy files here do not hold (strings, complex, bfloat16).
Expected<std::string> formatNpyHeader(ir::DType dtype, const std::vector<std::int64_t>& dims);

} // namespace cleave::io
