#include "ir/graph.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "base/file_io.h"

namespace cleave::ir {

std::string_view nodeKindName(NodeKind kind) {
  switch (kind) {
  case NodeKind::Input: return "placeholder";
  case NodeKind::Parameter: return "get_attr";
  case NodeKind::Op: return "call_function";
  case NodeKind::ModuleCall: return "call_module";
  case NodeKind::MethodCall: return "call_method";
  case NodeKind::Output: return "output";
  }
  return "?";
}

std::string Graph::target(NodeId node) const {
  std::string_view domain = opDomain(node);
  if (domain.empty() || domain == "ai.onnx")
    return std::string(opType(node));
  return std::string(domain) + "::" + std::string(opType(node));
}

std::span<const ValueId> Graph::inputs(NodeId node) const {
  IdRange range = at(node).inputs;
  return {operands_.data() + range.begin, range.size()};
}

std::span<const ValueId> Graph::outputs(NodeId node) const {
  IdRange range = at(node).outputs;
  return {results_.data() + range.begin, range.size()};
}

std::span<const Attribute> Graph::attributes(NodeId node) const {
  IdRange range = at(node).attrs;
  return {attrs_.data() + range.begin, range.size()};
}

const Attribute* Graph::findAttribute(NodeId node, std::string_view attrName) const {
  for (const Attribute& attr : attributes(node))
    if (attr.name == attrName)
      return &attr;
  return nullptr;
}

std::span<const ParamId> Graph::parameters(NodeId node) const {
  IdRange range = at(node).params;
  return {nodeParams_.data() + range.begin, range.size()};
}

std::int64_t Graph::parameterBytes(NodeId node) const {
  std::int64_t total = 0;
  for (ParamId param : parameters(node))
    total += parameter(param).bytes;
  return total;
}

bool Graph::isCallable(NodeId node) const {
  NodeKind k = kind(node);
  return k == NodeKind::Op || k == NodeKind::ModuleCall || k == NodeKind::MethodCall;
}

NodeId Graph::findNode(std::string_view nodeName) const {
  std::uint32_t id = strings_.find(nodeName);
  return NodeId{id < nodeByName_.size() ? nodeByName_[id] : UINT32_MAX};
}

ValueId Graph::findValue(std::string_view valueName) const {
  std::uint32_t id = strings_.find(valueName);
  return id < valueByName_.size() && valueByName_[id] != UINT32_MAX ? ValueId{valueByName_[id]}
                                                                     : kNoValue;
}

std::span<const NodeId> Graph::users(ValueId value) const {
  IdRange range = vat(value).users;
  return {users_.data() + range.begin, range.size()};
}

std::span<const DimEntry> Graph::dims(ValueId value) const {
  IdRange range = vat(value).dims;
  return {dims_.data() + range.begin, range.size()};
}

ValueType Graph::valueType(ValueId value) const {
  const Value& v = vat(value);
  ValueType type;
  type.kind = v.kind;
  type.dtype = v.dtype;
  type.typeName = strings_.str(v.typeName);
  type.shape.rankKnown = v.rankKnown;
  for (const DimEntry& dim : dims(value))
    type.shape.dims.push_back(Dim{dim.extent, std::string(dim.extent >= 0 ? "" : strings_.str(dim.symbol))});
  std::int64_t derived = byteSizeOf(type);
  if (v.bytes != derived)
    type.bytes = v.bytes;
  return type;
}

std::optional<std::string_view> Graph::parameterDataInMemory(ParamId param) const {
  const Parameter& p = parameter(param);
  std::string_view bytes;
  if (p.data.source == ParameterData::Source::Inline && inlineData_)
    bytes = *inlineData_;
  else if (p.data.source == ParameterData::Source::ModelFile && modelFile_)
    bytes = modelFile_->bytes();
  else
    return std::nullopt;
  if (p.data.offset > bytes.size() || p.data.length > bytes.size() - p.data.offset)
    return std::nullopt;
  return bytes.substr(p.data.offset, p.data.length);
}

Expected<std::string> Graph::readParameterData(ParamId param) const {
  const Parameter& p = parameter(param);
  switch (p.data.source) {
  case ParameterData::Source::None: return std::string();
  case ParameterData::Source::Inline:
  case ParameterData::Source::ModelFile: {
    std::optional<std::string_view> bytes = parameterDataInMemory(param);
    if (!bytes)
      return Error(ErrorCode::ParseError) << "data of parameter '" << p.name << "' lies outside its model file";
    return std::string(*bytes);
  }
  case ParameterData::Source::External: {
    std::string folder = std::filesystem::path(info_.sourcePath).parent_path().string();
    CLEAVE_TRY(std::string path, resolveInsideFolder(folder, p.data.externalPath,
                                                     "external data location of parameter '" + p.name + "'"));
    Expected<RegularFile> opened = RegularFile::open(path);
    if (!opened)
      return std::move(opened.error().withContext("external data of parameter '" + p.name + "'"));
    RegularFile file = std::move(*opened);
    std::uint64_t fileSize = file.size();
    if (p.data.offset > fileSize)
      return Error(ErrorCode::ParseError) << "external data of parameter '" << p.name << "' starts past the end of '"
                                          << path << "' (offset " << p.data.offset << " > " << fileSize << " bytes)";
    std::uint64_t length = p.data.length ? p.data.length : fileSize - p.data.offset;
    if (length > fileSize - p.data.offset)
      return Error(ErrorCode::ParseError) << "external data of parameter '" << p.name << "' runs past the end of '"
                                          << path << "' (" << p.data.offset << " + " << length << " > " << fileSize
                                          << " bytes)";
    std::string bytes(length, '\0');
    std::uint64_t done = 0;
    while (done < length) {
      ssize_t got = ::pread(file.fd(), bytes.data() + done, length - done, static_cast<off_t>(p.data.offset + done));
      if (got <= 0)
        return Error(ErrorCode::IoError) << "reading external data of parameter '" << p.name << "' from '" << path << "'";
      done += static_cast<std::uint64_t>(got);
    }
    return bytes;
  }
  }
  return std::string();
}

std::vector<std::string> graphInputNames(const Graph& graph) {
  std::vector<std::string> names;
  for (NodeId node : graph.inputNodes())
    names.emplace_back(graph.valueName(graph.outputs(node)[0]));
  return names;
}

std::vector<std::string> graphOutputNames(const Graph& graph) {
  std::vector<std::string> names;
  for (ValueId value : graph.graphOutputs())
    names.emplace_back(graph.valueName(value));
  return names;
}

Status verifyGraph(const Graph& graph) {
  auto fail = [&](NodeId node, std::string_view what) {
    return Error(ErrorCode::InvalidGraph)
           << "node '" << graph.name(node) << "' (#" << index(node) << "): " << what;
  };
  std::uint32_t nodes = graph.numNodes();
  if (nodes == 0 || graph.kind(graph.outputNode()) != NodeKind::Output)
    return Error(ErrorCode::InvalidGraph) << "graph does not end with an output node";
  for (std::uint32_t n = 0; n < nodes; ++n) {
    NodeId node{n};
    if (graph.nodeByName_[graph.nodes_[n].name] != n)
      return fail(node, "name is not unique");
    if (graph.kind(node) == NodeKind::Output && n + 1 != nodes)
      return fail(node, "second output node");
    for (ValueId value : graph.inputs(node)) {
      if (value == kNoValue)
        continue;
      if (index(value) >= graph.numValues())
        return fail(node, "operand id out of range");
      if (index(graph.producer(value)) >= n)
        return fail(node, "operand '" + std::string(graph.valueName(value)) +
                              "' is produced later (order is not topological)");
      auto users = graph.users(value);
      if (std::find(users.begin(), users.end(), node) == users.end())
        return fail(node, "missing from the users of '" + std::string(graph.valueName(value)) + "'");
    }
    for (ValueId value : graph.outputs(node))
      if (graph.producer(value) != node)
        return fail(node, "output '" + std::string(graph.valueName(value)) + "' has another producer");
  }
  for (std::uint32_t v = 0; v < graph.numValues(); ++v) {
    ValueId value{v};
    if (graph.valueByName_[graph.values_[v].name] != v)
      return Error(ErrorCode::InvalidGraph)
             << "value '" << graph.valueName(value) << "' name is not unique";
    NodeId previous{0};
    bool first = true;
    for (NodeId user : graph.users(value)) {
      if (!first && index(user) <= index(previous))
        return Error(ErrorCode::InvalidGraph)
               << "users of value '" << graph.valueName(value) << "' are not sorted and unique";
      auto operands = graph.inputs(user);
      if (std::find(operands.begin(), operands.end(), value) == operands.end())
        return fail(user, "listed as a user of '" + std::string(graph.valueName(value)) +
                              "' but does not read it");
      previous = user;
      first = false;
    }
  }
  return {};
}

} // namespace cleave::ir
