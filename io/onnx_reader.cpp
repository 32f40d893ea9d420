// io/onnx_reader.cpp - ONNX ModelProto -> ir::Graph.
// Complexity: O(file size) to parse, O(V + E) to build; shape inference is onnx's own (linear in
// practice). The protobuf tree lives in an arena and is dropped once the graph is built.
#include <google/protobuf/arena.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <unistd.h>
#include <unordered_map>
#include <unordered_set>

#include "io/onnx.h"
#include "ir/builder.h"

namespace cleave::io {
namespace {
using ir::DType;

// "/layer1/layer1.0/conv1/Conv" -> "layer1.0.conv1". torch's exporter names nodes by the module
// path, each component already qualified by its parent ("layer1.0" under "layer1").
std::string scopeFromNodeName(const std::string& name) {
  if (name.empty() || name[0] != '/')
    return {};
  std::vector<std::string_view> parts = splitString(std::string_view(name).substr(1), '/');
  parts.pop_back(); // the op itself
  std::string scope;
  for (std::string_view part : parts) {
    if (part.empty())
      continue;
    bool qualifiedByParent = !scope.empty() && part.size() > scope.size() &&
                             part.starts_with(scope) && part[scope.size()] == '.';
    scope = qualifiedByParent ? std::string(part)
                              : scope + (scope.empty() ? "" : ".") + std::string(part);
  }
  return scope;
}

Expected<DType> toDType(int code, const std::string& what) {
  std::optional<DType> dtype = ir::dtypeFromOnnx(code);
  if (!dtype || *dtype == DType::Undefined)
    return Error(ErrorCode::ParseError) << what << " has unknown data type " << code;
  return *dtype;
}

// Fills `result` in place (reusing its storage: this runs once per value of the model).
Status fillValueType(const onnx::TypeProto& type, const std::string& what, ir::ValueType& result) {
  result.kind = ir::ValueKind::Unknown;
  result.dtype = DType::Undefined;
  result.shape.rankKnown = false;
  result.shape.dims.clear();
  result.typeName.clear();
  result.bytes = -1;
  switch (type.value_case()) {
  case onnx::TypeProto::kTensorType: {
    const auto& tensor = type.tensor_type();
    result.kind = ir::ValueKind::Tensor;
    if (tensor.elem_type() != 0) {
      CLEAVE_TRY(result.dtype, toDType(tensor.elem_type(), what));
    }
    if (tensor.has_shape()) {
      result.shape.rankKnown = true;
      for (const auto& dim : tensor.shape().dim()) {
        if (dim.has_dim_value())
          result.shape.dims.push_back(ir::Dim{dim.dim_value(), {}});
        else
          result.shape.dims.push_back(ir::Dim{-1, dim.has_dim_param() ? dim.dim_param() : ""});
      }
    }
    return {};
  }
  case onnx::TypeProto::kSequenceType: result.kind = ir::ValueKind::Sequence; result.typeName = "seq"; return {};
  case onnx::TypeProto::kOptionalType: result.kind = ir::ValueKind::Sequence; result.typeName = "optional"; return {};
  case onnx::TypeProto::kMapType: result.kind = ir::ValueKind::Other; result.typeName = "map"; return {};
  case onnx::TypeProto::kSparseTensorType: result.kind = ir::ValueKind::Other; result.typeName = "sparse_tensor"; return {};
  default: return {}; // Unknown
  }
}

Expected<ir::ValueType> toValueType(const onnx::TypeProto& type, const std::string& what) {
  ir::ValueType result;
  CLEAVE_CHECK(fillValueType(type, what, result));
  return result;
}

// Typed repeated fields -> little-endian raw bytes, as raw_data would hold them.
template <typename Source, typename Element>
void appendAs(std::string& out, const Source& values) {
  for (auto value : values) {
    auto element = static_cast<Element>(value);
    out.append(reinterpret_cast<const char*>(&element), sizeof element);
  }
}

Expected<std::string> typedFieldsToRaw(const onnx::TensorProto& tensor, DType dtype) {
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
  case DType::U8: case DType::Bool: appendAs<decltype(tensor.int32_data()), std::uint8_t>(raw, tensor.int32_data()); break;
  default:
    return Error(ErrorCode::Unsupported) << "initializer '" << tensor.name() << "' of type "
                                         << ir::dtypeName(dtype) << " is not supported";
  }
  return raw;
}

// Declared types (graph inputs, value_info, outputs) by value name, dense by the builder's
// string ids: the names are interned once, and node outputs later hit the same entries.
struct DeclaredTypes {
  std::vector<const onnx::TypeProto*> types;
  void add(ir::GraphBuilder& builder, const onnx::ValueInfoProto& info) {
    if (info.type().value_case() == onnx::TypeProto::VALUE_NOT_SET)
      return;
    std::uint32_t id = builder.intern(info.name());
    if (id >= types.size())
      types.resize(std::max<std::size_t>(id + 1, types.size() * 2), nullptr);
    types[id] = &info.type();
  }
  const onnx::TypeProto* find(const ir::GraphBuilder& builder, std::string_view name) const {
    std::uint32_t id = builder.findString(name);
    return id < types.size() ? types[id] : nullptr;
  }
};

DeclaredTypes collectDeclaredTypes(ir::GraphBuilder& builder, const onnx::GraphProto& graph) {
  DeclaredTypes declared;
  for (const auto& info : graph.input())
    declared.add(builder, info);
  for (const auto& info : graph.value_info())
    declared.add(builder, info);
  for (const auto& info : graph.output())
    declared.add(builder, info);
  return declared;
}

class OnnxGraphReader {
public:
  OnnxGraphReader(const onnx::ModelProto& model, std::string sourcePath, ir::GraphBuilder builder,
                  DeclaredTypes declared)
      : model_(model), sourcePath_(std::move(sourcePath)), builder_(std::move(builder)),
        declared_(std::move(declared)) {}
  // Copies everything into the builder; the protobuf tree is not needed afterwards.
  Status read();
  ir::GraphBuilder takeBuilder() { return std::move(builder_); }

private:
  Status readModelInfo();
  Status readInitializer(const onnx::TensorProto& tensor);
  Status readNode(const onnx::NodeProto& node);
  Expected<ir::Attribute> readAttribute(const onnx::AttributeProto& attr, const std::string& nodeName);
  Status fillTypeOf(const std::string& valueName, ir::ValueType& type) const;
  void collectCaptures(const onnx::GraphProto& body, std::unordered_set<std::string> defined,
                       std::vector<std::string>& captures, std::unordered_set<std::string>& seen);

