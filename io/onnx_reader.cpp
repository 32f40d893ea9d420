// io/onnx_reader.cpp - ONNX file -> ir::Graph, by scanning the protobuf wire format.
//
// The file is memory-mapped and scanned with a bounds-checked wire reader (io/protobuf_wire.h):
// no protobuf message tree is built, and initializer raw_data stays in the file, referenced by
// offset (ParameterData::Source::ModelFile) and read only when a writer or runtime asks for it.
// libprotobuf/libonnx still decode what is rare and intricate: node attributes, tensors stored in
// typed fields, and onnx's shape inference when a node output has no declared type.
//
// Order of the graph: initializers, then graph inputs (those not also initializers), then nodes,
// then outputs: the order ONNX files list them, so a read-write-read cycle is a fixed point.
// Complexity: O(file bytes outside raw_data + V + E). Memory: the IR plus span lists; weights
// are not copied.
// Fails: see io/onnx.h; a scan failure names the part that is corrupt.
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
#include <onnx/version_converter/convert.h>

#include <cstring>
#include <deque>
#include <map>
#include <filesystem>
#include <unordered_set>

#include "base/file_io.h"
#include "base/isolated_call.h"
#include "base/mapped_file.h"
#include "io/exporter_signature.h"
#include "io/fixed_batch.h"
#include "io/fixed_parameters.h"
#include "io/onnx.h"
#include "io/onnx_inference.h"
#include "io/tensor_proto.h"
#include "io/protobuf_wire.h"
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
  if (ir::isSubByte(*dtype))
    return Error(ErrorCode::Unsupported) << what << " has type " << ir::dtypeName(*dtype)
                                         << ", packed several to a byte: " << kNoAtenType;
  return *dtype;
}

Error corrupt(const std::string& what) {
  return Error(ErrorCode::ParseError) << "not a valid ONNX model (" << what
                                      << " is truncated or corrupt)";
}

// Field numbers of onnx.proto (IR version 8) that the scanner reads.
namespace field {
enum Model : std::uint32_t { kIrVersion = 1, kProducerName = 2, kProducerVersion = 3, kGraph = 7,
                             kOpsetImport = 8, kMetadataProps = 14 };
enum Opset : std::uint32_t { kOpsetDomain = 1, kOpsetVersion = 2 };
enum Graph : std::uint32_t { kNode = 1, kGraphName = 2, kInitializer = 5, kInput = 11, kOutput = 12,
                             kValueInfo = 13, kSparseInitializer = 15 };
enum Node : std::uint32_t { kNodeInput = 1, kNodeOutput = 2, kNodeName = 3, kOpType = 4,
                            kAttribute = 5, kDomain = 7, kNodeMetadata = 9 };
enum Tensor : std::uint32_t { kDims = 1, kDataType = 2, kFloatData = 4, kInt32Data = 5,
                              kStringData = 6, kInt64Data = 7, kTensorName = 8, kRawData = 9,
                              kDoubleData = 10, kUint64Data = 11, kExternalData = 13,
                              kDataLocation = 14 };
enum ValueInfo : std::uint32_t { kValueName = 1, kValueType = 2, kValueMetadata = 4 };
enum Type : std::uint32_t { kTensorType = 1, kSequenceType = 4, kMapType = 5,
                            kSparseTensorType = 8, kOptionalType = 9 };
enum TensorType : std::uint32_t { kElemType = 1, kShape = 2 };
enum Shape : std::uint32_t { kDim = 1 };
enum Dim : std::uint32_t { kDimValue = 1, kDimParam = 2 };
enum Entry : std::uint32_t { kKey = 1, kValue = 2 };
} // namespace field

bool readKeyValue(std::string_view entry, std::string_view& key, std::string_view& value) {
  return forEachField(entry, [&](std::uint32_t number, WireType type, WireReader& r, bool& ok) {
    if (number == field::kKey)
      return ok = readText(type, r, key), true;
    if (number == field::kValue)
      return ok = readText(type, r, value), true;
    return false;
  });
}

// Decodes a serialized TypeProto into `result`, reusing its storage.
Status fillValueType(std::string_view typeBytes, const std::string& what, ir::ValueType& result) {
  result.kind = ir::ValueKind::Unknown;
  result.dtype = DType::Undefined;
  result.shape.rankKnown = false;
  result.shape.dims.clear();
  result.typeName.clear();
  result.bytes = -1;
  std::string_view tensorType;
  std::int64_t negativeDim = 0;
  bool ok = forEachField(typeBytes, [&](std::uint32_t number, WireType type, WireReader& r, bool& fine) {
    switch (number) {
    case field::kTensorType: fine = readText(type, r, tensorType); result.kind = ir::ValueKind::Tensor; return true;
    case field::kSequenceType: result.kind = ir::ValueKind::Sequence; result.typeName = "seq"; return false;
    case field::kOptionalType: result.kind = ir::ValueKind::Sequence; result.typeName = "optional"; return false;
    case field::kMapType: result.kind = ir::ValueKind::Other; result.typeName = "map"; return false;
    case field::kSparseTensorType: result.kind = ir::ValueKind::Other; result.typeName = "sparse_tensor"; return false;
    default: return false;
    }
  });
  if (!ok)
    return corrupt("the type of " + what);
  if (result.kind != ir::ValueKind::Tensor)
    return {};
  std::int64_t elemType = 0;
  ok = forEachField(tensorType, [&](std::uint32_t number, WireType type, WireReader& r, bool& fine) {
    if (number == field::kElemType && type == WireType::Varint) {
      std::uint64_t value;
      fine = r.readVarint(value);
      elemType = static_cast<std::int64_t>(value);
      return true;
    }
    if (number != field::kShape || type != WireType::Bytes)
      return false;
    std::string_view shape;
    if (!(fine = r.readBytes(shape)))
      return true;
    result.shape.rankKnown = true;
    fine = forEachField(shape, [&](std::uint32_t n, WireType t, WireReader& sr, bool& dimOk) {
      std::string_view dim;
      if (n != field::kDim || !(dimOk = readText(t, sr, dim)))
        return n == field::kDim;
      ir::Dim& out = result.shape.dims.emplace_back();
      dimOk = forEachField(dim, [&](std::uint32_t dn, WireType dt, WireReader& dr, bool& valueOk) {
        if (dn == field::kDimValue && dt == WireType::Varint) {
          std::uint64_t value;
          valueOk = dr.readVarint(value);
          out.extent = static_cast<std::int64_t>(value);
          if (out.extent < 0)
            negativeDim = out.extent;
          return true;
        }
        std::string_view param;
        if (dn == field::kDimParam && (valueOk = readText(dt, dr, param))) {
          out.symbol = std::string(param);
          return true;
        }
        return dn == field::kDimParam;
      });
      return true;
    });
    return true;
  });
  if (!ok)
    return corrupt("the type of " + what);
  if (elemType != 0) {
    CLEAVE_TRY(result.dtype, toDType(static_cast<int>(elemType), what));
  }
  if (negativeDim < 0)
    return Error(ErrorCode::InvalidArgument) << what << " has negative dimension " << negativeDim;
  return ir::checkTensorSize(result, what);
}

