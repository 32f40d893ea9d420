#include "ir/extract.h"

#include <algorithm>
#include <filesystem>
#include <unordered_set>

#include "ir/builder.h"

namespace cleave::ir {

NodeSetBoundary boundaryOf(const Graph& graph, std::span<const NodeId> nodes) {
  std::vector<std::uint8_t> inSet(graph.numNodes(), 0);
  for (NodeId node : nodes)
    inSet[index(node)] = 1;
  NodeSetBoundary boundary;
  for (NodeId node : nodes) {
    for (ValueId value : graph.inputs(node))
      if (value != kNoValue && !inSet[index(graph.producer(value))] &&
          graph.kind(graph.producer(value)) != NodeKind::Parameter)
        boundary.inputs.push_back(value);
    for (ValueId value : graph.outputs(node)) {
      auto users = graph.users(value);
      if (std::any_of(users.begin(), users.end(), [&](NodeId user) { return !inSet[index(user)]; }))
        boundary.outputs.push_back(value);
    }
  }
  for (std::vector<ValueId>* list : {&boundary.inputs, &boundary.outputs}) {
    std::sort(list->begin(), list->end());
    list->erase(std::unique(list->begin(), list->end()), list->end());
  }
  return boundary;
}

namespace {
// The Parameter nodes that own the storage of the aliases among `params` (ir::Parameter::aliasOf),
// not among them and not sent (`inputs`). O(nodes) when there is an alias, else O(params).
std::vector<NodeId> ownersOfAliases(const Graph& graph, const std::vector<NodeId>& params,
                                    std::span<const ValueId> inputs) {
  std::vector<std::uint8_t> wanted(graph.numParameters(), 0); // per ParamId: an owner to add
  bool any = false;
  for (NodeId node : params)
    for (ParamId param : graph.parameters(node))
      if (graph.storageOf(param) != param) {
        wanted[index(graph.storageOf(param))] = 1;
        any = true;
      }
  if (!any)
    return {};
  for (NodeId node : params) // already copied
    for (ParamId param : graph.parameters(node))
      wanted[index(param)] = 0;
  std::vector<NodeId> owners;
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    const NodeId node{n};
    if (graph.kind(node) == NodeKind::Parameter && graph.parameters(node).size() == 1 &&
        wanted[index(graph.parameters(node)[0])] &&
        std::find(inputs.begin(), inputs.end(), graph.outputs(node)[0]) == inputs.end()) // not sent
      owners.push_back(node);
  }
  return owners;
}

// Parameter nodes the set reads or sends, once each, in node order; those `inputs` lists are
// sent by their owner instead. An alias comes with the parameter owning its tensor, so the cut
// holds the tensor under both names as the source did (written back as Identity of the owner):
// neighbouring cuts joined again (joinGraphs), or a pipeline's stages, then hold one tensor, not
// one per name (a deduplicated BERT encoder's twelve layers read one set of weights through
// aliases; its cut held twelve).
// The value a node of the set reads for `value` (SubgraphSpec::readsInstead); dense, and empty
// (no cost) when nothing is replaced.
class ReadMap {
public:
  ReadMap(const Graph& graph, std::span<const std::pair<ValueId, ValueId>> instead) {
    if (instead.empty())
      return;
    to_.assign(graph.numValues(), kNoValue);
    for (const auto& [from, to] : instead)
      to_[index(from)] = to;
  }
  ValueId operator()(ValueId value) const {
    return to_.empty() || value == kNoValue || to_[index(value)] == kNoValue ? value : to_[index(value)];
  }

private:
  std::vector<ValueId> to_;
};

std::vector<NodeId> parametersToCopy(const Graph& graph, const SubgraphSpec& spec, const ReadMap& read) {
  std::vector<NodeId> params;
  auto consider = [&](ValueId value) {
    if (value != kNoValue && graph.kind(graph.producer(value)) == NodeKind::Parameter)
      params.push_back(graph.producer(value));
  };
  for (NodeId node : spec.nodes)
    for (ValueId value : graph.inputs(node))
      consider(read(value));
  for (ValueId value : spec.outputs)
    consider(value);
  std::sort(params.begin(), params.end());
  params.erase(std::unique(params.begin(), params.end()), params.end());
  std::erase_if(params, [&](NodeId param) {
    return std::find(spec.inputs.begin(), spec.inputs.end(), graph.outputs(param)[0]) != spec.inputs.end();
  });
  const std::vector<NodeId> owners = ownersOfAliases(graph, params, spec.inputs);
  params.insert(params.end(), owners.begin(), owners.end());
  std::sort(params.begin(), params.end());
  return params;
}

NodeSpec copyOf(const Graph& graph, NodeId node, const IdVector<ValueId, ValueType>* types, const ReadMap& read) {
  NodeSpec spec;
  spec.kind = graph.kind(node);
  spec.name = graph.name(node);
  spec.domain = graph.opDomain(node);
  spec.opType = graph.opType(node);
  spec.scope = graph.scope(node);
  spec.implicitInputs = graph.numImplicitInputs(node);
  for (ValueId value : graph.inputs(node))
    spec.inputs.emplace_back(value == kNoValue ? std::string_view() : graph.valueName(read(value)));
  for (ValueId value : graph.outputs(node))
    spec.outputs.push_back({std::string(graph.valueName(value)), types ? (*types)[value] : graph.valueType(value)});
  spec.attributes.assign(graph.attributes(node).begin(), graph.attributes(node).end());
  for (ParamId param : graph.parameters(node))
    spec.parameters.push_back(graph.parameter(param));
  return spec;
}
} // namespace

