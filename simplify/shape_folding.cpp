#include "simplify/shape_folding.h"

#include <algorithm>
#include <deque>

#include "ir/extract.h"

namespace cleave::simplify {
namespace {
using ir::NodeId;
using ir::ValueId;

constexpr std::int32_t kUnknown = -1;

std::int64_t aiOnnxOpset(const ir::Graph& graph) {
  for (const auto& [domain, version] : graph.modelInfo().opsetImports)
    if (domain.empty() || domain == "ai.onnx")
      return version;
  return 0;
}

bool foldable(std::string_view opType) {
  std::span<const std::string_view> ops = foldableOps();
  return std::binary_search(ops.begin(), ops.end(), opType);
}

// The values known to be constants: a slot per value into a pool (dense, so a million-node graph
// pays four bytes a value). Pointers it returns stay valid while it lives.
class KnownValues {
public:
  KnownValues(const ir::Graph& graph, std::int64_t maxElements)
      : graph_(graph), maxElements_(maxElements), slot_(graph.numValues(), kUnknown),
        tried_(graph.numValues(), false) {}

  // The constant `value` holds, reading a small initializer the first time it is asked for.
  const Constant* find(ValueId value) {
    const std::size_t v = index(value);
    if (slot_[v] == kUnknown && !tried_[v]) {
      tried_[v] = true;
      if (std::optional<Constant> loaded = loadParameter(value))
        set(value, std::move(*loaded));
    }
    return slot_[v] == kUnknown ? nullptr : &pool_[static_cast<std::size_t>(slot_[v])];
  }
  void set(ValueId value, Constant constant) {
    slot_[index(value)] = static_cast<std::int32_t>(pool_.size());
    pool_.push_back(std::move(constant));
  }
  Constant take(ValueId value) { return pool_[static_cast<std::size_t>(slot_[index(value)])]; }

private:
  std::optional<Constant> loadParameter(ValueId value) const {
    NodeId producer = graph_.producer(value);
    if (graph_.kind(producer) != ir::NodeKind::Parameter || graph_.parameters(producer).empty())
      return std::nullopt;
    const ir::ParamId param = graph_.parameters(producer)[0];
    const ir::Parameter& p = graph_.parameter(param);
    std::int64_t elements = 1;
    for (std::int64_t d : p.dims)
      elements *= d;
    if (!holdsDType(p.dtype) || elements > maxElements_)
      return std::nullopt;
    Expected<std::string> bytes = graph_.readParameterData(param);
    if (!bytes)
      return std::nullopt;
    return constantFromBytes(p.dtype, p.dims, *bytes);
  }

