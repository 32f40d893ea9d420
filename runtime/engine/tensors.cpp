#include "runtime/engine/tensors.h"

#include <nlohmann/json.hpp>
#include <onnx/onnx_pb.h>
#include <onnx/onnx-data.pb.h> // after onnx_pb.h, which defines ONNX_API

#include <cstring>
#include <limits>
#include <sstream>

#include "base/file_io.h"
#include "base/json.h"
#include "io/tensor_file.h"
#include "io/tensor_proto.h"
#include "runtime/engine/host_memory.h"
#include "runtime/engine/kernel.h"

namespace cleave::runtime {

Expected<at::ScalarType> scalarTypeOf(ir::DType dtype) {
  switch (dtype) {
  case ir::DType::F32: return at::kFloat;
  case ir::DType::F64: return at::kDouble;
  case ir::DType::F16: return at::kHalf;
  case ir::DType::BF16: return at::kBFloat16;
  case ir::DType::I8: return at::kChar;
  case ir::DType::U8: return at::kByte;
  case ir::DType::I16: return at::kShort;
  case ir::DType::I32: return at::kInt;
  case ir::DType::I64: return at::kLong;
  case ir::DType::Bool: return at::kBool;
  case ir::DType::C64: return at::kComplexFloat;
  case ir::DType::C128: return at::kComplexDouble;
  case ir::DType::F8E4M3FN: return at::kFloat8_e4m3fn;
  case ir::DType::F8E4M3FNUZ: return at::kFloat8_e4m3fnuz;
  case ir::DType::F8E5M2: return at::kFloat8_e5m2;
  case ir::DType::F8E5M2FNUZ: return at::kFloat8_e5m2fnuz;
  case ir::DType::F8E8M0: return at::kFloat8_e8m0fnu;
  case ir::DType::U16: return at::kInt;
  case ir::DType::U32: case ir::DType::U64: return at::kLong;
  default:
    return Error(ErrorCode::Unsupported) << "dtype " << ir::dtypeName(dtype) << " has no ATen tensor type here";
  }
}

std::optional<at::ScalarType> autocastTypeOf(Precision precision) {
  switch (precision) {
  case Precision::Fp16: return at::kHalf;
  case Precision::Bf16: return at::kBFloat16;
  case Precision::Fp32: break;
  }
  return std::nullopt;
}

ir::DType dtypeOf(at::ScalarType type) {
  switch (type) {
  case at::kFloat: return ir::DType::F32;
  case at::kDouble: return ir::DType::F64;
  case at::kHalf: return ir::DType::F16;
  case at::kBFloat16: return ir::DType::BF16;
  case at::kChar: return ir::DType::I8;
  case at::kByte: return ir::DType::U8;
  case at::kShort: return ir::DType::I16;
  case at::kInt: return ir::DType::I32;
  case at::kLong: return ir::DType::I64;
  case at::kBool: return ir::DType::Bool;
  case at::kComplexFloat: return ir::DType::C64;
  case at::kComplexDouble: return ir::DType::C128;
  case at::kFloat8_e4m3fn: return ir::DType::F8E4M3FN;
  case at::kFloat8_e4m3fnuz: return ir::DType::F8E4M3FNUZ;
  case at::kFloat8_e5m2: return ir::DType::F8E5M2;
  case at::kFloat8_e5m2fnuz: return ir::DType::F8E5M2FNUZ;
  case at::kFloat8_e8m0fnu: return ir::DType::F8E8M0;
  default: return ir::DType::Undefined;
  }
}

ir::DType dtypeOf(const at::Tensor& tensor) {
  return isStringTensor(tensor) ? ir::DType::String : dtypeOf(tensor.scalar_type());
}

bool isStringTensor(const at::Tensor& tensor) {
  return tensor.defined() && tensor.dtype() == caffe2::TypeMeta::Make<std::string>();
}

at::Tensor makeStringTensor(const std::vector<std::int64_t>& dims, std::vector<std::string> values) {
  // Made as an empty byte tensor (ATen's constructor accepts only its own dtypes), then resized
  // and given the std::string element type, which allocates and constructs the strings.
  at::Tensor tensor = at::empty({0}, at::TensorOptions().dtype(at::kByte));
  c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(dims);
  TORCH_CHECK(static_cast<std::int64_t>(values.size()) == impl->numel(), values.size(), " strings for ",
              impl->numel(), " elements");
  auto* data = static_cast<std::string*>(impl->raw_mutable_data(caffe2::TypeMeta::Make<std::string>()));
  for (std::size_t i = 0; i < values.size(); ++i)
    data[i] = std::move(values[i]);
  return tensor;
}

std::vector<std::string> stringValues(const at::Tensor& tensor) {
  TORCH_CHECK(isStringTensor(tensor), "expected a string tensor");
  const c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  const auto* base = static_cast<const std::string*>(impl->storage().data()) + impl->storage_offset();
  std::vector<std::string> values;
  values.reserve(static_cast<std::size_t>(tensor.numel()));
  at::IntArrayRef sizes = tensor.sizes(), strides = tensor.strides();
  std::vector<std::int64_t> index(sizes.size(), 0);
  for (std::int64_t n = 0; n < tensor.numel(); ++n) { // row-major walk over the (maybe strided) view
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < sizes.size(); ++d)
      offset += index[d] * strides[d];
    values.push_back(base[offset]);
    for (std::size_t d = sizes.size(); d-- > 0;) {
      if (++index[d] < sizes[d])
        break;
      index[d] = 0;
    }
  }
  return values;
}


