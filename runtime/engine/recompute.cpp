#include "runtime/engine/recompute.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <algorithm>
#include <optional>
#include <string_view>

#include "runtime/engine/torch_compat.h"

namespace cleave::runtime {

namespace {
using ir::NodeId;
using ir::ValueId;

bool isOneOf(std::string_view op, std::initializer_list<std::string_view> ops) {
  return std::find(ops.begin(), ops.end(), op) != ops.end();
}

bool hasSubgraph(const ir::Graph& g, NodeId node) {
  const auto attributes = g.attributes(node);
  return std::any_of(attributes.begin(), attributes.end(),
                     [](const ir::Attribute& a) { return a.kind == ir::AttrKind::Graph; });
}

// Per value: whether it depends on a graph input (an activation), as opposed to parameters and
// constants alone (a weight, or a weight transposed or cast on the way to its product).
IdVector<ValueId, std::uint8_t> activations(const ir::Graph& g) {
  IdVector<ValueId, std::uint8_t> active(g.numValues(), 0);
  for (std::uint32_t n = 0; n < g.numNodes(); ++n) {
    const NodeId node{n};
    bool fromInput = g.kind(node) == ir::NodeKind::Input;
    if (g.kind(node) == ir::NodeKind::Op)
      for (ValueId v : g.inputs(node))
        fromInput = fromInput || (v != ir::kNoValue && active[v]);
    for (ValueId v : g.outputs(node))
      active[v] = fromInput;
  }
  return active;
}

// What a run of recomputed nodes may not contain (it ends there), and what makes a run worth
// recomputing: a product of two activations.
struct NodeRole {
  bool boundary = false, activationProduct = false;
};

NodeRole roleOf(const ir::Graph& g, NodeId node, const IdVector<ValueId, std::uint8_t>& active) {
  NodeRole role;
  if (g.kind(node) != ir::NodeKind::Op || hasSubgraph(g, node) || !g.opDomain(node).empty()) {
    role.boundary = true;
    return role;
  }
  const std::string_view op = g.opType(node);
  bool allActive = true, anyWeight = false;
  for (ValueId v : g.inputs(node)) {
    if (v == ir::kNoValue)
      continue;
    allActive = allActive && active[v];
    anyWeight = anyWeight || !active[v];
  }
  if (isOneOf(op, {"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum"}) && anyWeight)
    role.boundary = true; // a weight product: its output is kept
  role.activationProduct = isOneOf(op, {"MatMul", "Einsum"}) && allActive && g.inputs(node).size() >= 2;
  return role;
}

// The inputs and outputs of the run first..last; `stamp` marks values already listed (one mark
// per segment: no clearing between segments).
void collectEdges(const ir::Graph& g, RecomputeSegment& segment, std::uint32_t mark,
                  IdVector<ValueId, std::uint32_t>& stamp) {
  for (std::uint32_t n = index(segment.first); n <= index(segment.last); ++n) {
    for (ValueId v : g.inputs(NodeId{n}))
      if (v != ir::kNoValue && index(g.producer(v)) < index(segment.first) && stamp[v] != mark) {
        stamp[v] = mark;
        segment.inputs.push_back(v);
      }
    for (ValueId v : g.outputs(NodeId{n})) {
      const auto users = g.users(v);
      if (std::any_of(users.begin(), users.end(), [&](NodeId user) { return index(user) > index(segment.last); }))
        segment.outputs.push_back(v);
    }
  }
}

// What the forward ran under, for the replay to run the same: autocast's state on the device.
struct ReplayConditions {
  at::Device device = at::kCPU;
  std::optional<at::ScalarType> autocast; // the dtype autocast casts products to (none: off)
};

// The segment's operands for one run of it: copies of the values (not their graph) that record
// the graph where the values did, so every kernel takes the path it takes in the plain forward.
std::vector<at::Tensor> segmentLeaves(const std::vector<at::Tensor>& values, const std::vector<bool>& recordsGraph) {
  std::vector<at::Tensor> leaves;
  leaves.reserve(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    leaves.push_back(values[i].defined() ? values[i].detach() : values[i]);
    if (recordsGraph[i])
      leaves.back().requires_grad_(true);
  }
  return leaves;
}

// One run of the segment with autograd on, under `conditions`.
Expected<std::vector<at::Tensor>> runWithGraph(const SegmentReplay& replay, const std::vector<at::Tensor>& leaves,
                                               const ReplayConditions& conditions) {
  at::AutoGradMode withGraph(true);
  std::optional<AutocastScope> precision;
  if (conditions.autocast && !activeAutocast(conditions.device.type()))
    precision.emplace(conditions.device.type(), *conditions.autocast);
  return replay(leaves);
}

// The autograd node standing for one segment: edges to its inputs, one input slot per output.
class SegmentReplayNode final : public torch::autograd::Node {
public:
  SegmentReplayNode(std::vector<at::Tensor> inputs, std::vector<bool> recordsGraph, SegmentReplay replay,
                    ReplayConditions conditions)
      : inputs_(std::move(inputs)), recordsGraph_(std::move(recordsGraph)), replay_(std::move(replay)),
        conditions_(std::move(conditions)) {}

