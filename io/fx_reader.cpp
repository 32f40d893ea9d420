#include <nlohmann/json.hpp>

#include <algorithm>

#include "base/checked_math.h"
#include "base/file_io.h"
#include "base/json.h"
#include "io/fx.h"
#include "ir/builder.h"

namespace cleave::io {
namespace {
using nlohmann::json;

Expected<ir::NodeKind> parseOp(const std::string& op, const std::string& node) {
  static const std::pair<const char*, ir::NodeKind> kOps[] = {
      {"placeholder", ir::NodeKind::Input},       {"get_attr", ir::NodeKind::Parameter},
      {"call_function", ir::NodeKind::Op},        {"call_module", ir::NodeKind::ModuleCall},
      {"call_method", ir::NodeKind::MethodCall},  {"output", ir::NodeKind::Output},
  };
  for (const auto& [name, kind] : kOps)
    if (op == name)
      return kind;
  return Error(ErrorCode::ParseError) << "node '" << node << "' has unknown op '" << op << "'";
}

Expected<ir::DType> parseDType(const json& value, const std::string& what) {
  std::string name = value.is_string() ? value.get<std::string>() : "";
  std::optional<ir::DType> dtype = ir::dtypeFromTorch(name);
  if (!dtype)
    return Error(ErrorCode::ParseError) << what << " has unknown dtype '" << name << "'";
  return *dtype;
}

Expected<std::vector<std::int64_t>> parseShape(const json& value, const std::string& what) {
  if (!value.is_array())
    return Error(ErrorCode::ParseError) << what << " has no shape list";
  std::vector<std::int64_t> dims;
  for (const json& dim : value) {
    if (!dim.is_number_integer() || dim.get<std::int64_t>() < 0)
      return Error(ErrorCode::ParseError) << what << " has a bad dimension " << toJsonText(dim);
    dims.push_back(dim.get<std::int64_t>());
  }
  return dims;
}

Expected<ir::ValueType> parseValue(const json& value, const std::string& node) {
  const std::string what = "node '" + node + "' value";
  if (!value.is_object())
    return ir::ValueType{};
  std::string kind = value.value("kind", "unknown");
  ir::ValueType type;
  type.typeName = value.value("python_type", "");
  if (kind == "tensor") {
    CLEAVE_TRY(ir::DType dtype, parseDType(value.value("dtype", json()), what));
    CLEAVE_TRY(std::vector<std::int64_t> dims, parseShape(value.value("shape", json()), what));
    type = ir::ValueType::tensor(dtype, std::move(dims));
    CLEAVE_CHECK(ir::checkTensorSize(type, what));
  } else if (kind == "sequence") {
    type.kind = ir::ValueKind::Sequence;
    std::int64_t total = 0;
    for (const json& element : value.value("elements", json::array())) {
      CLEAVE_TRY(ir::ValueType inner, parseValue(element, node));
      std::int64_t bytes = ir::byteSizeOf(inner);
      if (bytes > 0) {
        std::optional<std::int64_t> sum = checkedAdd(total, bytes);
        if (!sum)
          return Error(ErrorCode::InvalidArgument) << what << " is a sequence whose size in bytes overflows 64 bits";
        total = *sum;
      }
    }
    type.bytes = total;
  } else if (kind == "shape") {
    type.kind = ir::ValueKind::Shape;
  } else if (kind == "scalar") {
    type.kind = ir::ValueKind::Scalar;
  } else if (kind == "none") {
    type.kind = ir::ValueKind::None;
  } else if (kind == "other") {
    type.kind = ir::ValueKind::Other;
  } else if (kind != "unknown") {
    return Error(ErrorCode::ParseError) << what << " has unknown kind '" << kind << "'";
  }
  return type;
}

Expected<ir::Parameter> parseParameter(const json& entry, const std::string& node) {
  const std::string what = "node '" + node + "' parameter";
  if (!entry.is_object() || !entry.contains("name"))
    return Error(ErrorCode::ParseError) << what << " has no name";
  ir::Parameter param;
  param.name = entry["name"].get<std::string>();
  CLEAVE_TRY(param.dtype, parseDType(entry.value("dtype", json()), what + " '" + param.name + "'"));
  CLEAVE_TRY(param.dims, parseShape(entry.value("shape", json()), what + " '" + param.name + "'"));
  ir::ValueType declared = ir::ValueType::tensor(param.dtype, param.dims);
  CLEAVE_CHECK(ir::checkTensorSize(declared, what + " '" + param.name + "'"));
  param.bytes = ir::byteSizeOf(declared);
  if (entry.contains("bytes")) {
    CLEAVE_TRY(param.bytes, jsonInteger(entry["bytes"], what + " '" + param.name + "'", "bytes", 0, INT64_MAX));
  }
  param.fixed = entry.value("buffer", false) ? ir::Fixed::Buffer : ir::Fixed::Trains;
  return param;
}

std::vector<std::string> stringList(const json& value) {
  std::vector<std::string> items;
  if (value.is_array())
    for (const json& item : value)
      if (item.is_string())
        items.push_back(item.get<std::string>());
  return items;
}

Status addFxNode(ir::GraphBuilder& builder, const json& entry,
                 std::vector<std::string>& outputNames) {
  if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
      !entry.contains("op") || !entry["op"].is_string())
    return Error(ErrorCode::ParseError) << "a node lacks 'name' or 'op'";
  std::string name = entry["name"].get<std::string>();
  CLEAVE_TRY(ir::NodeKind kind, parseOp(entry["op"].get<std::string>(), name));
  ir::NodeSpec spec;
  spec.kind = kind;
  spec.name = name;
  spec.scope = entry.value("scope", "");
  spec.opType = entry.value("op_target", entry.value("target", ""));
  spec.inputs = stringList(entry.value("inputs", json::array()));
  if (kind == ir::NodeKind::Output) {
    outputNames = spec.inputs;
    return {};
  }
  for (const char* key : {"args", "kwargs"}) {
    auto it = entry.find(key);
    if (it != entry.end() && !it->empty()) {
      ir::Attribute attr;
      attr.name = key;
      attr.kind = ir::AttrKind::Json;
      attr.text = it->dump();
      spec.attributes.push_back(std::move(attr));
    }
  }
  if (entry.value("embedding", false)) { // an embedding region node (sparse_nn partitioning)
    ir::Attribute embedding;
    embedding.name = "embedding";
    embedding.kind = ir::AttrKind::Int;
    embedding.intValue = 1;
    spec.attributes.push_back(std::move(embedding));
  }
  if (kind == ir::NodeKind::ModuleCall || kind == ir::NodeKind::Parameter) {
    ir::Attribute target;
    target.name = "target";
    target.kind = ir::AttrKind::String;
    target.text = entry.value("target", "");
    spec.attributes.push_back(std::move(target));
  }
  for (const json& param : entry.value("parameters", json::array())) {
    CLEAVE_TRY(ir::Parameter parsed, parseParameter(param, name));
    spec.parameters.push_back(std::move(parsed));
  }
  CLEAVE_TRY(ir::ValueType type, parseValue(entry.value("value", json()), name));
  spec.outputs.push_back({name, std::move(type)});
  builder.addNode(std::move(spec));
  return {};
}

// The exporter writes users too; they must agree with the inputs we built the graph from.
Status checkUsers(const ir::Graph& graph, const json& nodes) {
  for (const json& entry : nodes) {
    std::string name = entry["name"].get<std::string>();
    ir::NodeId node = graph.findNode(name);
    if (node == ir::NodeId{UINT32_MAX}) // renamed by the builder (an empty name)
      return Error(ErrorCode::ParseError) << "node '" << name << "' is not in the graph under its own name";
    if (graph.kind(node) == ir::NodeKind::Output)
      continue;
    std::vector<std::string> expected = stringList(entry.value("users", json::array()));
    std::vector<std::string> actual;
    for (ir::NodeId user : graph.users(graph.outputs(node)[0]))
      actual.emplace_back(graph.name(user));
    std::sort(expected.begin(), expected.end());
    std::sort(actual.begin(), actual.end());
    if (expected != actual)
      return Error(ErrorCode::ParseError) << "node '" << name
                                          << "' lists users that disagree with the inputs of other nodes";
  }
  return {};
}

Expected<ir::Graph> graphFromDocument(const json& doc, const std::string& sourceName) {
  auto fail = [&](auto&&... parts) {
    Error error(ErrorCode::ParseError);
    (error << ... << parts);
    return std::move(error.withContext(sourceName));
  };
  if (!doc.is_object() || doc.value("schema", "") != kFxSchema)
    return fail("not a cleave FX graph (schema '", kFxSchema, "' expected)");
  if (!doc.contains("version") || !doc["version"].is_number_integer() ||
      doc["version"].get<int>() != kFxSchemaVersion)
    return fail("FX graph schema version ", toJsonText(doc.value("version", json())),
                " is not supported (cleave reads version ", kFxSchemaVersion, ")");
  if (!doc.contains("nodes") || !doc["nodes"].is_array())
    return fail("no 'nodes' list");
  const json& nodes = doc["nodes"];
  ir::GraphBuilder builder(ir::SourceFormat::Fx);
  builder.modelInfo().graphName = doc.value("graph_name", "");
  builder.modelInfo().producerName = "torch.fx";
  builder.modelInfo().producerVersion = doc.value("torch_version", "");
  builder.modelInfo().sourcePath = sourceName;
  builder.modelInfo().buffersListed = true; // each tensor says whether it is a buffer (tools/cleave_fx.py)
  builder.reserve(nodes.size(), nodes.size());
  std::vector<std::string> outputNames;
  bool sawOutput = false;
  for (const json& entry : nodes) {
    if (Status added = addFxNode(builder, entry, outputNames); !added)
      return std::move(added.error().withContext(sourceName));
    if (entry.value("op", "") == "output") {
      if (sawOutput)
        return fail("more than one output node");
      sawOutput = true;
    }
  }
  if (!sawOutput)
    return fail("no output node");
  builder.setOutputs(std::move(outputNames));
  Expected<ir::Graph> graph = std::move(builder).finish();
  if (!graph)
    return std::move(graph.error().withContext(sourceName));
  if (Status users = checkUsers(*graph, nodes); !users)
    return std::move(users.error().withContext(sourceName));
  return graph;
}

} // namespace

Expected<ir::Graph> parseFxGraph(std::string_view text, const std::string& sourceName) {
  CLEAVE_TRY(json doc, parseJsonInput(text, sourceName));
  return guardJson(sourceName, [&]() { return graphFromDocument(doc, sourceName); });
}

Expected<ir::Graph> readFxGraph(const std::string& path) {
  CLEAVE_TRY(std::string text, readFile(path));
  return parseFxGraph(text, path);
}

} // namespace cleave::io