// Declared types (graph inputs, value_info, outputs) by value name, dense by the builder's
// string ids: each name is interned once and node outputs later hit the same entry.
class DeclaredTypes {
public:
  void add(ir::GraphBuilder& builder, std::string_view name, std::string_view type) {
    std::uint32_t id = builder.intern(name);
    if (id >= types_.size())
      types_.resize(std::max<std::size_t>(id + 1, types_.size() * 2));
    types_[id] = type;
    present_.resize(types_.size(), false);
    present_[id] = true;
  }
  const std::string_view* find(const ir::GraphBuilder& builder, std::string_view name) const {
    std::uint32_t id = builder.findString(name);
    return id < types_.size() && present_[id] ? &types_[id] : nullptr;
  }
  // Types decoded from onnx's shape inference, kept alive here.
  std::string_view own(std::string bytes) { return owned_.emplace_back(std::move(bytes)); }

private:
  std::vector<std::string_view> types_;
  std::vector<bool> present_;
  std::deque<std::string> owned_;
};

// The graph's repeated fields, as spans into the file, in file order.
struct GraphSpans {
  std::string_view name;
  std::vector<std::string_view> nodes, initializers, inputs, outputs, valueInfos;
};

// A TensorProto's fields as the wire has them; where its data lives is decided after.
struct InitializerFields {
  ir::Parameter param;
  std::int64_t dataType = 0;
  bool typedFields = false, external = false, hasRaw = false;
  std::string_view raw;
};

class OnnxScanner {
public:
  OnnxScanner(std::shared_ptr<const MappedFile> file, const OnnxReadOptions& options)
      : file_(std::move(file)), options_(options), builder_(ir::SourceFormat::Onnx) {}

  // Fills a GraphBuilder; returns it ready for finish().
  Expected<ir::GraphBuilder> scan();

private:
  Status scanModel();
  Status scanGraphSpans(std::string_view graph);
  Status declareTypes();
  Status declareInferredTypes();
  Status locateInitializerData(InitializerFields& fields, std::string_view tensorBytes, const std::string& what);
  Status addInitializer(std::string_view tensor, const std::unordered_set<std::string_view>& inputNames,
                        std::unordered_set<std::string_view>& initializerInputs);
  Status addInput(std::string_view valueInfo, const std::unordered_set<std::string_view>& initializers);
  Status applyExporterNotes();
  Status noteExporterNodes();
  void addMergedParameterCopies();
  void addTiedFolds();
  Status addNode(std::string_view node, std::size_t index);
  Expected<bool> addAsParameter(const ir::NodeSpec& spec);
  Status fillTypeOf(std::string_view valueName, ir::ValueType& type);
  Status fillPreservedRank(ir::NodeSpec& spec);
  Expected<ir::Attribute> readAttribute(const onnx::AttributeProto& attr, const std::string& nodeName);
  void collectCaptures(const onnx::GraphProto& body, std::unordered_set<std::string> defined,
                       std::vector<std::string>& captures, std::unordered_set<std::string>& seen);

  std::shared_ptr<const MappedFile> file_;
  OnnxReadOptions options_;
  ir::GraphBuilder builder_;
  std::string_view graphBytes_;
  GraphSpans spans_;
  DeclaredTypes declared_;
  ExporterSignature signature_;
  ir::NodeSpec spec_;        // reused for every node: its strings and vectors keep their capacity
  // Whether the model imports ai.onnx; one that does not (an optimizer of
  // ai.onnx.preview.training alone) may have no node in that domain.
  bool importsDefaultDomain_ = false;
};

Status OnnxScanner::scanModel() {
  ir::ModelInfo& info = builder_.modelInfo();
  info.sourcePath = file_->path();
  bool ok = forEachField(file_->bytes(), [&](std::uint32_t number, WireType type, WireReader& r, bool& fine) {
    std::string_view text;
    std::uint64_t value;
    switch (number) {
    case field::kIrVersion:
      if (type != WireType::Varint) return false;
      fine = r.readVarint(value);
      info.irVersion = static_cast<std::int64_t>(value);
      return true;
    case field::kProducerName: fine = readText(type, r, text); info.producerName = text; return true;
    case field::kProducerVersion: fine = readText(type, r, text); info.producerVersion = text; return true;
    case field::kGraph: fine = readText(type, r, graphBytes_); return true;
    case field::kOpsetImport: {
      if (!(fine = readText(type, r, text))) return true;
      std::string_view domain;
      std::int64_t version = 0;
      fine = forEachField(text, [&](std::uint32_t n, WireType t, WireReader& orr, bool& opsetOk) {
        if (n == field::kOpsetDomain) return opsetOk = readText(t, orr, domain), true;
        if (n == field::kOpsetVersion && t == WireType::Varint) {
          std::uint64_t v;
          opsetOk = orr.readVarint(v);
          version = static_cast<std::int64_t>(v);
          return true;
        }
        return false;
      });
      info.opsetImports.emplace_back(std::string(domain), version);
      return true;
    }
    case field::kMetadataProps: {
      std::string_view key, val;
      if ((fine = readText(type, r, text)) && (fine = readKeyValue(text, key, val)))
        info.metadata.emplace_back(std::string(key), std::string(val));
      return true;
    }
    default: return false;
    }
  });
  if (!ok)
    return Error(ErrorCode::ParseError)
           << "not a valid ONNX model (protobuf parse failed: truncated or corrupt file?)";
  if (graphBytes_.data() == nullptr || info.irVersion <= 0)
    return Error(ErrorCode::ParseError) << "not an ONNX model (no graph or ir_version)";
  for (const auto& [domain, version] : info.opsetImports) {
    if (!domain.empty() && domain != "ai.onnx")
      continue;
    importsDefaultDomain_ = true;
    if (version < kMinOnnxOpset)
      return Error(ErrorCode::Unsupported) << "opset " << version
                                           << " is not supported (cleave reads opset " << kMinConvertibleOpset
                                           << " and up; " << kMinConvertibleOpset << " to " << kMinOnnxOpset - 1
                                           << " through onnx's version converter)";
    if (version > kMaxOnnxOpset)
      return Error(ErrorCode::Unsupported) << "the model uses ai.onnx opset " << version
                                           << ", newer than the newest cleave knows (" << kMaxOnnxOpset << ")";
  }
  return {};
}

Status OnnxScanner::scanGraphSpans(std::string_view graph) {
  bool sparse = false;
  bool ok = forEachField(graph, [&](std::uint32_t number, WireType type, WireReader& r, bool& fine) {
    std::vector<std::string_view>* list = nullptr;
    switch (number) {
    case field::kNode: list = &spans_.nodes; break;
    case field::kInitializer: list = &spans_.initializers; break;
    case field::kInput: list = &spans_.inputs; break;
    case field::kOutput: list = &spans_.outputs; break;
    case field::kValueInfo: list = &spans_.valueInfos; break;
    case field::kGraphName: fine = readText(type, r, spans_.name); return true;
    case field::kSparseInitializer: sparse = true; return false;
    default: return false;
    }
    fine = readText(type, r, list->emplace_back());
    return true;
  });
  if (!ok)
    return corrupt("the graph");
  if (sparse)
    return Error(ErrorCode::Unsupported) << "sparse initializers are not supported";
  builder_.modelInfo().graphName = spans_.name;
  return {};
}