Expected<Graph> extractSubgraph(const Graph& graph, const SubgraphSpec& spec) {
  auto typeOf = [&](ValueId value) { return spec.types ? (*spec.types)[value] : graph.valueType(value); };
  GraphBuilder builder(graph.modelInfo().format);
  ModelInfo info = graph.modelInfo();
  info.graphName = spec.name;
  info.producerName = "cleave";
  builder.modelInfo() = info;
  builder.setModelFile(graph.modelFile());
  for (ValueId value : spec.inputs)
    builder.addInput(graph.valueName(value), typeOf(value));
  const ReadMap read(graph, spec.readsInstead);
  for (NodeId paramNode : parametersToCopy(graph, spec, read)) {
    for (ParamId param : graph.parameters(paramNode)) {
      Parameter copy = graph.parameter(param);
      auto replaced = spec.parameterBytes ? spec.parameterBytes->find(copy.aliasOf.empty() ? copy.name : copy.aliasOf)
                                          : std::map<std::string, std::string>::const_iterator();
      if (spec.parameterBytes && replaced != spec.parameterBytes->end()) {
        if (static_cast<std::int64_t>(replaced->second.size()) != copy.bytes)
          return Error(ErrorCode::InvalidArgument) << "parameter '" << copy.name << "': " << replaced->second.size()
                                                   << " new bytes for " << copy.bytes;
        copy.data = builder.appendInlineData(replaced->second);
      } else if (copy.data.source == ParameterData::Source::Inline) {
        CLEAVE_TRY(std::string bytes, graph.readParameterData(param));
        copy.data = builder.appendInlineData(bytes);
      }
      builder.addParameter(std::move(copy), graph.valueType(graph.outputs(paramNode)[0]));
    }
  }
  for (const AddedParameter& added : spec.addedParameters) {
    Parameter parameter;
    parameter.name = std::string(graph.valueName(added.value));
    parameter.dtype = added.dtype;
    parameter.dims = added.dims;
    parameter.bytes = static_cast<std::int64_t>(added.bytes.size());
    parameter.fixed = Fixed::Folded; // a constant, never trained
    parameter.data = builder.appendInlineData(added.bytes);
    builder.addParameter(std::move(parameter), ValueType::tensor(added.dtype, added.dims));
  }
  for (NodeId node : spec.nodes)
    builder.addNode(copyOf(graph, node, spec.types, read));
  std::vector<std::string> outputs;
  for (ValueId value : spec.outputs)
    outputs.emplace_back(graph.valueName(value));
  builder.setOutputs(std::move(outputs));
  return std::move(builder).finish();
}

} // namespace cleave::ir

