#include "split/shape_prologue.h"

#include <algorithm>
#include <array>
#include <string_view>
#include <utility>

namespace cleave::split {
namespace {
using ir::NodeId;
using ir::ValueId;

// Ops whose inputs from this index on are shape operands (sizes, axes, bounds), never data.
constexpr std::array<std::pair<std::string_view, std::size_t>, 22> kShapeOperandsFrom = {{
    {"ConstantOfShape", 0}, {"CumSum", 1},     {"Expand", 1},      {"Gather", 1},      {"OneHot", 1},
    {"Pad", 1},             {"Range", 0},      {"ReduceL1", 1},    {"ReduceL2", 1},    {"ReduceLogSumExp", 1},
    {"ReduceMax", 1},       {"ReduceMean", 1}, {"ReduceMin", 1},   {"ReduceProd", 1},  {"ReduceSum", 1},
    {"Reshape", 1},         {"Resize", 1},     {"Slice", 1},       {"Split", 1},       {"Squeeze", 1},
    {"Tile", 1},            {"TopK", 1},
}};

bool defaultDomain(const ir::Graph& graph, NodeId node) {
  const std::string_view domain = graph.opDomain(node);
  return domain.empty() || domain == "ai.onnx";
}

// Whether `reader` reads `value` only at shape-operand positions (Unsqueeze's axes count too).
bool readsAsShape(const ir::Graph& graph, NodeId reader, ValueId value) {
  if (graph.kind(reader) != ir::NodeKind::Op || !defaultDomain(graph, reader))
    return false;
  const std::string_view type = graph.opType(reader);
  std::size_t from = SIZE_MAX;
  if (type == "Unsqueeze")
    from = 1;
  for (const auto& [op, index] : kShapeOperandsFrom)
    if (op == type)
      from = index;
  std::span<const ValueId> inputs = graph.inputs(reader);
  for (std::size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k] == value && k < from)
      return false;
  return from != SIZE_MAX;
}

bool smallIntegral(const ir::Graph& graph, ValueId value) {
  if (graph.valueKind(value) != ir::ValueKind::Tensor || !graph.rankKnown(value) || graph.dims(value).size() > 1)
    return false;
  switch (graph.dtype(value)) {
  case ir::DType::I64:
  case ir::DType::I32:
  case ir::DType::Bool: return true;
  default: return false;
  }
}

bool refusedForWhatItIs(const support::Decision& decision) {
  switch (decision.reason) {
  case support::Reason::UnsupportedOp:
  case support::Reason::UnsupportedDtype:
  case support::Reason::UnsupportedRank:
  case support::Reason::UnsupportedShape:
  case support::Reason::UnsupportedAttribute: return !decision.supported;
  default: return false;
  }
}

// Forward: the nodes whose own kind, outputs and inputs qualify (readers not yet looked at).
std::vector<bool> qualifyingNodes(const ir::Graph& graph, const IdVector<NodeId, support::Decision>& decisions) {
  std::vector<bool> in(graph.numNodes(), false);
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    const NodeId node{n};
    if (graph.kind(node) != ir::NodeKind::Op || !defaultDomain(graph, node) || !refusedForWhatItIs(decisions[node]) ||
        graph.numImplicitInputs(node) > 0 || graph.outputs(node).empty())
      continue;
    bool ok = std::all_of(graph.outputs(node).begin(), graph.outputs(node).end(),
                          [&](ValueId value) { return smallIntegral(graph, value); });
    const bool readsDims = graph.opType(node) == "Shape" || graph.opType(node) == "Size";
    for (ValueId input : graph.inputs(node)) {
      if (!ok || input == ir::kNoValue || readsDims)
        continue;
      const NodeId producer = graph.producer(input);
      ok = graph.kind(producer) == ir::NodeKind::Parameter || in[index(producer)];
    }
    in[n] = ok;
  }
  return in;
}
} // namespace

ShapePrologue findShapePrologue(const ir::Graph& graph, const IdVector<NodeId, support::Decision>& decisions) {
  std::vector<bool> in = qualifyingNodes(graph, decisions);
  // Backward: a node stays only when every reader is in the prologue (decided already: readers
  // come later in graph order) or an acc node reading it as a shape operand.
  for (std::uint32_t n = graph.numNodes(); n-- > 0;) {
    if (!in[n])
      continue;
    const NodeId node{n};
    for (ValueId value : graph.outputs(node))
      for (NodeId reader : graph.users(value)) {
        const bool prologue = graph.kind(reader) == ir::NodeKind::Op && in[index(reader)];
        // An acc reader that takes it as a shape operand, or that is itself shape arithmetic the
        // profile takes (an int64 Concat or Unsqueeze on the accelerator).
        const bool accShape =
            decisions[reader].supported &&
            (readsAsShape(graph, reader, value) ||
             (graph.kind(reader) == ir::NodeKind::Op && !graph.outputs(reader).empty() &&
              std::all_of(graph.outputs(reader).begin(), graph.outputs(reader).end(),
                          [&](ValueId out) { return smallIntegral(graph, out); })));
        if (!prologue && !accShape)
          in[n] = false;
      }
  }
  ShapePrologue prologue;
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n)
    if (in[n]) {
      prologue.nodes.push_back(NodeId{n});
      ++prologue.byOp[std::string(graph.opType(NodeId{n}))];
    }
  return prologue;
}

void takeShapePrologue(const ShapePrologue& prologue, IdVector<NodeId, support::Decision>& decisions) {
  for (NodeId node : prologue.nodes)
    decisions[node] = support::Decision{true, support::Reason::Supported, "shape prologue"};
}

SplitDecisions decideForSplit(const ir::Graph& graph, const support::Profile& profile, bool shapePrologue) {
  SplitDecisions split{support::decideAll(graph, profile), {}};
  if (shapePrologue && graph.modelInfo().format == ir::SourceFormat::Onnx) {
    split.prologue = findShapePrologue(graph, split.decisions);
    takeShapePrologue(split.prologue, split.decisions);
  }
  return split;
}

} // namespace cleave::split