  const ir::Graph& graph_;
  std::int64_t maxElements_;
  std::vector<std::int32_t> slot_;
  std::vector<bool> tried_;
  std::deque<Constant> pool_; // a deque: find() hands out pointers that later sets must not move
};

// Shape (opset 15's start/end) or Size of `value` when its dims in that range are static.
std::optional<Constant> staticShape(const ir::Graph& graph, NodeId node, bool size) {
  const ValueId value = graph.inputs(node)[0];
  if (!graph.rankKnown(value))
    return std::nullopt;
  std::span<const ir::DimEntry> dims = graph.dims(value);
  const auto rank = static_cast<std::int64_t>(dims.size());
  std::int64_t start = 0, end = rank;
  if (!size) {
    if (const ir::Attribute* a = graph.findAttribute(node, "start"))
      start = a->intValue;
    if (const ir::Attribute* a = graph.findAttribute(node, "end"))
      end = a->intValue;
    start = std::clamp(start < 0 ? start + rank : start, std::int64_t{0}, rank);
    end = std::clamp(end < 0 ? end + rank : end, std::int64_t{0}, rank);
  }
  Constant out;
  out.dtype = ir::DType::I64;
  std::int64_t elements = 1;
  for (std::int64_t k = start; k < end; ++k) {
    const ir::DimEntry& dim = dims[static_cast<std::size_t>(k)];
    if (dim.extent < 0)
      return std::nullopt;
    out.ints.push_back(dim.extent);
    elements *= dim.extent;
  }
  if (size) {
    out.ints.assign(1, elements);
    return out; // a scalar
  }
  out.dims = {static_cast<std::int64_t>(out.ints.size())};
  return out;
}

// Evaluates op node `node` when it folds; its outputs' constants then join `known`.
bool fold(const ir::Graph& graph, NodeId node, std::int64_t opset, KnownValues& known, std::int64_t maxElements) {
  const std::string_view type = graph.opType(node);
  if (type == "Shape" || type == "Size") {
    std::optional<Constant> shape = staticShape(graph, node, type == "Size");
    if (!shape)
      return false;
    known.set(graph.outputs(node)[0], std::move(*shape));
    return true;
  }
  OpToFold op{type, opset, graph.attributes(node), {}, graph.outputs(node).size()};
  for (ValueId input : graph.inputs(node)) {
    if (input == ir::kNoValue) {
      op.inputs.push_back(nullptr);
      continue;
    }
    const Constant* constant = known.find(input);
    if (!constant)
      return false;
    op.inputs.push_back(constant);
  }
  std::optional<std::vector<Constant>> outputs = evaluateOp(op, maxElements);
  if (!outputs)
    return false;
  std::span<const ValueId> values = graph.outputs(node);
  for (std::size_t k = 0; k < values.size(); ++k) // a dtype the graph disagrees with: not ours to fold
    if (graph.dtype(values[k]) != ir::DType::Undefined && graph.dtype(values[k]) != (*outputs)[k].dtype)
      return false;
  for (std::size_t k = 0; k < values.size(); ++k)
    known.set(values[k], std::move((*outputs)[k]));
  return true;
}
} // namespace

FoldPlan planShapeFolding(const ir::Graph& graph, const FoldOptions& options) {
  FoldPlan plan;
  const std::int64_t opset = aiOnnxOpset(graph);
  KnownValues known(graph, options.maxElements);
  std::vector<bool> folded(graph.numNodes(), false);
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    const NodeId node{n};
    const std::string_view domain = graph.opDomain(node);
    if (graph.kind(node) != ir::NodeKind::Op || !(domain.empty() || domain == "ai.onnx") ||
        !foldable(graph.opType(node)))
      continue;
    if (fold(graph, node, opset, known, options.maxElements)) {
      folded[n] = true;
      ++plan.folded;
      ++plan.foldedByOp[std::string(graph.opType(node))];
    }
  }
  // Liveness, backwards from the graph's outputs: a folded value read by a live node or an output
  // becomes an initializer; an op node none of whose outputs is read goes.
  std::vector<bool> live(graph.numValues(), false);
  for (ValueId output : graph.graphOutputs())
    live[index(output)] = true;
  std::vector<NodeId> keptReversed;
  for (std::uint32_t n = graph.numNodes(); n-- > 0;) {
    const NodeId node{n};
    if (!graph.isCallable(node))
      continue;
    bool read = false;
    for (ValueId value : graph.outputs(node))
      read = read || live[index(value)];
    if (!read || folded[n]) {
      ++plan.removed;
      if (read)
        for (ValueId value : graph.outputs(node))
          if (live[index(value)])
            plan.constants.emplace_back(value, known.take(value));
      continue;
    }
    keptReversed.push_back(node);
    for (ValueId value : graph.inputs(node))
      if (value != ir::kNoValue)
        live[index(value)] = true;
  }
  plan.kept.assign(keptReversed.rbegin(), keptReversed.rend());
  std::reverse(plan.constants.begin(), plan.constants.end()); // graph order
  return plan;
}

Expected<ir::Graph> applyFoldPlan(const ir::Graph& graph, const FoldPlan& plan) {
  std::vector<ValueId> inputs;
  for (NodeId node : graph.inputNodes())
    inputs.push_back(graph.outputs(node)[0]);
  std::vector<ValueId> outputs(graph.graphOutputs().begin(), graph.graphOutputs().end());
  std::vector<ir::AddedParameter> added;
  for (const auto& [value, constant] : plan.constants)
    added.push_back({value, constant.dtype, constant.dims, constant.bytes()});
  return ir::extractSubgraph(graph, {std::string(graph.modelInfo().graphName), plan.kept, inputs, outputs, nullptr,
                                     nullptr, added});
}

} // namespace cleave::simplify