// Reads a ValueInfoProto's name and type bytes.
bool readValueInfo(std::string_view info, std::string_view& name, std::string_view& type) {
  return forEachField(info, [&](std::uint32_t number, WireType t, WireReader& r, bool& fine) {
    if (number == field::kValueName) return fine = readText(t, r, name), true;
    if (number == field::kValueType) return fine = readText(t, r, type), true;
    return false;
  });
}

Status OnnxScanner::declareTypes() {
  for (const auto* list : {&spans_.inputs, &spans_.valueInfos, &spans_.outputs})
    for (std::string_view info : *list) {
      std::string_view name, type;
      if (!readValueInfo(info, name, type))
        return corrupt("a value_info entry");
      if (!type.empty())
        declared_.add(builder_, name, type);
    }
  return {};
}

// What onnx's shape inference (1.12) assumes of a model and dereferences a null pointer on when
// it does not hold (both found by fuzzing), checked before it runs:
//  - every value a node (or a node of a subgraph body) reads is defined in its graph or an
//    enclosing one (in any order: the builder sorts);
//  - every tensor (initializers, attribute tensors such as Constant's value) and every declared
//    tensor type has a known data type.
// O(nodes + attributes + declared values), subgraphs included.
Status checkKnownDataType(int code, const std::string& what) {
  if (code == onnx::TensorProto::UNDEFINED || !onnx::TensorProto_DataType_IsValid(code))
    return Error(ErrorCode::ParseError) << what << " has unknown data type " << code;
  return {};
}

Status checkDeclaredTypes(const google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>& values) {
  for (const onnx::ValueInfoProto& value : values)
    if (value.type().has_tensor_type() && value.type().tensor_type().has_elem_type())
      CLEAVE_CHECK(checkKnownDataType(value.type().tensor_type().elem_type(), "value '" + value.name() + "'"));
  return {};
}

} // namespace

Status checkBeforeInference(const onnx::GraphProto& graph, std::unordered_set<std::string> defined) {
  CLEAVE_CHECK(checkDeclaredTypes(graph.input()));
  CLEAVE_CHECK(checkDeclaredTypes(graph.output()));
  CLEAVE_CHECK(checkDeclaredTypes(graph.value_info()));
  for (const onnx::TensorProto& initializer : graph.initializer())
    CLEAVE_CHECK(checkKnownDataType(initializer.data_type(), "initializer '" + initializer.name() + "'"));
  for (const auto& input : graph.input())
    defined.insert(input.name());
  for (const auto& initializer : graph.initializer())
    defined.insert(initializer.name());
  for (const onnx::NodeProto& node : graph.node())
    for (const std::string& output : node.output())
      defined.insert(output);
  for (const onnx::NodeProto& node : graph.node()) {
    for (const std::string& input : node.input())
      if (!input.empty() && !defined.count(input))
        return Error(ErrorCode::InvalidGraph) << "node '" << node.name() << "' (" << node.op_type() << ") reads '"
                                              << input << "', which no node, input or initializer defines";
    for (const onnx::AttributeProto& attr : node.attribute()) {
      std::string what = "attribute '" + attr.name() + "' of node '" + node.name() + "'";
      if (attr.has_t())
        CLEAVE_CHECK(checkKnownDataType(attr.t().data_type(), what));
      for (const onnx::TensorProto& tensor : attr.tensors())
        CLEAVE_CHECK(checkKnownDataType(tensor.data_type(), what));
      if (attr.has_g())
        CLEAVE_CHECK(checkBeforeInference(attr.g(), defined));
      for (const onnx::GraphProto& body : attr.graphs())
        CLEAVE_CHECK(checkBeforeInference(body, defined));
    }
  }
  return {};
}

namespace {

} // namespace

// onnx's shape inference (libonnx 1.12) also reads out of bounds on some malformed models that no
// cheap check catches (found by fuzzing: an out-of-range int64 Constant feeding data
// propagation). So it runs isolated (base/isolated_call.h), and only the inferred value types
// come back: a crash or a hang there is a refused model, never a crashed cleave.
Expected<onnx::GraphProto> inferTypesIsolated(onnx::ModelProto& model) {
  (void)onnx::OpSchemaRegistry::Instance(); // initialized before the fork, not in the child
  CLEAVE_TRY(std::string reply, runIsolated("onnx shape inference", [&]() {
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions{false, 0, /*enable_data_propagation=*/true});
    onnx::GraphProto types;
    *types.mutable_input() = model.graph().input();
    *types.mutable_value_info() = model.graph().value_info();
    *types.mutable_output() = model.graph().output();
    return types.SerializeAsString();
  }));
  onnx::GraphProto types;
  if (!types.ParseFromString(reply))
    return Error(ErrorCode::IoError) << "onnx shape inference: unreadable result";
  return types;
}

namespace {

// The model's bytes without its large initializers' data: what shape inference reads of them is
// their dtype and dims (data propagation reads small integer tensors, kept), so a protobuf copy
// need not hold the weights, nor the mapping keep their pages resident (a ViT's 330 MB were held
// twice while it loaded). Field numbers: ModelProto.graph 7, GraphProto.initializer 5,
// TensorProto.raw_data 9. False when the bytes are not a well-formed message.
constexpr std::size_t kInferenceDataLimit = 64 * 1024;

// Copies `message`'s fields to `out`, except those `replace(number, type, reader, out, ok)`
// consumes (returning true: it wrote or dropped the field; it leaves the others unread). False
// when the message is malformed.
template <typename Replace> bool copyFields(std::string_view message, std::string& out, Replace&& replace) {
  const char* fieldStart = message.data();
  bool wellFormed = forEachField(message, [&](std::uint32_t number, WireType type, WireReader& reader, bool& ok) {
    bool replaced = replace(number, type, reader, out, ok);
    if (!replaced)
      ok = ok && reader.skip(type);
    if (ok && !replaced)
      out.append(fieldStart, static_cast<std::size_t>(reader.position() - fieldStart));
    fieldStart = reader.position();
    return true;
  });
  return wellFormed;
}

} // namespace

bool withoutLargeInitializerData(std::string_view model, std::string& out) {
  // A length-delimited field whose contents are copied through `inner` and written back.
  auto rewritten = [](std::uint32_t number, WireReader& reader, std::string& into, bool& ok, auto&& inner) {
    std::string_view contents;
    std::string copy;
    ok = reader.readBytes(contents) && inner(contents, copy);
    appendBytesField(into, number, copy);
    return true;
  };
  auto stripTensor = [](std::string_view tensor, std::string& into) {
    return copyFields(tensor, into, [](std::uint32_t number, WireType type, WireReader& reader, std::string&, bool&) {
      if (number != field::kRawData || type != WireType::Bytes)
        return false;
      WireReader peek = reader; // a small one is copied as it is: nothing consumed
      std::string_view data;
      if (!peek.readBytes(data) || data.size() <= kInferenceDataLimit)
        return false;
      reader = peek; // dropped
      return true;
    });
  };
  auto stripGraph = [&](std::string_view graph, std::string& into) {
    return copyFields(graph, into, [&](std::uint32_t number, WireType type, WireReader& reader, std::string& to, bool& ok) {
      return number == field::kInitializer && type == WireType::Bytes && rewritten(number, reader, to, ok, stripTensor);
    });
  };
  return copyFields(model, out, [&](std::uint32_t number, WireType type, WireReader& reader, std::string& to, bool& ok) {
    return number == field::kGraph && type == WireType::Bytes && rewritten(number, reader, to, ok, stripGraph);
  });
}