at::Tensor tensorFromBytes(const void* data, std::size_t bytes, std::vector<std::int64_t> dims, at::ScalarType type) {
  at::Tensor tensor = at::empty(dims, at::TensorOptions().dtype(type));
  if (bytes)
    std::memcpy(tensor.data_ptr(), data, bytes);
  return tensor;
}

Expected<at::Tensor> tensorFromStored(const void* data, std::size_t bytes, std::vector<std::int64_t> dims,
                                      ir::DType dtype) {
  CLEAVE_TRY(at::ScalarType type, scalarTypeOf(dtype));
  std::int64_t elements = 1;
  for (std::int64_t d : dims)
    elements *= d;
  if (bytes != static_cast<std::size_t>(elements) * ir::dtypeSize(dtype))
    return Error(ErrorCode::ParseError) << bytes << " bytes of " << ir::dtypeName(dtype) << " for " << elements
                                        << " elements";
  if (dtype == ir::DType::U16)
    return tensorFromBytes(data, bytes, dims, at::kShort).to(at::kInt).bitwise_and(0xFFFF);
  if (dtype == ir::DType::U32)
    return tensorFromBytes(data, bytes, dims, at::kInt).to(at::kLong).bitwise_and(static_cast<std::int64_t>(0xFFFFFFFF));
  return tensorFromBytes(data, bytes, dims, type);
}

Expected<at::Tensor> loadParameter(const ir::Graph& graph, ir::ParamId param, bool asRows, bool ownMapping) {
  const ir::Parameter& p = graph.parameter(param);
  // Bytes in memory are read where they are; external data is read into `read` first.
  std::string read;
  std::optional<std::string_view> bytes = graph.parameterDataInMemory(param);
  if (!bytes) {
    CLEAVE_TRY(read, graph.readParameterData(param));
    bytes = read;
  }
  std::int64_t elements = 1;
  for (std::int64_t d : p.dims)
    elements *= d;
  std::size_t expected = static_cast<std::size_t>(elements) * ir::dtypeSize(p.dtype);
  if (bytes->size() != expected)
    return Error(ErrorCode::ParseError) << "parameter '" << p.name << "' has " << bytes->size()
                                        << " bytes, its shape needs " << expected;
  if (asRows && p.dtype == ir::DType::F32 && p.dims.size() == 2) {
    // One copy, straight into the transposed layout (the source may be unaligned: read strided).
    at::Tensor source = at::from_blob(const_cast<char*>(bytes->data()), p.dims, at::kFloat);
    at::Tensor rows = at::empty({p.dims[1], p.dims[0]}, at::kFloat);
    rows.copy_(source.t());
    return rows.t();
  }
  if (ownMapping && p.dtype == ir::DType::F32) {
    at::Tensor tensor = emptyInOwnMapping(p.dims, at::kFloat);
    std::memcpy(tensor.data_ptr(), bytes->data(), bytes->size());
    return tensor;
  }
  return tensorFromStored(bytes->data(), bytes->size(), p.dims, p.dtype);
}

