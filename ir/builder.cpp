#include "ir/builder.h"

#include <algorithm>
#include <unordered_map>

namespace cleave::ir {
namespace {
constexpr std::uint32_t kNone = UINT32_MAX;

std::uint32_t u32(std::size_t size) { return static_cast<std::uint32_t>(size); }

// Graph::storageOf for every parameter: an alias resolves to the tensor-owning parameter its
// aliasOf names, or to itself when the graph does not hold that one (a submodel that copied
// only the alias). O(P) expected.
std::vector<ParamId> resolveStorage(const std::vector<Parameter>& params) {
  std::unordered_map<std::string_view, std::uint32_t> owners;
  for (std::uint32_t p = 0; p < params.size(); ++p)
    if (params[p].aliasOf.empty())
      owners.emplace(params[p].name, p);
  std::vector<ParamId> storage(params.size());
  for (std::uint32_t p = 0; p < params.size(); ++p) {
    auto found = params[p].aliasOf.empty() ? owners.end() : owners.find(params[p].aliasOf);
    storage[p] = ParamId{found == owners.end() ? p : found->second};
  }
  return storage;
}
} // namespace

GraphBuilder::GraphBuilder(SourceFormat format) { info_.format = format; }

void GraphBuilder::reserve(std::size_t nodes, std::size_t values) {
  nodes_.reserve(nodes + 1);
  values_.reserve(values);
  operandNames_.reserve(values * 2);
  strings_.reserve(nodes + values + 16);
}

void GraphBuilder::addPendingValue(std::string_view name, const ValueType& type,
                                   std::uint32_t producer) {
  PendingValue value{};
  value.name = strings_.intern(name);
  value.kind = type.kind;
  value.dtype = type.dtype;
  value.rankKnown = type.shape.rankKnown;
  value.typeName = strings_.intern(type.typeName);
  value.producer = producer;
  value.dims.begin = u32(dims_.size());
  for (const Dim& dim : type.shape.dims)
    dims_.push_back(DimEntry{dim.extent, dim.isKnown() ? 0u : strings_.intern(dim.symbol)});
  value.dims.end = u32(dims_.size());
  value.bytes = byteSizeOf(type);
  values_.push_back(value);
}

void GraphBuilder::addSourceNode(NodeKind kind, std::string_view name, const ValueType& type) {
  PendingNode node{};
  node.kind = kind;
  node.name = strings_.intern(name);
  auto range = [](std::size_t at) { return IdRange{u32(at), u32(at)}; };
  node.inputs = range(operandNames_.size());
  node.attrs = range(attrs_.size());
  node.params = range(nodeParams_.size());
  node.outputs.begin = u32(values_.size());
  addPendingValue(name, type, u32(nodes_.size()));
  node.outputs.end = u32(values_.size());
  nodes_.push_back(node);
}

void GraphBuilder::addInput(std::string_view name, const ValueType& type) {
  addSourceNode(NodeKind::Input, name, type);
}

void GraphBuilder::addParameter(Parameter parameter, const ValueType& type) {
  addSourceNode(NodeKind::Parameter, parameter.name, type);
  parameterNodeParam_.emplace(strings_.intern(parameter.name), u32(params_.size()));
  nodeParams_.push_back(u32(params_.size()));
  params_.push_back(std::move(parameter));
  nodes_.back().params.end = u32(nodeParams_.size());
}

bool GraphBuilder::addParameterAlias(std::string_view aliasName, std::string_view existingName,
                                     std::string_view nodeName) {
  std::uint32_t id = strings_.find(existingName);
  auto found = id == kNone ? parameterNodeParam_.end() : parameterNodeParam_.find(id);
  if (found == parameterNodeParam_.end())
    return false;
  Parameter alias = params_[found->second];
  if (alias.aliasOf.empty())
    alias.aliasOf = alias.name;
  alias.name = aliasName;
  alias.sourceNode = nodeName;
  alias.sourceAttributes.clear();
  ValueType type = ValueType::tensor(alias.dtype, alias.dims);
  addParameter(std::move(alias), type);
  return true;
}

bool GraphBuilder::markFixed(std::string_view name, Fixed why) {
  std::uint32_t id = strings_.find(name);
  auto found = id == kNone ? parameterNodeParam_.end() : parameterNodeParam_.find(id);
  if (found == parameterNodeParam_.end())
    return false;
  Parameter& param = params_[found->second];
  if (param.fixed == Fixed::Trains)
    param.fixed = why;
  if (!param.aliasOf.empty())
    markFixed(param.aliasOf, why);
  return true;
}

ParameterData GraphBuilder::appendInlineData(std::string_view bytes) {
  ParameterData data;
  data.source = ParameterData::Source::Inline;
  data.offset = inlineData_.size();
  data.length = bytes.size();
  inlineData_.append(bytes);
  return data;
}

void GraphBuilder::addNode(const NodeSpec& spec) {
  PendingNode node{};
  auto nodeIndex = u32(nodes_.size());
  node.kind = spec.kind;
  node.implicitInputs = spec.implicitInputs;
  node.name = strings_.intern(spec.name);
  node.domain = strings_.intern(spec.domain);
  node.opType = strings_.intern(spec.opType);
  node.scope = strings_.intern(spec.scope);
  node.inputs.begin = u32(operandNames_.size());
  for (const std::string& input : spec.inputs)
    operandNames_.push_back(strings_.intern(input));
  node.inputs.end = u32(operandNames_.size());
  node.outputs.begin = u32(values_.size());
  for (const OutputSpec& output : spec.outputs)
    addPendingValue(output.name, output.type, nodeIndex);
  node.outputs.end = u32(values_.size());
  node.attrs.begin = u32(attrs_.size());
  attrs_.insert(attrs_.end(), spec.attributes.begin(), spec.attributes.end());
  node.attrs.end = u32(attrs_.size());
  node.params.begin = u32(nodeParams_.size());
  for (const Parameter& param : spec.parameters) {
    nodeParams_.push_back(u32(params_.size()));
    params_.push_back(param);
  }
  node.params.end = u32(nodeParams_.size());
  nodes_.push_back(node);
}

void GraphBuilder::setOutputs(std::vector<std::string> valueNames, std::string outputNodeName) {
  NodeSpec spec;
  spec.kind = NodeKind::Output;
  spec.name = std::move(outputNodeName);
  spec.inputs = std::move(valueNames);
  addNode(spec);
  outputsSet_ = true;
}

bool GraphBuilder::hasUntypedOpOutputs() const {
  for (const PendingValue& value : values_)
    if (value.kind == ValueKind::Unknown && nodes_[value.producer].kind == NodeKind::Op)
      return true;
  return false;
}

// Phase 1: unnamed nodes get "<opType>_<k>", and an op node named like an input, parameter or
// output node gets "<name>_<k>", each skipping names that are already taken. The second because
// ONNX keeps node names apart from value names (a MatMul may be named "w" beside its initializer
// "w", a node "output" beside the graph's outputs), while here the graph's inputs, parameters and
// outputs are nodes too, named by their values: the op node gives way. Two op nodes of one name
// stay an error (resolveOperands).
Status GraphBuilder::nameUnnamedNodes() {
  std::vector<bool> taken(strings_.size(), false), valueNamed(strings_.size(), false);
  for (const PendingNode& node : nodes_) {
    taken[node.name] = true;
    if (node.kind != NodeKind::Op && node.name != 0)
      valueNamed[node.name] = true;
  }
  std::unordered_map<std::uint32_t, std::uint32_t> nextIndexByBase;
  auto rename = [&](PendingNode& node, std::uint32_t baseString, std::string base) {
    std::uint32_t& next = nextIndexByBase[baseString];
    while (true) {
      std::string candidate = base + "_" + std::to_string(next++);
      std::uint32_t existing = strings_.find(candidate);
      if (existing != kNone && existing < taken.size() && taken[existing])
        continue;
      node.name = strings_.intern(candidate);
      if (taken.size() <= node.name)
        taken.resize(node.name + 1, false);
      taken[node.name] = true;
      return;
    }
  };
  for (PendingNode& node : nodes_) {
    if (node.name == 0)
      rename(node, node.opType, strings_.str(node.opType).empty() ? std::string(nodeKindName(node.kind))
                                                                  : std::string(strings_.str(node.opType)));
    else if (node.kind == NodeKind::Op && node.name < valueNamed.size() && valueNamed[node.name])
      rename(node, node.name, std::string(strings_.str(node.name)));
  }
  return {};
}

// Phases 2-3: unique names, then operand name -> pending value index (kNone when omitted).
Expected<std::vector<std::uint32_t>> GraphBuilder::resolveOperands() {
  std::vector<std::uint32_t> nodeByName(strings_.size(), kNone);
  for (std::uint32_t i = 0; i < nodes_.size(); ++i) {
    std::uint32_t& slot = nodeByName[nodes_[i].name];
    if (slot != kNone)
      return Error(ErrorCode::InvalidGraph)
             << "duplicate node name '" << strings_.str(nodes_[i].name) << "'";
    slot = i;
  }
  std::vector<std::uint32_t> valueByName(strings_.size(), kNone);
  for (std::uint32_t v = 0; v < values_.size(); ++v) {
    std::uint32_t& slot = valueByName[values_[v].name];
    if (values_[v].name == 0)
      return Error(ErrorCode::InvalidGraph)
             << "node '" << strings_.str(nodes_[values_[v].producer].name)
             << "' has an output without a name";
    if (slot != kNone)
      return Error(ErrorCode::InvalidGraph)
             << "duplicate value name '" << strings_.str(values_[v].name) << "' (produced by '"
             << strings_.str(nodes_[values_[slot].producer].name) << "' and '"
             << strings_.str(nodes_[values_[v].producer].name) << "')";
    slot = v;
  }
  std::vector<std::uint32_t> operandValues(operandNames_.size(), kNone);
  for (const PendingNode& node : nodes_) {
    for (std::uint32_t i = node.inputs.begin; i < node.inputs.end; ++i) {
      std::uint32_t nameId = operandNames_[i];
      if (nameId == 0) {
        if (node.kind == NodeKind::Output)
          return Error(ErrorCode::InvalidGraph) << "graph output " << (i - node.inputs.begin)
                                                << " has an empty name";
        continue;
      }
      if (valueByName[nameId] == kNone)
        return Error(ErrorCode::InvalidGraph)
               << "node '" << strings_.str(node.name) << "' ("
               << (strings_.str(node.opType).empty() ? nodeKindName(node.kind)
                                                     : strings_.str(node.opType))
               << ") input '" << strings_.str(nameId) << "' names no value";
      operandValues[i] = valueByName[nameId];
    }
  }
  return operandValues;
}

std::string GraphBuilder::describeCycle(const std::vector<std::uint32_t>& stack,
                                        std::uint32_t repeated) const {
  auto start = std::find(stack.begin(), stack.end(), repeated);
  std::string text;
  for (auto it = start; it != stack.end(); ++it)
    text += "'" + std::string(strings_.str(nodes_[*it].name)) + "' -> ";
  return text + "'" + std::string(strings_.str(nodes_[repeated].name)) + "'";
}

// Phase 4: depth-first topological order that keeps an already valid creation order intact.
// Returns the pending node indexes in their new order.
Expected<std::vector<std::uint32_t>>
GraphBuilder::orderTopologically(const std::vector<std::uint32_t>& operandValues) {
  enum : std::uint8_t { kUnseen, kOnStack, kDone };
  std::vector<std::uint8_t> state(nodes_.size(), kUnseen);
  std::vector<std::uint32_t> order;
  order.reserve(nodes_.size());
  std::vector<std::uint32_t> stack, cursor; // node, next operand to look at
  for (std::uint32_t root = 0; root < nodes_.size(); ++root) {
    if (state[root] != kUnseen)
      continue;
    stack.assign(1, root);
    cursor.assign(1, nodes_[root].inputs.begin);
    state[root] = kOnStack;
    while (!stack.empty()) {
      std::uint32_t node = stack.back();
      std::uint32_t& next = cursor.back();
      if (next == nodes_[node].inputs.end) {
        state[node] = kDone;
        order.push_back(node);
        stack.pop_back();
        cursor.pop_back();
        continue;
      }
      std::uint32_t value = operandValues[next++];
      if (value == kNone)
        continue;
      std::uint32_t producer = values_[value].producer;
      if (state[producer] == kDone)
        continue;
      if (state[producer] == kOnStack)
        return Error(ErrorCode::InvalidGraph) << "cycle: " << describeCycle(stack, producer);
      state[producer] = kOnStack;
      stack.push_back(producer);
      cursor.push_back(nodes_[producer].inputs.begin);
    }
  }
  return order;
}

// Every sum of value sizes a pass may form (a partition's memory, a stage's parameters, a
// model's total) is at most the sum over all values: bounding that bounds them all.
Status GraphBuilder::checkTotalBytes() const {
  constexpr std::int64_t kLimit = std::int64_t{1} << 62;
  std::int64_t total = 0;
  for (const PendingValue& value : values_) {
    if (value.bytes <= 0)
      continue;
    if (value.bytes > kLimit - total)
      return Error(ErrorCode::InvalidArgument) << "the model's values add up to more than 2^62 bytes (at value '"
                                               << strings_.str(value.name) << "'); cleave refuses sizes that large";
    total += value.bytes;
  }
  return {};
}

Status GraphBuilder::placeOutputLast(const std::vector<PendingNode>& nodes, std::vector<std::uint32_t>& order) {
  std::size_t outputNodes = std::count_if(nodes.begin(), nodes.end(), [](const PendingNode& n) {
    return n.kind == NodeKind::Output;
  });
  if (outputNodes != 1)
    return Error(ErrorCode::InvalidGraph) << "graph has " << outputNodes << " output nodes";
  // setOutputs() added the Output node; nothing uses it, but a later node could have been added
  // after it, so move it to the end explicitly.
  auto output = std::find_if(order.begin(), order.end(), [&](std::uint32_t i) { return nodes[i].kind == NodeKind::Output; });
  std::rotate(output, output + 1, order.end());
  return {};
}

void GraphBuilder::buildFlatArrays(Graph& graph, const std::vector<std::uint32_t>& order,
                                   const std::vector<std::uint32_t>& operandValues) {
  std::vector<std::uint32_t> newValueId(values_.size(), kNone);
  graph.nodes_.reserve(nodes_.size());
  graph.values_.reserve(values_.size());
  graph.operands_.reserve(operandNames_.size());
  graph.results_.reserve(values_.size());
  graph.dims_.reserve(dims_.size());
  for (std::uint32_t pending : order) {
    const PendingNode& source = nodes_[pending];
    auto nodeId = NodeId{u32(graph.nodes_.size())};
    Graph::Node node = source; // kind and string ids carry over; the ranges are rebuilt below
    node.inputs.begin = u32(graph.operands_.size());
    for (std::uint32_t i = source.inputs.begin; i < source.inputs.end; ++i) {
      std::uint32_t value = operandValues[i];
      graph.operands_.push_back(value == kNone ? kNoValue : ValueId{newValueId[value]});
    }
    node.inputs.end = u32(graph.operands_.size());
    node.outputs.begin = u32(graph.results_.size());
    for (std::uint32_t v = source.outputs.begin; v < source.outputs.end; ++v) {
      const PendingValue& pv = values_[v];
      newValueId[v] = u32(graph.values_.size());
      Graph::Value value{};
      value.name = pv.name;
      value.producer = nodeId;
      value.kind = pv.kind;
      value.dtype = pv.dtype;
      value.rankKnown = pv.rankKnown;
      value.typeName = pv.typeName;
      value.dims.begin = u32(graph.dims_.size());
      graph.dims_.insert(graph.dims_.end(), dims_.begin() + pv.dims.begin, dims_.begin() + pv.dims.end);
      value.dims.end = u32(graph.dims_.size());
      value.bytes = pv.bytes;
      graph.results_.push_back(ValueId{newValueId[v]});
      graph.values_.push_back(value);
    }
    node.outputs.end = u32(graph.results_.size());
    node.attrs.begin = u32(graph.attrs_.size());
    for (std::uint32_t a = source.attrs.begin; a < source.attrs.end; ++a)
      graph.attrs_.push_back(std::move(attrs_[a]));
    node.attrs.end = u32(graph.attrs_.size());
    node.params.begin = u32(graph.nodeParams_.size());
    for (std::uint32_t p = source.params.begin; p < source.params.end; ++p)
      graph.nodeParams_.push_back(ParamId{nodeParams_[p]});
    node.params.end = u32(graph.nodeParams_.size());
    if (node.kind == NodeKind::Input)
      graph.inputNodes_.push_back(nodeId);
    graph.nodes_.push_back(node);
  }
}

// Users: count, then fill (CSR). A node using a value twice is listed once.
void GraphBuilder::indexUsers(Graph& graph) {
  std::vector<std::uint32_t> userCount(graph.values_.size(), 0);
  std::vector<std::uint32_t> lastUser(graph.values_.size(), kNone);
  for (std::uint32_t n = 0; n < graph.nodes_.size(); ++n)
    for (ValueId value : graph.inputs(NodeId{n}))
      if (value != kNoValue && lastUser[index(value)] != n) {
        lastUser[index(value)] = n;
        ++userCount[index(value)];
      }
  std::uint32_t offset = 0;
  for (std::uint32_t v = 0; v < graph.values_.size(); ++v) {
    graph.values_[v].users = IdRange{offset, offset};
    offset += userCount[v];
  }
  graph.users_.resize(offset);
  for (std::uint32_t n = 0; n < graph.nodes_.size(); ++n)
    for (ValueId value : graph.inputs(NodeId{n})) {
      if (value == kNoValue)
        continue;
      IdRange& users = graph.values_[index(value)].users;
      if (users.end > users.begin && graph.users_[users.end - 1] == NodeId{n})
        continue;
      graph.users_[users.end++] = NodeId{n};
    }
}

void GraphBuilder::indexNames(Graph& graph) {
  graph.nodeByName_.assign(graph.strings_.size(), kNone);
  graph.valueByName_.assign(graph.strings_.size(), kNone);
  for (std::uint32_t n = 0; n < graph.nodes_.size(); ++n)
    graph.nodeByName_[graph.nodes_[n].name] = n;
  for (std::uint32_t v = 0; v < graph.values_.size(); ++v)
    graph.valueByName_[graph.values_[v].name] = v;
}

Expected<Graph> GraphBuilder::finish() && {
  if (!outputsSet_)
    return Error(ErrorCode::InvalidGraph) << "graph has no outputs";
  CLEAVE_CHECK(nameUnnamedNodes());
  CLEAVE_TRY(std::vector<std::uint32_t> operandValues, resolveOperands());
  CLEAVE_TRY(std::vector<std::uint32_t> order, orderTopologically(operandValues));
  CLEAVE_CHECK(placeOutputLast(nodes_, order));
  CLEAVE_CHECK(checkTotalBytes());
  Graph graph;
  graph.info_ = std::move(info_);
  buildFlatArrays(graph, order, operandValues);
  graph.params_ = std::move(params_);
  graph.storage_ = resolveStorage(graph.params_);
  indexUsers(graph);
  graph.strings_ = std::move(strings_);
  indexNames(graph);
  graph.inlineData_ = std::make_shared<const std::string>(std::move(inlineData_));
  graph.modelFile_ = std::move(modelFile_);
  return graph;
}

} // namespace cleave::ir