  std::string name() const override { return "cleave::SegmentReplay"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    torch::autograd::variable_list result(num_outputs());
    std::vector<std::size_t> wanted;
    for (std::size_t i = 0; i < inputs_.size(); ++i)
      if (recordsGraph_[i] && task_should_compute_output(i))
        wanted.push_back(i);
    if (wanted.empty() || std::none_of(grads.begin(), grads.end(), [](const at::Tensor& g) { return g.defined(); }))
      return result;
    TORCH_CHECK(replay_, "a recomputed segment's backward ran after its graph was freed");
    const std::vector<at::Tensor> leaves = segmentLeaves(inputs_, recordsGraph_);
    Expected<std::vector<at::Tensor>> outputs = runWithGraph(replay_, leaves, conditions_);
    TORCH_CHECK(outputs, "recomputing a segment failed: ", outputs ? "" : outputs.error().message());
    std::vector<at::Tensor> roots, rootGrads, asked;
    for (std::size_t k = 0; k < outputs->size() && k < grads.size(); ++k)
      if (grads[k].defined() && (*outputs)[k].defined() && (*outputs)[k].requires_grad()) {
        roots.push_back((*outputs)[k]);
        rootGrads.push_back(grads[k]);
      }
    if (roots.empty())
      return result;
    for (std::size_t i : wanted)
      asked.push_back(leaves[i]);
    torch::autograd::variable_list found = torch::autograd::grad(roots, asked, rootGrads, /*retain_graph=*/false,
                                                                 /*create_graph=*/false, /*allow_unused=*/true);
    for (std::size_t j = 0; j < wanted.size(); ++j)
      result[wanted[j]] = found[j];
    return result;
  }

  void release_variables() override {
    inputs_.clear();
    replay_ = nullptr;
  }

private:
  std::vector<at::Tensor> inputs_; // detached: the node holds values, not their graph
  std::vector<bool> recordsGraph_; // per input: whether it recorded the graph in the forward
  SegmentReplay replay_;
  ReplayConditions conditions_;
};

} // namespace

RecomputePlan planSelectiveRecompute(const ir::Graph& g) {
  RecomputePlan plan;
  plan.startsAt = IdVector<NodeId, std::int32_t>(g.numNodes(), -1);
  const IdVector<ValueId, std::uint8_t> active = activations(g);
  IdVector<ValueId, std::uint32_t> stamp(g.numValues(), 0);
  std::uint32_t n = 0;
  while (n < g.numNodes()) {
    if (roleOf(g, NodeId{n}, active).boundary) {
      ++n;
      continue;
    }
    RecomputeSegment segment{NodeId{n}, NodeId{n}, {}, {}};
    bool worthIt = false;
    for (; n < g.numNodes(); ++n) {
      const NodeRole role = roleOf(g, NodeId{n}, active);
      if (role.boundary)
        break;
      worthIt = worthIt || role.activationProduct;
      segment.last = NodeId{n};
    }
    if (!worthIt)
      continue;
    collectEdges(g, segment, static_cast<std::uint32_t>(plan.segments.size()) + 1, stamp);
    plan.startsAt[segment.first] = static_cast<std::int32_t>(plan.segments.size());
    plan.segments.push_back(std::move(segment));
  }
  return plan;
}

Expected<std::vector<at::Tensor>> runRecomputable(const std::vector<at::Tensor>& inputs, SegmentReplay replay,
                                                  at::Device device) {
  std::vector<bool> recordsGraph;
  std::vector<at::Tensor> held;
  for (const at::Tensor& input : inputs) {
    recordsGraph.push_back(input.defined() && input.requires_grad());
    held.push_back(input.defined() ? input.detach() : input);
  }
  ReplayConditions conditions{device, activeAutocast(device.type())};
  CLEAVE_TRY(std::vector<at::Tensor> outputs, runWithGraph(replay, segmentLeaves(held, recordsGraph), conditions));
  auto node = std::make_shared<SegmentReplayNode>(std::move(held), std::move(recordsGraph), std::move(replay),
                                                  std::move(conditions));
  node->set_next_edges(torch::autograd::collect_next_edges(inputs));
  for (at::Tensor& output : outputs) {
    if (!output.defined() || !at::isFloatingType(output.scalar_type())) {
      node->add_input_metadata(torch::autograd::Node::undefined_input());
      continue;
    }
    output = output.detach(); // drops the forward's graph; a tensor of its own for the new node
    torch::autograd::set_history(output, node);
  }
  return outputs;
}

} // namespace cleave::runtime
