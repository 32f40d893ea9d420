#include "runtime/training/split_backward.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "base/strings.h"

namespace cleave::runtime {

namespace {
using torch::autograd::Edge;
using torch::autograd::Node;

// Records the gradients a node receives the first time it runs (in I), passing them on unchanged.
struct RecordGradients final : torch::autograd::FunctionPreHook {
  explicit RecordGradients(std::shared_ptr<std::vector<at::Tensor>> into) : into(std::move(into)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    if (into->empty())
      *into = grads;
    return grads;
  }
  std::shared_ptr<std::vector<at::Tensor>> into;
};

// An I node with edges into the weight side: W enters the graph here.
struct Frontier {
  std::shared_ptr<Node> node;
  std::vector<std::size_t> inputSideEdges; // removed before W
  std::shared_ptr<std::vector<at::Tensor>> received;
  const torch::autograd::FunctionPreHook* hook = nullptr;
};

// Which nodes reachable from `starts` can reach one of `targets` (a node reaches itself), and the
// frontier nodes (reaching, with an edge to a non-reaching node) in post-order, which follows the
// graph and the order of `starts` only. Iterative: autograd graphs can be deep.
struct GraphSplit {
  std::unordered_map<const Node*, bool> reaches;
  std::vector<Frontier> frontier;
};

GraphSplit splitGraph(const std::vector<std::shared_ptr<Node>>& starts, const std::unordered_set<const Node*>& targets) {
  GraphSplit split;
  struct Visit {
    Node* node;
    std::size_t next;
  };
  std::vector<Visit> stack;
  for (const std::shared_ptr<Node>& start : starts) {
    if (!start || split.reaches.count(start.get()))
      continue;
    split.reaches[start.get()] = false;
    stack.push_back({start.get(), 0});
    while (!stack.empty()) {
      Visit& top = stack.back();
      const auto& edges = top.node->next_edges();
      if (top.next < edges.size()) {
        Node* child = edges[top.next++].function.get();
        if (child && split.reaches.emplace(child, false).second)
          stack.push_back({child, 0});
        continue;
      }
      Node* node = top.node;
      stack.pop_back();
      bool reaches = targets.count(node) > 0;
      std::vector<std::size_t> inputSide;
      bool feedsWeightSide = false;
      for (std::size_t e = 0; e < edges.size(); ++e) {
        if (!edges[e].is_valid())
          continue;
        if (split.reaches.at(edges[e].function.get()))
          inputSide.push_back(e);
        else
          feedsWeightSide = true;
      }
      reaches = reaches || !inputSide.empty();
      split.reaches[node] = reaches;
      if (reaches && feedsWeightSide)
        split.frontier.push_back({node->shared_from_this(), std::move(inputSide), nullptr, nullptr});
    }
  }
  return split;
}

} // namespace

struct PendingWeightBackward::State {
  std::vector<Frontier> frontier;
  // Roots whose graph lies wholly on the weight side, with their gradients.
  std::vector<Edge> roots;
  std::vector<at::Tensor> grads;
};

PendingWeightBackward::PendingWeightBackward() = default;
PendingWeightBackward::PendingWeightBackward(PendingWeightBackward&&) noexcept = default;
PendingWeightBackward& PendingWeightBackward::operator=(PendingWeightBackward&&) noexcept = default;
PendingWeightBackward::~PendingWeightBackward() = default;
bool PendingWeightBackward::empty() const { return !state_; }

Expected<std::vector<at::Tensor>> backwardInputs(const std::vector<at::Tensor>& roots,
                                                 const std::vector<at::Tensor>& grads,
                                                 const std::vector<at::Tensor>& leaves, PendingWeightBackward& pending) {
  if (!pending.empty())
    return Error(ErrorCode::InvalidArgument) << "the previous input backward's weight part has not run";
  auto state = std::make_unique<PendingWeightBackward::State>();
  std::vector<Edge> rootEdges, leafEdges;
  std::vector<std::shared_ptr<Node>> starts;
  for (const at::Tensor& root : roots) {
    rootEdges.push_back(torch::autograd::impl::gradient_edge(root));
    starts.push_back(rootEdges.back().function);
  }
  std::unordered_set<const Node*> targets;
  std::vector<std::size_t> leafSlots; // leaves that can get a gradient, by position
  for (std::size_t l = 0; l < leaves.size(); ++l)
    if (leaves[l].requires_grad()) {
      leafEdges.push_back(torch::autograd::impl::gradient_edge(leaves[l]));
      targets.insert(leafEdges.back().function.get());
      leafSlots.push_back(l);
    }
  GraphSplit split = splitGraph(starts, targets);
  std::vector<Edge> inputRoots;
  std::vector<at::Tensor> inputGrads;
  for (std::size_t r = 0; r < rootEdges.size(); ++r) {
    if (!rootEdges[r].function)
      continue;
    bool inputSide = split.reaches.at(rootEdges[r].function.get());
    (inputSide ? inputRoots : state->roots).push_back(rootEdges[r]);
    (inputSide ? inputGrads : state->grads).push_back(grads[r]);
  }
  for (Frontier& f : split.frontier) {
    f.received = std::make_shared<std::vector<at::Tensor>>();
    auto hook = std::make_unique<RecordGradients>(f.received);
    f.hook = hook.get();
    f.node->add_pre_hook(std::move(hook));
  }
  state->frontier = std::move(split.frontier);
  std::vector<at::Tensor> leafGrads(leaves.size());
  if (!inputRoots.empty() && !leafEdges.empty()) {
    try {
      torch::autograd::variable_list found = torch::autograd::Engine::get_default_engine().execute(
          inputRoots, inputGrads, /*keep_graph=*/true, /*create_graph=*/false, /*accumulate_grad=*/false, leafEdges);
      for (std::size_t k = 0; k < leafSlots.size(); ++k)
        leafGrads[leafSlots[k]] = found[k];
    } catch (const c10::Error& e) {
      return Error(ErrorCode::Unsupported) << "input backward failed: " << firstLine(e.what_without_backtrace());
    }
  }
  pending.state_ = std::move(state);
  return leafGrads;
}

Status backwardWeights(PendingWeightBackward& pending) {
  if (pending.empty())
    return {};
  std::unique_ptr<PendingWeightBackward::State> state = std::move(pending.state_);
  std::vector<Edge> roots = std::move(state->roots);
  std::vector<at::Tensor> grads = std::move(state->grads);
  for (Frontier& f : state->frontier) {
    auto& hooks = f.node->pre_hooks();
    hooks.erase(std::remove_if(hooks.begin(), hooks.end(), [&](const auto& h) { return h.get() == f.hook; }), hooks.end());
    for (std::size_t e : f.inputSideEdges)
      // I has done that side: W computes only the weight side. (Not set_next_edge: an invalid
      // edge needs no topological number, which may not change once a node has a parent.)
      f.node->next_edges()[e] = Edge();
    for (std::size_t k = 0; k < f.received->size(); ++k)
      if ((*f.received)[k].defined()) {
        roots.emplace_back(f.node, static_cast<std::uint32_t>(k));
        grads.push_back((*f.received)[k]);
      }
  }
  if (roots.empty())
    return {};
  try {
    torch::autograd::Engine::get_default_engine().execute(roots, grads, /*keep_graph=*/false, /*create_graph=*/false,
                                                          /*accumulate_grad=*/true);
  } catch (const c10::Error& e) {
    return Error(ErrorCode::Unsupported) << "weight backward failed: " << firstLine(e.what_without_backtrace());
  }
  return {};
}

} // namespace cleave::runtime