  const onnx::ModelProto& model_;
  std::string sourcePath_;
  ir::GraphBuilder builder_;
  DeclaredTypes declared_;
  ir::NodeSpec spec_; // reused for every node: its strings and vectors keep their capacity
};



Status OnnxGraphReader::readModelInfo() {
  ir::ModelInfo& info = builder_.modelInfo();
  info.graphName = model_.graph().name();
  info.irVersion = model_.ir_version();
  info.producerName = model_.producer_name();
  info.producerVersion = model_.producer_version();
  info.sourcePath = sourcePath_;
  for (const auto& prop : model_.metadata_props())
    info.metadata.emplace_back(prop.key(), prop.value());
  bool hasDefaultDomain = false;
  for (const auto& opset : model_.opset_import()) {
    info.opsetImports.emplace_back(opset.domain(), opset.version());
    if (opset.domain().empty() || opset.domain() == "ai.onnx") {
      hasDefaultDomain = true;
      if (opset.version() < kMinOnnxOpset)
        return Error(ErrorCode::Unsupported) << "opset " << opset.version()
                                             << " is not supported (cleave reads opset "
                                             << kMinOnnxOpset << " and up)";
    }
  }
  if (!hasDefaultDomain && model_.graph().node_size() > 0)
    return Error(ErrorCode::ParseError) << "model imports no ai.onnx opset";
  return {};
}

Status OnnxGraphReader::fillTypeOf(const std::string& valueName, ir::ValueType& type) const {
  const onnx::TypeProto* declared = declared_.find(builder_, valueName);
  if (!declared) {
    type = ir::ValueType{};
    return {};
  }
  return fillValueType(*declared, "value '" + valueName + "'", type);
}

Status OnnxGraphReader::readInitializer(const onnx::TensorProto& tensor) {
  const std::string what = "initializer '" + tensor.name() + "'";
  if (tensor.name().empty())
    return Error(ErrorCode::ParseError) << "an initializer has no name";
  CLEAVE_TRY(DType dtype, toDType(tensor.data_type(), what));
  ir::Parameter param;
  param.name = tensor.name();
  param.dtype = dtype;
  std::int64_t elements = 1;
  for (std::int64_t dim : tensor.dims()) {
    if (dim < 0)
      return Error(ErrorCode::ParseError) << what << " has negative dimension " << dim;
    param.dims.push_back(dim);
    elements *= dim;
  }
  param.bytes = elements * ir::dtypeSize(dtype);
  if (tensor.data_location() == onnx::TensorProto::EXTERNAL) {
    param.data.source = ir::ParameterData::Source::External;
    for (const auto& entry : tensor.external_data()) {
      if (entry.key() == "location")
        param.data.externalPath = entry.value();
      else if (entry.key() == "offset" || entry.key() == "length") {
        char* end = nullptr;
        unsigned long long number = std::strtoull(entry.value().c_str(), &end, 10);
        if (entry.value().empty() || *end != '\0')
          return Error(ErrorCode::ParseError) << what << " has a bad external data " << entry.key()
                                              << " '" << entry.value() << "'";
        (entry.key() == "offset" ? param.data.offset : param.data.length) = number;
      }
    }
    if (param.data.externalPath.empty())
      return Error(ErrorCode::ParseError) << what << " has external data without a location";
    if (param.data.length == 0)
      param.data.length = static_cast<std::uint64_t>(param.bytes);
  } else if (tensor.has_raw_data()) {
    if (static_cast<std::int64_t>(tensor.raw_data().size()) != param.bytes)
      return Error(ErrorCode::ParseError) << what << " holds " << tensor.raw_data().size()
                                          << " bytes, its shape needs " << param.bytes;
    param.data = builder_.appendInlineData(tensor.raw_data());
  } else {
    CLEAVE_TRY(std::string raw, typedFieldsToRaw(tensor, dtype));
    if (static_cast<std::int64_t>(raw.size()) != param.bytes)
      return Error(ErrorCode::ParseError) << what << " holds " << raw.size()
                                          << " bytes, its shape needs " << param.bytes;
    param.data = builder_.appendInlineData(raw);
  }
  ir::ValueType type = ir::ValueType::tensor(dtype, param.dims);
  builder_.addParameter(std::move(param), type);
  return {};
}

// Names read inside a subgraph that it does not define itself (recursively): the outer values
// the node depends on. Order: first use.
void OnnxGraphReader::collectCaptures(const onnx::GraphProto& body,
                                      std::unordered_set<std::string> defined,
                                      std::vector<std::string>& captures,
                                      std::unordered_set<std::string>& seen) {
  for (const auto& input : body.input())
    defined.insert(input.name());
  for (const auto& init : body.initializer())
    defined.insert(init.name());
  for (const auto& node : body.node()) {
    for (const std::string& input : node.input())
      if (!input.empty() && !defined.count(input) && seen.insert(input).second)
        captures.push_back(input);
    for (const auto& attr : node.attribute()) {
      if (attr.has_g())
        collectCaptures(attr.g(), defined, captures, seen);
      for (const auto& g : attr.graphs())
        collectCaptures(g, defined, captures, seen);
    }
    for (const std::string& output : node.output())
      defined.insert(output);
  }
  for (const auto& output : body.output())
    if (!defined.count(output.name()) && seen.insert(output.name()).second)
      captures.push_back(output.name());
}

Expected<ir::Attribute> OnnxGraphReader::readAttribute(const onnx::AttributeProto& attr,
                                                       const std::string& nodeName) {
  ir::Attribute out;
  out.name = attr.name();
  using A = onnx::AttributeProto;
  switch (attr.type()) {
  case A::INT: out.kind = ir::AttrKind::Int; out.intValue = attr.i(); break;
  case A::FLOAT: out.kind = ir::AttrKind::Float; out.floatValue = attr.f(); break;
  case A::STRING: out.kind = ir::AttrKind::String; out.text = attr.s(); break;
  case A::INTS: out.kind = ir::AttrKind::Ints; out.ints.assign(attr.ints().begin(), attr.ints().end()); break;
  case A::FLOATS: out.kind = ir::AttrKind::Floats; out.floats.assign(attr.floats().begin(), attr.floats().end()); break;
  case A::STRINGS: out.kind = ir::AttrKind::Strings; out.strings.assign(attr.strings().begin(), attr.strings().end()); break;
  case A::TENSOR: out.kind = ir::AttrKind::Tensor; attr.t().SerializeToString(&out.text); break;
  case A::GRAPH: out.kind = ir::AttrKind::Graph; attr.g().SerializeToString(&out.text); break;
  default:
    return Error(ErrorCode::Unsupported) << "node '" << nodeName << "' attribute '" << attr.name()
                                         << "' has unsupported type "
                                         << A::AttributeType_Name(attr.type());
  }
  return out;
}

Status OnnxGraphReader::readNode(const onnx::NodeProto& node) {
  ir::NodeSpec& spec = spec_;
  spec.kind = ir::NodeKind::Op;
  spec.name = node.name();
  spec.domain = node.domain() == "ai.onnx" ? std::string() : node.domain();
  spec.opType = node.op_type();
  if (spec.opType.empty())
    return Error(ErrorCode::ParseError) << "node '" << node.name() << "' has no op_type";
  spec.scope = scopeFromNodeName(node.name());
  spec.inputs.resize(node.input_size());
  for (int i = 0; i < node.input_size(); ++i)
    spec.inputs[i] = node.input(i);
  spec.outputs.resize(node.output_size());
  for (int i = 0; i < node.output_size(); ++i) {
    ir::OutputSpec& output = spec.outputs[i];
    output.name = node.output(i);
    if (output.name.empty()) // an omitted optional output still needs a unique value name
      output.name = (node.name().empty() ? node.op_type() : node.name()) + "__unused_output_" +
                    std::to_string(i);
    CLEAVE_CHECK(fillTypeOf(output.name, output.type));
  }
  spec.attributes.clear();
  spec.implicitInputs = 0;
  if (node.attribute_size() > 0) {
    std::vector<std::string> captures;
    std::unordered_set<std::string> seen;
    std::string displayName = node.name().empty() ? node.op_type() : node.name();
    for (const auto& attr : node.attribute()) {
      CLEAVE_TRY(ir::Attribute converted, readAttribute(attr, displayName));
      if (attr.type() == onnx::AttributeProto::GRAPH)
        collectCaptures(attr.g(), {}, captures, seen);
      spec.attributes.push_back(std::move(converted));
    }
    spec.implicitInputs = static_cast<std::uint32_t>(captures.size());
    for (std::string& capture : captures)
      spec.inputs.push_back(std::move(capture));
  }
  builder_.addNode(spec);
  return {};
}

Status OnnxGraphReader::read() {
  CLEAVE_CHECK(readModelInfo());
  const onnx::GraphProto& graph = model_.graph();
  if (graph.sparse_initializer_size() > 0)
    return Error(ErrorCode::Unsupported) << "sparse initializers are not supported";

  std::size_t inlineBytes = 0;
  for (const auto& tensor : graph.initializer())
    inlineBytes += tensor.raw_data().size();
  builder_.reserveInlineData(inlineBytes);
  std::unordered_set<std::string_view> initializerNames;
  for (const auto& tensor : graph.initializer()) {
    initializerNames.insert(tensor.name());
    CLEAVE_CHECK(readInitializer(tensor));
  }
  for (const auto& input : graph.input()) {
    if (initializerNames.count(input.name()))
      continue; // old-style models list initializers as inputs too
    if (input.name().empty())
      return Error(ErrorCode::ParseError) << "a graph input has no name";
    CLEAVE_TRY(ir::ValueType type, toValueType(input.type(), "input '" + input.name() + "'"));
    builder_.addInput(input.name(), type);
  }
  for (const auto& node : graph.node())
    CLEAVE_CHECK(readNode(node));
  std::vector<std::string> outputs;
  for (const auto& output : graph.output())
    outputs.push_back(output.name());
  builder_.setOutputs(std::move(outputs));
  return {};
}

bool everyOutputTyped(const ir::GraphBuilder& builder, const onnx::GraphProto& graph,
                      const DeclaredTypes& declared) {
  for (const auto& node : graph.node())
    for (const std::string& output : node.output())
      if (!output.empty() && !declared.find(builder, output))
        return false;
  return true;
}

} // namespace

