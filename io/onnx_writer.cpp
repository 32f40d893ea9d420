// io/onnx_writer.cpp - ir::Graph -> ONNX ModelProto, and onnx's full check.
// Complexity: O(V + E + parameter bytes).
#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <filesystem>
#include <algorithm>
#include <fstream>
#include <unordered_set>

#include "base/file_io.h"
#include "io/fixed_parameters.h"
#include "io/onnx.h"

namespace cleave::io {
namespace {
using ir::Graph;
using ir::NodeId;
using ir::ValueId;

void fillType(const Graph& graph, ValueId value, onnx::TypeProto* type) {
  auto* tensor = type->mutable_tensor_type();
  tensor->set_elem_type(static_cast<int>(graph.dtype(value)));
  if (!graph.rankKnown(value))
    return;
  auto* shape = tensor->mutable_shape();
  for (const ir::DimEntry& dim : graph.dims(value)) {
    auto* out = shape->add_dim();
    if (dim.extent >= 0)
      out->set_dim_value(dim.extent);
    else if (dim.symbol != 0)
      out->set_dim_param(std::string(graph.symbolName(dim.symbol)));
  }
}

void addValueInfo(const Graph& graph, ValueId value,
                  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list) {
  auto* info = list->Add();
  info->set_name(std::string(graph.valueName(value)));
  if (graph.valueKind(value) == ir::ValueKind::Tensor)
    fillType(graph, value, info->mutable_type());
}

Status writeAttribute(const ir::Attribute& attr, onnx::AttributeProto* out, std::string_view node) {
  out->set_name(attr.name);
  using A = onnx::AttributeProto;
  switch (attr.kind) {
  case ir::AttrKind::Int: out->set_type(A::INT); out->set_i(attr.intValue); break;
  case ir::AttrKind::Float: out->set_type(A::FLOAT); out->set_f(static_cast<float>(attr.floatValue)); break;
  case ir::AttrKind::String: out->set_type(A::STRING); out->set_s(attr.text); break;
  case ir::AttrKind::Ints:
    out->set_type(A::INTS);
    for (std::int64_t v : attr.ints)
      out->add_ints(v);
    break;
  case ir::AttrKind::Floats:
    out->set_type(A::FLOATS);
    for (double v : attr.floats)
      out->add_floats(static_cast<float>(v));
    break;
  case ir::AttrKind::Strings:
    out->set_type(A::STRINGS);
    for (const std::string& v : attr.strings)
      out->add_strings(v);
    break;
  case ir::AttrKind::Tensor:
    out->set_type(A::TENSOR);
    if (!out->mutable_t()->ParseFromString(attr.text))
      return Error(ErrorCode::ParseError) << "node '" << node << "' attribute '" << attr.name
                                          << "' holds a corrupt tensor";
    break;
  case ir::AttrKind::Graph:
    out->set_type(A::GRAPH);
    if (!out->mutable_g()->ParseFromString(attr.text))
      return Error(ErrorCode::ParseError) << "node '" << node << "' attribute '" << attr.name
                                          << "' holds a corrupt subgraph";
    break;
  case ir::AttrKind::Json:
    return Error(ErrorCode::Unsupported) << "node '" << node << "' has FX attribute '" << attr.name
                                         << "', which ONNX cannot hold";
  }
  return {};
}

struct ExternalDataSink {
  std::string fileName; // relative to the model
  std::string bytes;
  bool forInference = false; // initializers over kLargeForInference bytes keep dtype and dims only
};

// What onnx's inference needs of a large initializer is its dtype and dims (the reader strips the
// same, io/onnx_inference.h); small integer ones stay, as data propagation reads them.
constexpr std::int64_t kLargeForInference = 64 * 1024;

// The parameter owning the tensor of the Parameter node `node` when that is a second name of a
// tensor this graph also holds (ir::Parameter::aliasOf), else null.
const ir::Parameter* aliasedParameter(const Graph& graph, NodeId node) {
  auto params = graph.parameters(node);
  if (params.size() != 1 || graph.storageOf(params[0]) == params[0])
    return nullptr;
  return &graph.parameter(graph.storageOf(params[0]));
}

void writeAliasAsIdentity(const Graph& graph, NodeId node, const ir::Parameter& owner, onnx::NodeProto* proto) {
  const ir::Parameter& alias = graph.parameter(graph.parameters(node)[0]);
  proto->set_name(alias.sourceNode);
  proto->set_op_type("Identity");
  proto->add_input(owner.name);
  proto->add_output(alias.name);
}

// A parameter read from an ONNX `Constant` node, written back as that node.
const ir::Parameter* constantParameter(const Graph& graph, NodeId node) {
  auto params = graph.parameters(node);
  if (params.size() != 1 || graph.parameter(params[0]).sourceAttributes.empty())
    return nullptr;
  return &graph.parameter(params[0]);
}

Status writeConstantNode(const ir::Parameter& constant, onnx::NodeProto* proto) {
  proto->set_name(constant.sourceNode);
  proto->set_op_type("Constant");
  proto->add_output(constant.name);
  for (const ir::Attribute& attr : constant.sourceAttributes)
    CLEAVE_CHECK(writeAttribute(attr, proto->add_attribute(), constant.sourceNode));
  return {};
}

Status writeInitializer(const Graph& graph, NodeId node, onnx::TensorProto* tensor,
                        const OnnxWriteOptions& options, ExternalDataSink& sink) {
  for (ir::ParamId param : graph.parameters(node)) {
    const ir::Parameter& p = graph.parameter(param);
    tensor->set_name(p.name);
    tensor->set_data_type(static_cast<int>(p.dtype));
    for (std::int64_t dim : p.dims)
      tensor->add_dims(dim);
    if (sink.forInference && p.bytes > kLargeForInference)
      continue;
    CLEAVE_TRY(std::string data, graph.readParameterData(param));
    if (options.externalDataThreshold > 0 &&
        static_cast<std::int64_t>(data.size()) >= options.externalDataThreshold) {
      // ONNX requires no particular alignment; 64 bytes keeps later memory mapping efficient.
      while (sink.bytes.size() % 64)
        sink.bytes.push_back('\0');
      tensor->set_data_location(onnx::TensorProto::EXTERNAL);
      auto addEntry = [&](const char* key, const std::string& value) {
        auto* entry = tensor->add_external_data();
        entry->set_key(key);
        entry->set_value(value);
      };
      addEntry("location", sink.fileName);
      addEntry("offset", std::to_string(sink.bytes.size()));
      addEntry("length", std::to_string(data.size()));
      sink.bytes += data;
    } else {
      tensor->set_raw_data(std::move(data));
    }
  }
  return {};
}

Expected<onnx::ModelProto> toModelProto(const Graph& graph, const OnnxWriteOptions& options,
                                        ExternalDataSink& sink) {
  const ir::ModelInfo& info = graph.modelInfo();
  if (info.format == ir::SourceFormat::Fx)
    return Error(ErrorCode::Unsupported)
           << "an FX graph cannot be written as ONNX (its ops are torch targets); write its "
              "assignment and apply it with tools/cleave_fx.py";
  onnx::ModelProto model;
  model.set_ir_version(info.irVersion > 0 ? info.irVersion : onnx::IR_VERSION);
  model.set_producer_name(info.producerName.empty() ? "cleave" : info.producerName);
  model.set_producer_version(info.producerVersion);
  for (const auto& [domain, version] : info.opsetImports) {
    auto* opset = model.add_opset_import();
    opset->set_domain(domain);
    opset->set_version(version);
  }
  for (const auto& [key, value] : info.metadata) {
    if (key == kFixedParametersKey)
      continue; // written anew below, from the graph's parameters
    auto* prop = model.add_metadata_props();
    prop->set_key(key);
    prop->set_value(value);
  }
  if (std::optional<std::string> fixed = fixedParametersEntry(graph)) {
    auto* prop = model.add_metadata_props();
    prop->set_key(std::string(kFixedParametersKey));
    prop->set_value(*fixed);
  }
  onnx::GraphProto* out = model.mutable_graph();
  out->set_name(info.graphName.empty() ? "main" : info.graphName);
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId node{n};
    switch (graph.kind(node)) {
    case ir::NodeKind::Input: addValueInfo(graph, graph.outputs(node)[0], out->mutable_input()); break;
    case ir::NodeKind::Parameter:
      if (const ir::Parameter* owner = aliasedParameter(graph, node)) {
        writeAliasAsIdentity(graph, node, *owner, out->add_node()); // the bytes once, as the exporter had them
        break;
      }
      if (const ir::Parameter* constant = constantParameter(graph, node)) {
        CLEAVE_CHECK(writeConstantNode(*constant, out->add_node()));
        break;
      }
      CLEAVE_CHECK(writeInitializer(graph, node, out->add_initializer(), options, sink));
      break;
    case ir::NodeKind::Output:
      for (ValueId value : graph.inputs(node))
        addValueInfo(graph, value, out->mutable_output());
      break;
    case ir::NodeKind::Op: {
      onnx::NodeProto* proto = out->add_node();
      proto->set_name(std::string(graph.name(node)));
      proto->set_op_type(std::string(graph.opType(node)));
      if (!graph.opDomain(node).empty())
        proto->set_domain(std::string(graph.opDomain(node)));
      auto inputs = graph.inputs(node);
      std::size_t explicitInputs = inputs.size() - graph.numImplicitInputs(node);
      for (std::size_t i = 0; i < explicitInputs; ++i)
        proto->add_input(inputs[i] == ir::kNoValue ? std::string() : std::string(graph.valueName(inputs[i])));
      for (ValueId value : graph.outputs(node)) {
        proto->add_output(std::string(graph.valueName(value)));
        if (graph.valueKind(value) == ir::ValueKind::Tensor && graph.dtype(value) != ir::DType::Undefined)
          addValueInfo(graph, value, out->mutable_value_info());
      }
      for (const ir::Attribute& attr : graph.attributes(node))
        CLEAVE_CHECK(writeAttribute(attr, proto->add_attribute(), graph.name(node)));
      break;
    }
    default:
      return Error(ErrorCode::Unsupported) << "node '" << graph.name(node) << "' is an FX "
                                           << ir::nodeKindName(graph.kind(node))
                                           << ", which ONNX cannot hold";
    }
  }
  // Graph outputs are declared in graph.output; drop their duplicate value_info entries.
  std::unordered_set<std::string> outputNames;
  for (const auto& output : out->output())
    outputNames.insert(output.name());
  auto* infos = out->mutable_value_info();
  infos->erase(std::remove_if(infos->begin(), infos->end(),
                              [&](const onnx::ValueInfoProto& v) { return outputNames.count(v.name()) > 0; }),
               infos->end());
  return model;
}

} // namespace

