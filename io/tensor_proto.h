// io/tensor_proto.h - a TensorProto's values stored in its typed repeated fields (float_data,
// int32_data, ...) as the little-endian bytes raw_data would hold: one decoding for the reader's
// initializers and attributes and for the runtime's tensor files. 16-bit floats (f16, bf16) come
// from int32_data's low halves, as ONNX stores them. Complexity: O(elements).
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

#include "base/expected.h"
#include "ir/types.h"

namespace cleave::io {

// Appends each of `values` as an Element's little-endian bytes (what raw_data holds on x86-64).
template <typename Source, typename Element> void appendAs(std::string& out, const Source& values) {
  for (auto value : values) {
    auto element = static_cast<Element>(value);
    out.append(reinterpret_cast<const char*>(&element), sizeof element);
  }
}

// Fails: Unsupported (a dtype with no typed field: strings, complex halves, ...).
[[nodiscard]] Expected<std::string> typedFieldsToRaw(const onnx::TensorProto& tensor, ir::DType dtype);

} // namespace cleave::io