namespace {
// A parsed TensorProto as a tensor (the containers' elements come parsed already).
Expected<at::Tensor> tensorFromParsed(const onnx::TensorProto& proto, const std::string& what) {
  std::optional<ir::DType> dtype = ir::dtypeFromOnnx(proto.data_type());
  if (!dtype)
    return Error(ErrorCode::ParseError) << what << ": unknown dtype code " << proto.data_type();
  std::vector<std::int64_t> dims(proto.dims().begin(), proto.dims().end());
  std::int64_t elements = 1;
  for (std::int64_t d : dims) {
    if (d < 0 || (d > 0 && elements > std::numeric_limits<std::int64_t>::max() / 16 / d))
      return Error(ErrorCode::ParseError) << what << ": dimension " << d << " is negative or too large";
    elements *= d;
  }
  if (*dtype == ir::DType::String) {
    if (proto.string_data_size() != elements)
      return Error(ErrorCode::ParseError) << what << ": " << proto.string_data_size() << " strings for " << elements
                                          << " elements";
    return makeStringTensor(dims, {proto.string_data().begin(), proto.string_data().end()});
  }
  if (Expected<at::ScalarType> type = scalarTypeOf(*dtype); !type) // a dtype ATen has no type for
    return std::move(type.error());
  std::size_t size = static_cast<std::size_t>(elements) * ir::dtypeSize(*dtype);
  if (proto.data_location() == onnx::TensorProto::EXTERNAL)
    return Error(ErrorCode::Unsupported) << what << ": external data in an attribute tensor";
  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != size)
      return Error(ErrorCode::ParseError) << what << ": raw_data has " << proto.raw_data().size() << " bytes, expected "
                                          << size;
    return tensorFromStored(proto.raw_data().data(), size, dims, *dtype);
  }
  // The typed fields (float_data, int32_data, ...) as raw_data would hold them (io/tensor_proto.h).
  CLEAVE_TRY(std::string raw, io::typedFieldsToRaw(proto, *dtype));
  if (raw.size() != size)
    return Error(ErrorCode::ParseError) << what << ": " << raw.size() / std::max(1, ir::dtypeSize(*dtype))
                                        << " values for " << elements << " elements";
  return tensorFromStored(raw.data(), size, dims, *dtype);
}
} // namespace