Expected<onnx::ModelProto> modelForInference(const Graph& graph) {
  ExternalDataSink sink;
  sink.forInference = true;
  return toModelProto(graph, {}, sink);
}

Status writeOnnx(const Graph& graph, const std::string& path, const OnnxWriteOptions& options) {
  ExternalDataSink sink;
  sink.fileName = std::filesystem::path(path).filename().string() + ".data";
  CLEAVE_TRY(onnx::ModelProto model, toModelProto(graph, options, sink));
  std::string bytes;
  if (model.ByteSizeLong() > static_cast<std::size_t>(INT32_MAX))
    return Error(ErrorCode::Unsupported) << "model is over 2 GB; write its parameters as external "
                                            "data (--external-data)";
  if (!model.SerializeToString(&bytes))
    return Error(ErrorCode::IoError) << "cannot serialize the model for '" << path << "'";
  if (!sink.bytes.empty()) {
    std::string dataPath = (std::filesystem::path(path).parent_path() / sink.fileName).string();
    CLEAVE_CHECK(writeFileAtomically(dataPath, sink.bytes));
  }
  return writeFileAtomically(path, bytes);
}

Status checkOnnxFile(const std::string& path) {
  try {
    onnx::checker::check_model(path);
    onnx::ModelProto model;
    std::ifstream file(path, std::ios::binary);
    if (!model.ParseFromIstream(&file))
      return Error(ErrorCode::ParseError) << "'" << path << "' is not a valid ONNX model";
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions{true, 1, false});
  } catch (const std::exception& e) {
    return Error(ErrorCode::InvalidGraph) << "'" << path << "' fails the onnx full check: " << e.what();
  }
  return {};
}

} // namespace cleave::io