namespace {

// Runs onnx shape inference on a protobuf copy of the model (without its large initializers'
// data) and declares what it found. The model's own bytes stay untouched: inference also writes
// into subgraph bodies, and those attributes must be written back exactly as they were read.
Status OnnxScanner::declareInferredTypes() {
  onnx::ModelProto model;
  std::string stripped;
  if (!withoutLargeInitializerData(file_->bytes(), stripped) ||
      !model.ParseFromArray(stripped.data(), static_cast<int>(stripped.size())))
    return corrupt("the model");
  std::string().swap(stripped);
  CLEAVE_CHECK(checkBeforeInference(model.graph(), {}));
  if (options_.freeRows) {
    FixedBatch rows;
    freeTheRows(*model.mutable_graph(), rows);
  }
  CLEAVE_TRY(onnx::GraphProto graph, inferTypesIsolated(model));
  for (const auto* list : {&graph.input(), &graph.value_info(), &graph.output()})
    for (const onnx::ValueInfoProto& info : *list)
      if (info.has_type())
        declared_.add(builder_, info.name(), declared_.own(info.type().SerializeAsString()));
  return {};
}

Status OnnxScanner::fillTypeOf(std::string_view valueName, ir::ValueType& type) {
  const std::string_view* declared = declared_.find(builder_, valueName);
  if (!declared) {
    type = ir::ValueType{};
    return {};
  }
  return fillValueType(*declared, "value '" + std::string(valueName) + "'", type);
}

// onnx's inference leaves some outputs without a rank (Slice with computed bounds). For ops whose
// output 0 always has the rank of input 0, give it that rank with unknown extents: submodel
// boundaries need at least a rank to be valid ONNX graph inputs and outputs.
Status OnnxScanner::fillPreservedRank(ir::NodeSpec& spec) {
  static const std::unordered_set<std::string_view> kRankPreserving = {
      "Slice", "Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Sqrt", "Exp", "Log", "Erf", "Cast",
      "Softmax", "LogSoftmax", "Dropout", "Identity", "Clip", "LeakyRelu", "Gelu"};
  // Cheap tests first: this runs for every node, and almost every output has its rank.
  if (spec.outputs.empty() || spec.inputs.empty() || !spec.domain.empty())
    return {};
  ir::ValueType& out = spec.outputs[0].type;
  if (out.kind != ir::ValueKind::Tensor || out.shape.rankKnown || !kRankPreserving.count(spec.opType))
    return {};
  ir::ValueType in;
  CLEAVE_CHECK(fillTypeOf(spec.inputs[0], in));
  if (in.kind != ir::ValueKind::Tensor || !in.shape.rankKnown)
    return {};
  out.shape.rankKnown = true;
  out.shape.dims.assign(in.shape.dims.size(), ir::Dim{});
  return {};
}

namespace {
// external_data's offset or length: decimal digits only.
bool parseExternalNumber(std::string_view text, std::uint64_t& number) {
  std::string digits(text);
  char* end = nullptr;
  number = std::strtoull(digits.c_str(), &end, 10);
  return !digits.empty() && *end == '\0';
}

// Reads the fields of one TensorProto; false on a malformed one. `onName` sees its name.
template <class OnName>
bool scanTensorFields(std::string_view tensorBytes, InitializerFields& f, OnName onName) {
  return forEachField(tensorBytes, [&](std::uint32_t number, WireType type, WireReader& r, bool& fine) {
    std::string_view text;
    std::uint64_t value;
    switch (number) {
    case field::kDims: fine = r.readInts(type, [&](std::int64_t d) { f.param.dims.push_back(d); }); return true;
    case field::kDataType:
      if (type != WireType::Varint) return false;
      fine = r.readVarint(value);
      f.dataType = static_cast<std::int64_t>(value);
      return true;
    case field::kTensorName:
      if ((fine = readText(type, r, text))) {
        f.param.name = text;
        onName(text);
      }
      return true;
    case field::kRawData: fine = readText(type, r, f.raw); f.hasRaw = true; return true;
    case field::kFloatData: case field::kInt32Data: case field::kStringData: case field::kInt64Data:
    case field::kDoubleData: case field::kUint64Data: f.typedFields = true; return false;
    case field::kDataLocation:
      if (type != WireType::Varint) return false;
      fine = r.readVarint(value);
      f.external = value == onnx::TensorProto::EXTERNAL;
      return true;
    case field::kExternalData: {
      std::string_view key, val;
      if (!(fine = readText(type, r, text) && readKeyValue(text, key, val)))
        return true;
      if (key == "location")
        f.param.data.externalPath = val;
      else if (key == "offset" || key == "length")
        fine = parseExternalNumber(val, key == "offset" ? f.param.data.offset : f.param.data.length);
      return true;
    }
    default: return false;
    }
  });
}
} // namespace

Status OnnxScanner::addInitializer(std::string_view tensorBytes,
                                   const std::unordered_set<std::string_view>& inputNames,
                                   std::unordered_set<std::string_view>& initializerInputs) {
  InitializerFields fields;
  ir::Parameter& param = fields.param;
  bool ok = scanTensorFields(tensorBytes, fields, [&](std::string_view name) {
    if (!inputNames.empty() && inputNames.count(name))
      initializerInputs.insert(name);
  });
  const std::string what = "initializer '" + param.name + "'";
  if (!ok)
    return corrupt(param.name.empty() ? std::string("an initializer") : what);
  if (param.name.empty())
    return Error(ErrorCode::ParseError) << "an initializer has no name";
  CLEAVE_TRY(param.dtype, toDType(static_cast<int>(fields.dataType), what));
  for (std::int64_t dim : param.dims)
    if (dim < 0)
      return Error(ErrorCode::InvalidArgument) << what << " has negative dimension " << dim;
  ir::ValueType declared = ir::ValueType::tensor(param.dtype, param.dims);
  CLEAVE_CHECK(ir::checkTensorSize(declared, what));
  param.bytes = ir::byteSizeOf(declared);
  CLEAVE_CHECK(locateInitializerData(fields, tensorBytes, what));
  builder_.addParameter(std::move(param), declared);
  return {};
}

// External data (inside the model's folder), raw bytes in the model file (kept in place), or typed
// repeated fields (decoded by protobuf, rare); each must hold exactly what the shape needs.
Status OnnxScanner::locateInitializerData(InitializerFields& fields, std::string_view tensorBytes,
                                          const std::string& what) {
  ir::Parameter& param = fields.param;
  auto sizeMismatch = [&](std::size_t held) {
    return Error(ErrorCode::ParseError) << what << " holds " << held << " bytes, its shape needs " << param.bytes;
  };
  if (fields.external) {
    param.data.source = ir::ParameterData::Source::External;
    if (param.data.externalPath.empty())
      return Error(ErrorCode::ParseError) << what << " has external data without a location";
    std::string folder = std::filesystem::path(file_->path()).parent_path().string();
    if (Expected<std::string> inside = resolveInsideFolder(folder, param.data.externalPath, what + ": external data location");
        !inside)
      return std::move(inside.error());
    if (param.data.length == 0)
      param.data.length = static_cast<std::uint64_t>(param.bytes);
  } else if (fields.hasRaw) {
    if (static_cast<std::int64_t>(fields.raw.size()) != param.bytes)
      return sizeMismatch(fields.raw.size());
    param.data.source = ir::ParameterData::Source::ModelFile;
    param.data.offset = static_cast<std::uint64_t>(fields.raw.data() - file_->bytes().data());
    param.data.length = fields.raw.size();
  } else if (fields.typedFields || param.bytes == 0) {
    onnx::TensorProto tensor; // rare: let protobuf decode the typed repeated fields
    if (!tensor.ParseFromArray(tensorBytes.data(), static_cast<int>(tensorBytes.size())))
      return corrupt(what);
    CLEAVE_TRY(std::string converted, typedFieldsToRaw(tensor, param.dtype));
    if (static_cast<std::int64_t>(converted.size()) != param.bytes)
      return sizeMismatch(converted.size());
    param.data = builder_.appendInlineData(converted);
  } else {
    return Error(ErrorCode::ParseError) << what << " holds no data, its shape needs " << param.bytes << " bytes";
  }
  return {};
}

// The notes torch.onnx's dynamo exporter leaves on initializers' value_info and, with the
// program's signature, on nodes (io/exporter_signature.h): which initializers train, and which
// nodes read a parameter's own copy where the optimizer merged parameters of equal value.
Status OnnxScanner::applyExporterNotes() {
  for (std::string_view info : spans_.valueInfos) {
    std::string_view name;
    ExporterTensorNote note;
    bool ok = forEachField(info, [&](std::uint32_t number, WireType t, WireReader& r, bool& fine) {
      std::string_view entry, key, value;
      if (number == field::kValueName)
        return fine = readText(t, r, name), true;
      if (number != field::kValueMetadata)
        return false;
      if ((fine = readText(t, r, entry) && readKeyValue(entry, key, value))) {
        if (key == kExportedKindKey)
          note.kind = value;
        else if (key == kFoldedFromKey)
          note.foldedFrom = value;
        else if (key == kOriginalNodeNameKey)
          note.originalName = value;
      }
      return true;
    });
    if (!ok)
      return corrupt("a value_info entry");
    if (!note.kind.empty() || !note.foldedFrom.empty())
      signature_.noteInitializer(name, note);
  }
  if (signature_.carriesSignature())
    CLEAVE_CHECK(noteExporterNodes());
  std::vector<std::pair<std::string_view, bool>> initializers;
  for (const ir::Parameter& param : builder_.parameters())
    initializers.emplace_back(param.name, ir::isFloating(param.dtype));
  signature_.resolve(initializers, listedFixedTensors(builder_.modelInfo()));
  ir::ModelInfo& info = builder_.modelInfo();
  // The exporter wrote the program's signature: its buffers are listed.
  info.buffersListed = info.buffersListed || signature_.carriesSignature();
  for (const auto& [name, floating] : initializers)
    builder_.markFixed(name, signature_.fixedReason(name)); // Trains changes nothing
  info.exporterFolds = signature_.folds();
  info.exporterMergesSplit = static_cast<std::uint32_t>(signature_.copies().size());
  if (signature_.untrainable())
    info.untrainable = *signature_.untrainable();
  return {};
}

// Each node's inputs and exporter notes, for ExporterSignature to pair merged parameters.
Status OnnxScanner::noteExporterNodes() {
  for (std::size_t i = 0; i < spans_.nodes.size(); ++i) {
    ExporterNodeNote note;
    bool ok = forEachField(spans_.nodes[i], [&](std::uint32_t number, WireType type, WireReader& r, bool& fine) {
      std::string_view text, key, value;
      switch (number) {
      case field::kNodeInput: fine = readText(type, r, note.inputs.emplace_back()); return true;
      case field::kNodeName: fine = readText(type, r, note.name); return true;
      case field::kNodeMetadata:
        if ((fine = readText(type, r, text) && readKeyValue(text, key, value))) {
          if (key == kFxNodeKey)
            note.fxNode = value;
          else if (key == kNameScopesKey)
            note.nameScopes = value;
        }
        return true;
      default: return false;
      }
    });
    if (!ok)
      return corrupt("node " + std::to_string(i));
    signature_.noteNode(i, note);
  }
  return {};
}

// A tied fold (ExporterSignature::ties) computed again from its parameter: Transpose(source),
// after checking that the fold is the source's transpose (by value where both lie in the model
// file, else by shape); anything else stops training instead. O(elements) per tie.
void OnnxScanner::addTiedFolds() {
  auto find = [&](const std::string& name) { // anew each time: adding nodes may move the parameters
    const auto params = builder_.parameters();
    return std::find_if(params.begin(), params.end(), [&](const ir::Parameter& p) { return p.name == name; });
  };
  for (const ExporterSignature::Tie& tie : signature_.ties()) {
    const ir::Parameter fold = *find(tie.fold);
    const ir::Parameter& source = *find(tie.source);
    bool transposed = fold.dims.size() == 2 && source.dims.size() == 2 && fold.dtype == source.dtype &&
                      fold.dims[0] == source.dims[1] && fold.dims[1] == source.dims[0];
    // The values tell a transpose from a reshape to the reversed shape (and decide a square one);
    // with the data outside the model file, the shape alone decides, unless square.
    const bool inFile = fold.data.source == ir::ParameterData::Source::ModelFile &&
                        source.data.source == ir::ParameterData::Source::ModelFile;
    const std::size_t rows = transposed ? static_cast<std::size_t>(fold.dims[0]) : 0;
    const std::size_t cols = transposed ? static_cast<std::size_t>(fold.dims[1]) : 0;
    if (transposed && inFile && rows * cols > 0) {
      const std::size_t element = static_cast<std::size_t>(fold.bytes) / (rows * cols);
      const char* folded = file_->bytes().data() + fold.data.offset;
      const char* original = file_->bytes().data() + source.data.offset;
      for (std::size_t i = 0; transposed && i < rows; ++i)
        for (std::size_t j = 0; transposed && j < cols; ++j)
          transposed = std::memcmp(folded + (i * cols + j) * element, original + (j * rows + i) * element, element) == 0;
    } else if (transposed && !inFile && rows == cols) {
      transposed = false;
    }
    ir::NodeSpec node;
    node.name = "cleave_tie_" + tie.fold;
    node.outputs = {{tie.value, ir::ValueType::tensor(fold.dtype, fold.dims)}};
    if (transposed) {
      node.opType = "Transpose";
      node.inputs = {tie.source};
      ir::Attribute perm;
      perm.name = "perm";
      perm.kind = ir::AttrKind::Ints;
      perm.ints = {1, 0};
      node.attributes.push_back(std::move(perm));
    } else { // the model as exported: the fold's readers read it
      node.opType = "Identity";
      node.inputs = {tie.fold};
      signature_.refuseTraining("'" + tie.fold + "', folded from parameter '" + tie.source +
                                "', is not its transpose, and the graph reads both");
    }
    builder_.addNode(node);
  }
  if (signature_.untrainable() && builder_.modelInfo().untrainable.empty())
    builder_.modelInfo().untrainable = *signature_.untrainable();
}

// The copies ExporterSignature made of merged parameters: the same bytes, each under the name of
// the parameter it stands for.
void OnnxScanner::addMergedParameterCopies() {
  if (signature_.copies().empty())
    return;
  std::unordered_map<std::string_view, std::size_t> indexOf; // initializers: added before, never moved in order
  for (std::size_t i = 0; i < builder_.parameters().size(); ++i)
    indexOf.emplace(builder_.parameters()[i].name, i);
  std::vector<ir::Parameter> copies;
  for (const auto& [source, name] : signature_.copies()) {
    ir::Parameter copy = builder_.parameters()[indexOf.at(source)];
    copy.name = name;
    copy.aliasOf.clear();
    copy.sourceNode.clear();
    copy.sourceAttributes.clear();
    copies.push_back(std::move(copy));
  }
  for (ir::Parameter& copy : copies) { // after the look-ups: adding moves the names they view
    const ir::ValueType type = ir::ValueType::tensor(copy.dtype, copy.dims);
    builder_.addParameter(std::move(copy), type);
  }
}

Status OnnxScanner::addInput(std::string_view valueInfo,
                             const std::unordered_set<std::string_view>& initializers) {
  std::string_view name, typeBytes;
  if (!readValueInfo(valueInfo, name, typeBytes))
    return corrupt("a graph input");
  if (initializers.count(name))
    return {}; // old-style models list initializers as inputs too
  if (name.empty())
    return Error(ErrorCode::ParseError) << "a graph input has no name";
  if (options_.freeRows) // the input as inference saw it: its dim 0 the rows symbol
    if (const std::string_view* declared = declared_.find(builder_, name))
      typeBytes = *declared;
  ir::ValueType type;
  if (!typeBytes.empty())
    CLEAVE_CHECK(fillValueType(typeBytes, "input '" + std::string(name) + "'", type));
  builder_.addInput(name, type);
  return {};
}

Expected<ir::Attribute> OnnxScanner::readAttribute(const onnx::AttributeProto& attr,
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

// Names read inside a subgraph that it does not define itself (recursively): the outer values
// the node depends on. Order: first use.
void OnnxScanner::collectCaptures(const onnx::GraphProto& body, std::unordered_set<std::string> defined,
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

Status OnnxScanner::addNode(std::string_view nodeBytes, std::size_t index) {
  ir::NodeSpec& spec = spec_;
  spec.kind = ir::NodeKind::Op;
  spec.name.clear();
  spec.domain.clear();
  spec.opType.clear();
  spec.inputs.clear();
  spec.outputs.clear();
  spec.attributes.clear();
  spec.implicitInputs = 0;
  std::size_t outputCount = 0;
  std::vector<std::string_view> attributes;
  bool ok = forEachField(nodeBytes, [&](std::uint32_t number, WireType type, WireReader& r, bool& fine) {
    std::string_view text;
    switch (number) {
    case field::kNodeInput:
      if ((fine = readText(type, r, text)))
        spec.inputs.emplace_back(text);
      return true;
    case field::kNodeOutput:
      if ((fine = readText(type, r, text))) {
        if (spec.outputs.size() <= outputCount)
          spec.outputs.emplace_back();
        spec.outputs[outputCount++].name = text;
      }
      return true;
    case field::kNodeName: fine = readText(type, r, text); spec.name = text; return true;
    case field::kOpType: fine = readText(type, r, text); spec.opType = text; return true;
    case field::kDomain: fine = readText(type, r, text); spec.domain = text == "ai.onnx" ? "" : text; return true;
    case field::kAttribute: fine = readText(type, r, attributes.emplace_back()); return true;
    default: return false;
    }
  });
  if (!ok)
    return corrupt("node " + std::to_string(index) + (spec.name.empty() ? "" : " ('" + spec.name + "')"));
  if (spec.opType.empty())
    return Error(ErrorCode::ParseError) << "node '" << spec.name << "' has no op_type";
  if (const auto* rewrites = signature_.rewritesOf(index))
    for (const auto& [operand, copy] : *rewrites)
      spec.inputs[operand] = copy; // a merged parameter's own copy (io/exporter_signature.h)
  spec.scope = scopeFromNodeName(spec.name);
  std::string displayName = spec.name.empty() ? spec.opType : spec.name;
  for (std::size_t i = 0; i < spec.outputs.size(); ++i) {
    ir::OutputSpec& output = spec.outputs[i];
    if (output.name.empty()) // an omitted optional output still needs a unique value name
      output.name = displayName + "__unused_output_" + std::to_string(i);
    CLEAVE_CHECK(fillTypeOf(output.name, output.type));
  }
  CLEAVE_CHECK(fillPreservedRank(spec));
  if (!attributes.empty()) {
    std::vector<std::string> captures;
    std::unordered_set<std::string> seen;
    for (std::string_view bytes : attributes) {
      onnx::AttributeProto attr;
      if (!attr.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
        return corrupt("an attribute of node '" + displayName + "'");
      CLEAVE_TRY(ir::Attribute converted, readAttribute(attr, displayName));
      if (attr.type() == onnx::AttributeProto::GRAPH)
        collectCaptures(attr.g(), {}, captures, seen);
      spec.attributes.push_back(std::move(converted));
    }
    spec.implicitInputs = static_cast<std::uint32_t>(captures.size());
    for (std::string& capture : captures)
      spec.inputs.push_back(std::move(capture));
  }
  if (spec.domain.empty() && !importsDefaultDomain_)
    return Error(ErrorCode::ParseError) << "node '" << spec.name << "' (" << spec.opType
                                        << ") is an ai.onnx op, and the model imports no ai.onnx opset";
  CLEAVE_TRY(bool isParameter, addAsParameter(spec));
  if (isParameter)
    return {};
  // A normalization's running mean and variance are buffers, as in the PyTorch module exported:
  // training updates them (in training mode) but never by their gradient.
  if (spec.domain.empty() && spec.opType == "BatchNormalization" && spec.inputs.size() >= 5) {
    builder_.markFixed(spec.inputs[3], ir::Fixed::RunningStatistic);
    builder_.markFixed(spec.inputs[4], ir::Fixed::RunningStatistic);
  }
  builder_.addNode(spec);
  return {};
}

// Constants are not work: an ai.onnx `Constant` with a numeric value becomes a parameter (not
// trained), and `Identity` of a parameter becomes a second name of that parameter's tensor, so
// no pass places, sends or counts them as compute. True when `spec` was added that way.
Expected<bool> OnnxScanner::addAsParameter(const ir::NodeSpec& spec) {
  if (!spec.domain.empty() || spec.outputs.size() != 1)
    return false;
  const std::string& name = spec.outputs[0].name;
  if (spec.opType == "Identity")
    return spec.inputs.size() == 1 && builder_.addParameterAlias(name, spec.inputs[0], spec.name);
  if (spec.opType != "Constant" || !spec.inputs.empty() || spec.attributes.size() != 1)
    return false;
  const ir::Attribute& attr = spec.attributes[0];
  ir::Parameter param;
  param.name = name;
  param.fixed = ir::Fixed::Constant;
  param.sourceNode = spec.name;
  param.sourceAttributes = spec.attributes;
  std::string bytes;
  const std::string what = "Constant '" + name + "'";
  if (attr.name == "value" && attr.kind == ir::AttrKind::Tensor) {
    Expected<TensorValue> tensor = decodeTensorAttribute(attr.text, what);
    if (!tensor && tensor.error().code() == ErrorCode::Unsupported)
      return false;
    if (!tensor)
      return std::move(tensor.error());
    param.dtype = tensor->dtype;
    param.dims = std::move(tensor->dims);
    bytes = std::move(tensor->bytes);
  } else if (attr.name == "value_float" && attr.kind == ir::AttrKind::Float) {
    param.dtype = DType::F32;
    appendAs<std::vector<double>, float>(bytes, {attr.floatValue});
  } else if (attr.name == "value_floats" && attr.kind == ir::AttrKind::Floats) {
    param.dtype = DType::F32;
    param.dims = {static_cast<std::int64_t>(attr.floats.size())};
    appendAs<std::vector<double>, float>(bytes, attr.floats);
  } else if (attr.name == "value_int" && attr.kind == ir::AttrKind::Int) {
    param.dtype = DType::I64;
    appendAs<std::vector<std::int64_t>, std::int64_t>(bytes, {attr.intValue});
  } else if (attr.name == "value_ints" && attr.kind == ir::AttrKind::Ints) {
    param.dtype = DType::I64;
    param.dims = {static_cast<std::int64_t>(attr.ints.size())};
    appendAs<std::vector<std::int64_t>, std::int64_t>(bytes, attr.ints);
  } else {
    return false; // strings and sparse values stay Constant nodes
  }
  for (std::int64_t dim : param.dims)
    if (dim < 0)
      return Error(ErrorCode::InvalidArgument) << what << " has negative dimension " << dim;
  ir::ValueType type = ir::ValueType::tensor(param.dtype, param.dims);
  CLEAVE_CHECK(ir::checkTensorSize(type, what));
  param.bytes = ir::byteSizeOf(type);
  if (static_cast<std::int64_t>(bytes.size()) != param.bytes)
    return Error(ErrorCode::ParseError) << what << " holds " << bytes.size() << " bytes, its shape needs "
                                        << param.bytes;
  param.data = builder_.appendInlineData(bytes);
  builder_.addParameter(std::move(param), type);
  return true;
}

Expected<ir::GraphBuilder> OnnxScanner::scan() {
  CLEAVE_CHECK(scanModel());
  CLEAVE_CHECK(scanGraphSpans(graphBytes_));
  builder_.setModelFile(file_);
  std::size_t nodes = spans_.nodes.size() + spans_.inputs.size() + spans_.initializers.size();
  builder_.reserve(nodes, spans_.nodes.size() * 2 + spans_.inputs.size() + spans_.initializers.size());
  if (options_.shapeInference == ShapeInference::Always || options_.freeRows)
    CLEAVE_CHECK(declareInferredTypes());
  else
    CLEAVE_CHECK(declareTypes());

  // Old-style models list initializers among the graph inputs too; those inputs are skipped.
  // Inputs are few and initializers many, so the set holds the input names (views into the file).
  std::unordered_set<std::string_view> inputNames, initializerInputs;
  for (std::string_view input : spans_.inputs) {
    std::string_view name, type;
    if (!readValueInfo(input, name, type))
      return corrupt("a graph input");
    inputNames.insert(name);
  }
  for (std::string_view tensor : spans_.initializers)
    CLEAVE_CHECK(addInitializer(tensor, inputNames, initializerInputs));
  CLEAVE_CHECK(applyExporterNotes());
  for (std::string_view input : spans_.inputs)
    CLEAVE_CHECK(addInput(input, initializerInputs));
  for (std::size_t i = 0; i < spans_.nodes.size(); ++i)
    CLEAVE_CHECK(addNode(spans_.nodes[i], i));
  addMergedParameterCopies();
  addTiedFolds();
  std::vector<std::string> outputs;
  for (std::string_view output : spans_.outputs) {
    std::string_view name, type;
    if (!readValueInfo(output, name, type))
      return corrupt("a graph output");
    outputs.emplace_back(name);
  }
  builder_.setOutputs(std::move(outputs));
  CLEAVE_CHECK(applyFixedParameters(builder_, options_.fixedPatterns));
  return std::move(builder_);
}

} // namespace

namespace {
// The model's ai.onnx opset (opsetImportsOf), or 0 when it names none.
std::int64_t defaultOpsetOf(std::string_view model) {
  std::map<std::string, std::int64_t> opsets = opsetImportsOf(model);
  auto found = opsets.find("");
  return found == opsets.end() ? 0 : found->second;
}

// The top-level Scan nodes of an opset < 9 model, taken out of it; each output of theirs becomes
// a graph input (the converter must see a producer for every value) and each input a graph output
// (so the nodes feeding it stay), both remembered to be dropped again. O(nodes).
struct TakenScan8 {
  std::vector<onnx::NodeProto> nodes;
  std::set<std::string> standInInputs, standInOutputs;
};

TakenScan8 takeOutScan8(onnx::ModelProto& model, std::int64_t opset) {
  TakenScan8 taken;
  if (opset >= 9)
    return taken;
  onnx::GraphProto& graph = *model.mutable_graph();
  std::set<std::string> outputs;
  for (const onnx::ValueInfoProto& output : graph.output())
    outputs.insert(output.name());
  auto& nodes = *graph.mutable_node();
  for (int i = nodes.size(); i-- > 0;) {
    const onnx::NodeProto& node = nodes.Get(i);
    if (node.op_type() != "Scan" || !(node.domain().empty() || node.domain() == "ai.onnx"))
      continue;
    for (const std::string& output : node.output())
      if (taken.standInInputs.insert(output).second)
        graph.add_input()->set_name(output);
    for (const std::string& input : node.input())
      if (!input.empty() && !outputs.count(input) && taken.standInOutputs.insert(input).second)
        graph.add_output()->set_name(input);
    taken.nodes.insert(taken.nodes.begin(), node);
    nodes.DeleteSubrange(i, 1);
  }
  return taken;
}

// Puts takeOutScan8's nodes back into the converted model as cleave::Scan8, each before the first
// node that reads one of its outputs, and drops the stand-in graph inputs and outputs. O(nodes).
void putBackScan8(onnx::ModelProto& model, const TakenScan8& taken) {
  if (taken.nodes.empty())
    return;
  onnx::GraphProto& graph = *model.mutable_graph();
  auto dropStandIns = [](auto& values, const std::set<std::string>& names) {
    for (int i = values.size(); i-- > 0;)
      if (names.count(values.Get(i).name()))
        values.DeleteSubrange(i, 1);
  };
  dropStandIns(*graph.mutable_input(), taken.standInInputs);
  dropStandIns(*graph.mutable_output(), taken.standInOutputs);
  std::vector<onnx::NodeProto> nodes(graph.node().begin(), graph.node().end());
  for (onnx::NodeProto scan : taken.nodes) {
    scan.set_domain(std::string(kLegacyDomain));
    scan.set_op_type("Scan8");
    std::set<std::string> outputs(scan.output().begin(), scan.output().end());
    auto reader = std::find_if(nodes.begin(), nodes.end(), [&](const onnx::NodeProto& node) {
      return std::any_of(node.input().begin(), node.input().end(), [&](const std::string& in) { return outputs.count(in); });
    });
    nodes.insert(reader, std::move(scan));
  }
  graph.clear_node();
  for (onnx::NodeProto& node : nodes)
    *graph.add_node() = std::move(node);
  onnx::OperatorSetIdProto* legacy = model.add_opset_import();
  legacy->set_domain(std::string(kLegacyDomain));
  legacy->set_version(1);
}

// A model of opset kMinConvertibleOpset..kMinOnnxOpset-1 brought to kMinOnnxOpset with libonnx's
// own version converter, as a model in memory under the same name (external data still resolves
// against the model's folder). Other models come back as they are. Fails: Unsupported (the
// converter has no adapter for one of the model's ops).
Expected<std::shared_ptr<const MappedFile>> convertOldOpset(const std::shared_ptr<const MappedFile>& file,
                                                           std::int64_t& originalOpset) {
  originalOpset = defaultOpsetOf(file->bytes());
  if (originalOpset < kMinConvertibleOpset || originalOpset >= kMinOnnxOpset)
    return file;
  onnx::ModelProto model;
  if (!model.ParseFromArray(file->bytes().data(), static_cast<int>(file->bytes().size())))
    return Error(ErrorCode::ParseError) << "not a valid ONNX model (protobuf parse failed: truncated or corrupt file?)";
  // Scan-8 scans axis 1 of batched inputs with per-batch sequence_lens, which the converter's
  // 8 -> 9 adapter does not express. Such nodes are taken out before converting (their outputs
  // become graph inputs meanwhile) and put back after as cleave::Scan8, the runtime's kernel for
  // the batched form (io/onnx.h).
  TakenScan8 scan8 = takeOutScan8(model, originalOpset);
  (void)onnx::OpSchemaRegistry::Instance(); // initialized before the fork, not in the child
  Expected<std::string> converted = runIsolated("onnx's version converter", [&]() {
    // The broadcasting adapters (Add/Gemm 6 -> 7) need every operand's shape: infer them first.
    onnx::shape_inference::InferShapes(model);
    onnx::ModelProto result = onnx::version_conversion::ConvertVersion(model, static_cast<int>(kMinOnnxOpset));
    putBackScan8(result, scan8);
    return result.SerializeAsString();
  });
  if (!converted)
    return Error(ErrorCode::Unsupported) << "opset " << originalOpset << " cannot be converted to opset "
                                         << kMinOnnxOpset << ": " << converted.error().message();
  return MappedFile::fromBytes(file->path(), *converted);
}

Expected<ir::Graph> readMappedOnnx(std::shared_ptr<const MappedFile> file, const OnnxReadOptions& options) {
  const std::string path = file->path();
  std::int64_t originalOpset = 0;
  CLEAVE_TRY(file, convertOldOpset(file, originalOpset));
  if (options.expandFunctions) {
    Expected<std::shared_ptr<const MappedFile>> expanded = expandFunctionNodes(file, options.expandFunctions);
    if (!expanded)
      return std::move(expanded.error().withContext(path));
    file = std::move(*expanded);
  }
  Expected<ir::GraphBuilder> builder = OnnxScanner(file, options).scan();
  // A node output without a declared type: scan again with onnx's inferred types. Models that
  // need this (typical framework exports) are small next to the ones that do not.
  // (`Never` keeps the gaps; `Always` inferred on the first pass.)
  if (builder && options.shapeInference == ShapeInference::Auto && builder->hasUntypedOpOutputs()) {
    OnnxReadOptions again = options;
    again.shapeInference = ShapeInference::Always;
    builder = OnnxScanner(file, again).scan();
  }
  if (!builder)
    return std::move(builder.error().withContext(path));
  if (originalOpset > 0 && originalOpset < kMinOnnxOpset)
    builder->modelInfo().convertedFromOpset = originalOpset;
  Expected<ir::Graph> graph = std::move(*builder).finish();
  if (!graph)
    return std::move(graph.error().withContext(path));
  return graph;
}
} // namespace

Expected<TensorValue> decodeTensorAttribute(std::string_view proto, const std::string& what) {
  onnx::TensorProto tensor;
  if (!tensor.ParseFromArray(proto.data(), static_cast<int>(proto.size())))
    return Error(ErrorCode::ParseError) << what << " is not a valid TensorProto";
  if (tensor.data_location() == onnx::TensorProto::EXTERNAL || tensor.data_type() == onnx::TensorProto::STRING)
    return Error(ErrorCode::Unsupported) << what << " holds external or string data";
  TensorValue value;
  CLEAVE_TRY(value.dtype, toDType(tensor.data_type(), what));
  value.dims.assign(tensor.dims().begin(), tensor.dims().end());
  if (tensor.has_raw_data()) {
    value.bytes = tensor.raw_data();
  } else {
    CLEAVE_TRY(value.bytes, typedFieldsToRaw(tensor, value.dtype));
  }
  return value;
}

Expected<std::vector<ir::ValueType>> inferValueTypes(const ir::Graph& graph) {
  CLEAVE_TRY(onnx::ModelProto model, modelForInference(graph));
  CLEAVE_CHECK(checkBeforeInference(model.graph(), {}));
  CLEAVE_TRY(onnx::GraphProto inferred, inferTypesIsolated(model));
  std::vector<ir::ValueType> types(graph.numValues());
  for (const auto* list : {&inferred.input(), &inferred.value_info(), &inferred.output()})
    for (const onnx::ValueInfoProto& info : *list) {
      const ir::ValueId value = graph.findValue(info.name());
      if (value == ir::kNoValue || !info.has_type())
        continue;
      CLEAVE_CHECK(fillValueType(info.type().SerializeAsString(), "value '" + info.name() + "'", types[index(value)]));
    }
  return types;
}

Expected<ir::Graph> readOnnx(const std::string& path, const OnnxReadOptions& options) {
  CLEAVE_TRY(std::shared_ptr<const MappedFile> file, MappedFile::open(path));
  return readMappedOnnx(file, options);
}

Expected<ir::Graph> readOnnxBytes(std::string_view bytes, const std::string& name, const OnnxReadOptions& options) {
  CLEAVE_TRY(std::shared_ptr<const MappedFile> file, MappedFile::fromBytes(name, bytes));
  return readMappedOnnx(file, options);
}

Expected<ir::Graph> readOnnxSubgraph(std::string_view graphProtoBytes, const std::vector<std::string>& outerValues,
                                     const std::vector<std::pair<std::string, std::int64_t>>& opsetImports,
                                     const std::string& what) {
  // Wrap the body in a model whose graph also lists the outer values as inputs, then read it
  // like any model (from memory).
  onnx::ModelProto model;
  model.set_ir_version(8);
  for (const auto& [domain, version] : opsetImports) {
    onnx::OperatorSetIdProto* opset = model.add_opset_import();
    opset->set_domain(domain);
    opset->set_version(version);
  }
  onnx::GraphProto* graph = model.mutable_graph();
  if (!graph->ParseFromArray(graphProtoBytes.data(), static_cast<int>(graphProtoBytes.size())))
    return Error(ErrorCode::ParseError) << what << ": not a GraphProto";
  for (const std::string& name : outerValues)
    graph->add_input()->set_name(name);
  std::string bytes;
  model.SerializeToString(&bytes);
  CLEAVE_TRY(std::shared_ptr<const MappedFile> file, MappedFile::fromBytes(what, bytes));
  OnnxReadOptions options;
  options.shapeInference = ShapeInference::Never;
  Expected<ir::GraphBuilder> builder = OnnxScanner(file, options).scan();
  if (!builder)
    return std::move(builder.error().withContext(what));
  Expected<ir::Graph> result = std::move(*builder).finish();
  if (!result)
    return std::move(result.error().withContext(what));
  return result;
}

} // namespace cleave::io
