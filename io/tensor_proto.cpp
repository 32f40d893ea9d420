#include "io/tensor_proto.h"

namespace cleave::io {
Expected<std::string> typedFieldsToRaw(const onnx::TensorProto& tensor, ir::DType dtype) {
  using ir::DType;
  std::string raw;
  switch (dtype) {
  case DType::F32: case DType::C64: appendAs<decltype(tensor.float_data()), float>(raw, tensor.float_data()); break;
  case DType::F64: case DType::C128: appendAs<decltype(tensor.double_data()), double>(raw, tensor.double_data()); break;
  case DType::I64: appendAs<decltype(tensor.int64_data()), std::int64_t>(raw, tensor.int64_data()); break;
  case DType::U32: appendAs<decltype(tensor.uint64_data()), std::uint32_t>(raw, tensor.uint64_data()); break;
  case DType::U64: appendAs<decltype(tensor.uint64_data()), std::uint64_t>(raw, tensor.uint64_data()); break;
  case DType::I32: appendAs<decltype(tensor.int32_data()), std::int32_t>(raw, tensor.int32_data()); break;
  case DType::I16: appendAs<decltype(tensor.int32_data()), std::int16_t>(raw, tensor.int32_data()); break;
  case DType::U16: case DType::F16: case DType::BF16:
    appendAs<decltype(tensor.int32_data()), std::uint16_t>(raw, tensor.int32_data()); break;
  case DType::I8: appendAs<decltype(tensor.int32_data()), std::int8_t>(raw, tensor.int32_data()); break;
  case DType::U8: case DType::Bool: case DType::F8E4M3FN: case DType::F8E4M3FNUZ: case DType::F8E5M2:
  case DType::F8E5M2FNUZ: case DType::F8E8M0: appendAs<decltype(tensor.int32_data()), std::uint8_t>(raw, tensor.int32_data()); break;
  default:
    return Error(ErrorCode::Unsupported) << "initializer '" << tensor.name() << "' of type "
                                         << ir::dtypeName(dtype) << " is not supported";
  }
  return raw;
}

} // namespace cleave::io