Expected<at::Tensor> tensorFromProto(std::string_view bytes, const std::string& what, std::string* name) {
  onnx::TensorProto proto;
  if (!proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return Error(ErrorCode::ParseError) << what << ": not a TensorProto";
  if (name)
    *name = proto.name();
  return tensorFromParsed(proto, what);
}

namespace {
Expected<at::Tensor> sequenceFromParsed(const onnx::SequenceProto& proto, const std::string& what) {
  if (proto.elem_type() != onnx::SequenceProto::TENSOR)
    return Error(ErrorCode::Unsupported) << what << ": a sequence of element type " << proto.elem_type()
                                         << " (only sequences of tensors run here)";
  std::vector<at::Tensor> elements;
  for (const onnx::TensorProto& element : proto.tensor_values()) {
    CLEAVE_TRY(at::Tensor tensor, tensorFromParsed(element, what));
    elements.push_back(std::move(tensor));
  }
  try {
    return makeSequence(elements, elements.empty() ? at::kFloat : elements[0].scalar_type());
  } catch (const std::exception& e) {
    return Error(ErrorCode::Unsupported) << what << ": " << e.what();
  }
}

Expected<at::Tensor> sequenceFromProto(std::string_view bytes, const std::string& what) {
  onnx::SequenceProto proto;
  if (!proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return Error(ErrorCode::ParseError) << what << ": not a SequenceProto";
  return sequenceFromParsed(proto, what);
}

Expected<at::Tensor> optionalFromProto(std::string_view bytes, const std::string& what) {
  onnx::OptionalProto proto;
  if (!proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return Error(ErrorCode::ParseError) << what << ": not an OptionalProto";
  if (proto.elem_type() == onnx::OptionalProto::TENSOR && proto.has_tensor_value())
    return tensorFromParsed(proto.tensor_value(), what);
  if (proto.elem_type() == onnx::OptionalProto::SEQUENCE && proto.has_sequence_value())
    return sequenceFromParsed(proto.sequence_value(), what);
  if (proto.elem_type() == onnx::OptionalProto::TENSOR || proto.elem_type() == onnx::OptionalProto::SEQUENCE ||
      proto.elem_type() == onnx::OptionalProto::UNDEFINED)
    return at::Tensor(); // empty
  return Error(ErrorCode::Unsupported) << what << ": an optional of element type " << proto.elem_type();
}
} // namespace

Expected<at::Tensor> valueFromProto(std::string_view bytes, const std::string& what, ProtoKind kind) {
  switch (kind) {
  case ProtoKind::Sequence: return sequenceFromProto(bytes, what);
  case ProtoKind::Optional: return optionalFromProto(bytes, what);
  default: return tensorFromProto(bytes, what);
  }
}

Expected<TensorMap> readTensorFile(const std::string& path) {
  CLEAVE_TRY(std::string text, readFile(path));
  CLEAVE_TRY(std::vector<io::TensorFileEntry> entries, io::parseTensorFile(text, path));
  TensorMap tensors;
  for (io::TensorFileEntry& entry : entries) {
    if (entry.dtype == ir::DType::String) {
      tensors[entry.name] = makeStringTensor(entry.dims, std::move(entry.strings));
      continue;
    }
    CLEAVE_TRY(at::ScalarType type, scalarTypeOf(entry.dtype));
    try {
      if (entry.dtype == ir::DType::I64)
        tensors[entry.name] = at::from_blob(entry.ints.data(), entry.dims, at::TensorOptions().dtype(at::kLong)).clone();
      else
        tensors[entry.name] =
            at::from_blob(entry.values.data(), entry.dims, at::TensorOptions().dtype(at::kDouble)).to(type).clone();
    } catch (const c10::Error& e) {
      return Error(ErrorCode::InvalidArgument) << path << ": '" << entry.name << "': " << e.what_without_backtrace();
    }
  }
  return tensors;
}

Expected<std::string> formatTensorFile(const TensorMap& tensors) {
  nlohmann::json doc = nlohmann::json::object();
  for (const auto& [name, original] : tensors) {
    CLEAVE_CHECK(requirePlainTensor(original, name));
    if (isStringTensor(original)) {
      doc[name] = {{"dtype", "string"}, {"dims", original.sizes().vec()}, {"data", stringValues(original)}};
      continue;
    }
    at::Tensor tensor = original.to(at::kCPU).contiguous();
    std::string_view dtype = io::tensorFileDtypeName(dtypeOf(tensor.scalar_type()));
    if (dtype.empty())
      return Error(ErrorCode::Unsupported) << "tensor '" << name << "' has dtype " << tensor.scalar_type()
                                           << ", which tensor files do not hold";
    nlohmann::json spec;
    spec["dtype"] = dtype;
    spec["dims"] = tensor.sizes().vec();
    nlohmann::json data = nlohmann::json::array();
    if (tensor.scalar_type() == at::kLong || tensor.scalar_type() == at::kInt || tensor.scalar_type() == at::kShort ||
        tensor.scalar_type() == at::kChar || tensor.scalar_type() == at::kByte) {
      at::Tensor ints = tensor.to(at::kLong).flatten();
      const std::int64_t* p = ints.data_ptr<std::int64_t>();
      for (std::int64_t i = 0; i < ints.numel(); ++i)
        data.push_back(p[i]);
    } else if (tensor.scalar_type() == at::kBool) {
      at::Tensor flags = tensor.flatten();
      const bool* p = flags.data_ptr<bool>();
      for (std::int64_t i = 0; i < flags.numel(); ++i)
        data.push_back(p[i]);
    } else {
      at::Tensor floats = tensor.to(at::kDouble).flatten();
      const double* p = floats.data_ptr<double>();
      for (std::int64_t i = 0; i < floats.numel(); ++i)
        data.push_back(p[i]);
    }
    spec["data"] = std::move(data);
    doc[name] = std::move(spec);
  }
  return toJsonText(doc) + "\n";
}

Status writeTensorFile(const TensorMap& tensors, const std::string& path) {
  CLEAVE_TRY(std::string text, formatTensorFile(tensors));
  return writeFileAtomically(path, text);
}

Expected<at::Tensor> randomTensor(const ir::Graph& graph, ir::ValueId value, std::uint64_t seed, std::int64_t intHigh,
                                  const std::map<std::string, std::int64_t>& dimOverrides) {
  std::string name(graph.valueName(value));
  if (graph.valueKind(value) != ir::ValueKind::Tensor)
    return Error(ErrorCode::Unsupported) << "input '" << name << "' is not a tensor";
  if (graph.dtype(value) == ir::DType::String)
    return Error(ErrorCode::Unsupported) << "input '" << name
                                         << "' holds strings, which cleave does not make up: give it with --inputs";
  CLEAVE_TRY(at::ScalarType type, scalarTypeOf(graph.dtype(value)));
  std::vector<std::int64_t> dims;
  for (const ir::DimEntry& dim : graph.dims(value)) {
    if (dim.extent >= 0) {
      dims.push_back(dim.extent);
      continue;
    }
    auto found = dim.symbol ? dimOverrides.find(std::string(graph.symbolName(dim.symbol))) : dimOverrides.end();
    dims.push_back(found != dimOverrides.end() ? found->second : 1);
  }
  // One generator per input, seeded from the seed and the input's name (FNV-1a): the same input
  // gets the same tensor whichever graph (the model, or a submodel of its cut) asks for it.
  std::uint64_t mixed = 1469598103934665603ull ^ seed;
  for (char ch : name)
    mixed = (mixed ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  at::Generator generator = at::detail::createCPUGenerator(mixed);
  if (at::isFloatingType(type))
    return at::randn(dims, generator, at::TensorOptions().dtype(at::kFloat)).to(type);
  if (type == at::kBool)
    return at::randint(0, 2, dims, generator, at::TensorOptions().dtype(at::kLong)).to(at::kBool);
  return at::randint(0, intHigh, dims, generator, at::TensorOptions().dtype(type));
}

Expected<TensorMap> randomInputs(const ir::Graph& graph, std::uint64_t seed, std::int64_t intHigh,
                                 const std::map<std::string, std::int64_t>& dimOverrides) {
  TensorMap inputs;
  for (ir::NodeId node : graph.inputNodes()) {
    ir::ValueId value = graph.outputs(node)[0];
    Expected<at::Tensor> tensor = Error(ErrorCode::InvalidArgument);
    try { // a declared shape can ask for more memory than the machine has
      tensor = randomTensor(graph, value, seed, intHigh, dimOverrides);
    } catch (const c10::Error& e) {
      return Error(ErrorCode::InvalidArgument) << "cannot make random input '" << graph.valueName(value)
                                               << "': " << e.what_without_backtrace();
    }
    if (!tensor)
      return std::move(tensor.error());
    inputs[std::string(graph.valueName(value))] = std::move(*tensor);
  }
  return inputs;
}

Status requirePlainTensor(const at::Tensor& value, const std::string& name) {
  if (value.defined() && !value.is_nested())
    return {};
  return Error(ErrorCode::Unsupported) << "'" << name << "' is " << (value.defined() ? "a sequence" : "an empty optional")
                                       << ": save it as .pb or to a folder";
}

std::string summarize(const at::Tensor& original) {
  if (!original.defined())
    return "an empty optional";
  if (original.is_nested()) { // "sequence of 2: f32[2,3] ..., f32[1,3] ..."
    std::vector<at::Tensor> elements = original.unbind(0);
    std::string text = "sequence of " + std::to_string(elements.size());
    for (std::size_t i = 0; i < elements.size(); ++i)
      text += (i ? ", " : ": ") + summarize(elements[i]);
    return text;
  }
  if (isStringTensor(original)) { // string[2] "monday", "tuesday"
    std::ostringstream out;
    out << "string" << original.sizes();
    std::vector<std::string> values = stringValues(original);
    for (std::size_t i = 0; i < values.size() && i < 4; ++i)
      out << (i ? ", \"" : " \"") << values[i] << "\"";
    out << (values.size() > 4 ? ", ..." : "");
    return out.str();
  }
  at::Tensor tensor = original.to(at::kCPU);
  std::ostringstream out;
  out << ir::dtypeName(dtypeOf(tensor.scalar_type())) << "[";
  for (std::size_t i = 0; i < tensor.sizes().size(); ++i)
    out << (i ? "," : "") << tensor.sizes()[i];
  out << "]";
  if (tensor.numel() > 0 && (at::isFloatingType(tensor.scalar_type()) || at::isIntegralType(tensor.scalar_type(), true))) {
    at::Tensor values = tensor.to(at::kDouble);
    char buffer[160];
    std::snprintf(buffer, sizeof buffer, " mean %.6g std %.6g min %.6g max %.6g", values.mean().item<double>(),
                  tensor.numel() > 1 ? values.std().item<double>() : 0.0, values.min().item<double>(),
                  values.max().item<double>());
    out << buffer;
  }
  return out.str();
}

} // namespace cleave::runtime