namespace cleave::ir {
namespace {
// `file` relative to `folder`, both taken as written (links are resolved when the data is read,
// by resolveInsideFolder). Fails when `file` lies outside `folder`.
Expected<std::string> relativeInside(const std::filesystem::path& file, const std::filesystem::path& folder) {
  std::filesystem::path relative =
      std::filesystem::absolute(file).lexically_normal().lexically_relative(std::filesystem::absolute(folder).lexically_normal());
  if (relative.empty() || *relative.begin() == "..")
    return Error(ErrorCode::InvalidArgument) << "'" << file.string() << "' lies outside '" << folder.string() << "'";
  return relative.string();
}

// The parameter as a joined graph holds it: bytes left where the part's file has them.
Expected<Parameter> rehomed(const Graph& part, ParamId param, GraphBuilder& builder, const std::string& folder) {
  Parameter copy = part.parameter(param);
  const std::filesystem::path partFile = part.modelInfo().sourcePath;
  switch (copy.data.source) {
  case ParameterData::Source::None: break;
  case ParameterData::Source::Inline: {
    CLEAVE_TRY(std::string bytes, part.readParameterData(param));
    copy.data = builder.appendInlineData(bytes);
    break;
  }
  case ParameterData::Source::ModelFile: {
    CLEAVE_TRY(copy.data.externalPath, relativeInside(partFile, folder));
    copy.data.source = ParameterData::Source::External;
    break;
  }
  case ParameterData::Source::External: {
    CLEAVE_TRY(copy.data.externalPath, relativeInside(partFile.parent_path() / copy.data.externalPath, folder));
    break;
  }
  }
  return copy;
}

// The union of the parts' opset imports, each domain at the highest version a part asks for.
void mergeOpsets(ModelInfo& info, const Graph& part) {
  for (const std::pair<std::string, std::int64_t>& opset : part.modelInfo().opsetImports) {
    auto same = std::find_if(info.opsetImports.begin(), info.opsetImports.end(),
                             [&](const auto& entry) { return entry.first == opset.first; });
    if (same == info.opsetImports.end())
      info.opsetImports.push_back(opset);
    else
      same->second = std::max(same->second, opset.second);
  }
}
} // namespace

Expected<Graph> joinGraphs(const JoinSpec& spec) {
  if (spec.parts.empty())
    return Error(ErrorCode::InvalidArgument) << "joining '" << spec.name << "': no graphs";
  GraphBuilder builder(spec.parts.front()->modelInfo().format);
  ModelInfo info = spec.parts.front()->modelInfo();
  info.graphName = spec.name;
  info.producerName = "cleave";
  info.opsetImports.clear();
  // External data is found relative to the graph's own file; the joined graph lives in `folder`.
  info.sourcePath = (std::filesystem::path(spec.folder) / spec.name).string();
  std::unordered_set<std::string> made; // values an earlier part (or its parameters) makes
  for (const Graph* part : spec.parts)
    for (std::uint32_t n = 0; n < part->numNodes(); ++n) {
      NodeId node{n};
      NodeKind kind = part->kind(node);
      if (kind == NodeKind::Output)
        continue;
      ValueId first = part->outputs(node).empty() ? kNoValue : part->outputs(node)[0];
      if (kind == NodeKind::Input || kind == NodeKind::Parameter) {
        std::string name(part->valueName(first));
        if (!made.insert(name).second)
          continue; // made by an earlier part, or a parameter it already holds
        if (kind == NodeKind::Input) {
          builder.addInput(name, part->valueType(first));
          continue;
        }
        for (ParamId param : part->parameters(node)) {
          CLEAVE_TRY(Parameter copy, rehomed(*part, param, builder, spec.folder));
          builder.addParameter(std::move(copy), part->valueType(first));
        }
        continue;
      }
      builder.addNode(copyOf(*part, node, nullptr, ReadMap(*part, {})));
      for (ValueId value : part->outputs(node))
        made.emplace(part->valueName(value));
    }
  for (const Graph* part : spec.parts)
    mergeOpsets(info, *part);
  builder.modelInfo() = std::move(info);
  builder.setOutputs(std::vector<std::string>(spec.outputs.begin(), spec.outputs.end()));
  return std::move(builder).finish();
}

} // namespace cleave::ir