namespace {
// Parses the file into an arena-held protobuf tree and copies it into a GraphBuilder. The arena
// is released when this returns, before the builder's finish() allocates the graph: the two
// never coexist, which keeps peak memory near max(protobuf tree, IR) instead of their sum.
Expected<ir::GraphBuilder> readIntoBuilder(const std::string& path, const OnnxReadOptions& options) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return Error(ErrorCode::InvalidArgument) << "'" << path << "' is a directory, not a model";
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    return Error(ErrorCode::NotFound) << "cannot open '" << path << "': " << std::strerror(errno);
  google::protobuf::Arena arena;
  auto* model = google::protobuf::Arena::CreateMessage<onnx::ModelProto>(&arena);
  bool parsed;
  {
    google::protobuf::io::FileInputStream stream(fd);
    google::protobuf::io::CodedInputStream coded(&stream);
    coded.SetTotalBytesLimit(INT32_MAX);
    parsed = model->ParseFromCodedStream(&coded) && coded.ConsumedEntireMessage();
  }
  ::close(fd);
  if (!parsed)
    return Error(ErrorCode::ParseError) << "'" << path
                                        << "' is not a valid ONNX model (protobuf parse failed: "
                                           "truncated or corrupt file?)";
  if (!model->has_graph() || model->ir_version() <= 0)
    return Error(ErrorCode::ParseError) << "'" << path
                                        << "' is not an ONNX model (no graph or ir_version)";
  const onnx::GraphProto& graph = model->graph();
  ir::GraphBuilder builder(ir::SourceFormat::Onnx);
  builder.reserve(graph.node_size() + graph.input_size() + graph.initializer_size(),
                  graph.node_size() * 2 + graph.input_size() + graph.initializer_size());
  DeclaredTypes declared = collectDeclaredTypes(builder, graph);
  bool infer = options.shapeInference == ShapeInference::Always ||
               (options.shapeInference == ShapeInference::Auto &&
                !everyOutputTyped(builder, graph, declared));
  // Inference runs on a copy: it also writes value_info into subgraph bodies (Loop, If), and
  // those attributes must be written back exactly as they were read.
  const onnx::ModelProto* typed = model;
  if (infer) {
    auto* inferred = google::protobuf::Arena::CreateMessage<onnx::ModelProto>(&arena);
    inferred->CopyFrom(*model);
    try {
      onnx::shape_inference::InferShapes(*inferred, onnx::OpSchemaRegistry::Instance(),
                                         onnx::ShapeInferenceOptions{false, 0, false});
    } catch (const std::exception& e) {
      return Error(ErrorCode::ParseError) << "'" << path << "': onnx shape inference failed: "
                                          << e.what();
    }
    typed = inferred;
    declared = collectDeclaredTypes(builder, typed->graph());
  }
  OnnxGraphReader reader(*model, path, std::move(builder), std::move(declared));
  if (Status read = reader.read(); !read)
    return std::move(read.error().withContext(path));
  return reader.takeBuilder();
}
} // namespace

Expected<ir::Graph> readOnnx(const std::string& path, const OnnxReadOptions& options) {
  Expected<ir::GraphBuilder> builder = readIntoBuilder(path, options);
  if (!builder)
    return std::move(builder.error());
  Expected<ir::Graph> graph = std::move(*builder).finish();
  if (!graph)
    return std::move(graph.error().withContext(path));
  return graph;
}

} // namespace cleave::io
