#include "plan/plan.h"

#include <algorithm>
#include <unordered_set>

namespace cleave::plan {
using ir::NodeId;
using ir::ValueId;

std::string_view planKindName(PlanKind kind) { return kPlanKinds.name(kind); }

void indexSubmodules(const ir::Graph& graph, CutPlan& plan) {
  plan.submoduleOf = IdVector<NodeId, std::uint32_t>(graph.numNodes(), kNoSubmodule);
  for (std::uint32_t s = 0; s < plan.submodules.size(); ++s)
    for (NodeId node : plan.submodules[s].nodes)
      plan.submoduleOf[node] = s;
}

const PlacementReason* reasonOf(const CutPlan& plan, NodeId node) {
  auto it = std::lower_bound(plan.reasons.begin(), plan.reasons.end(), node,
                             [](const PlacementReason& reason, NodeId id) { return reason.node < id; });
  return it != plan.reasons.end() && it->node == node ? &*it : nullptr;
}

namespace {
Error broken(const CutPlan& plan) {
  return Error(ErrorCode::InvalidGraph) << planKindName(plan.kind) << " plan: ";
}

// Each callable node in exactly one submodule, nothing else in any; submoduleOf agrees.
Status checkMembership(const ir::Graph& graph, const CutPlan& plan) {
  if (plan.submoduleOf.size() != graph.numNodes())
    return broken(plan) << "submoduleOf has " << plan.submoduleOf.size() << " entries for " << graph.numNodes()
                        << " nodes";
  IdVector<NodeId, std::uint32_t> seen(graph.numNodes(), kNoSubmodule);
  for (std::uint32_t s = 0; s < plan.submodules.size(); ++s) {
    for (NodeId node : plan.submodules[s].nodes) {
      if (index(node) >= graph.numNodes())
        return broken(plan) << "submodule '" << plan.submodules[s].name << "' names node #" << index(node)
                            << " of a graph with " << graph.numNodes();
      if (!graph.isCallable(node))
        return broken(plan) << "submodule '" << plan.submodules[s].name << "' holds '" << graph.name(node)
                            << "', which is not an operation";
      if (seen[node] != kNoSubmodule)
        return broken(plan) << "node '" << graph.name(node) << "' is in submodules '"
                            << plan.submodules[seen[node]].name << "' and '" << plan.submodules[s].name << "'";
      seen[node] = s;
    }
  }
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId node{n};
    if (graph.isCallable(node) && seen[node] == kNoSubmodule)
      return broken(plan) << "node '" << graph.name(node) << "' is in no submodule";
    if (plan.submoduleOf[node] != seen[node])
      return broken(plan) << "submoduleOf disagrees with the submodule lists at '" << graph.name(node) << "'";
  }
  return {};
}

// Every operand of a node comes from a graph input, a parameter, an earlier node of the same
// submodule or a node of an earlier submodule: running submodules in order respects every edge.
Status checkOrder(const ir::Graph& graph, const CutPlan& plan) {
  IdVector<NodeId, std::uint32_t> position(graph.numNodes(), 0);
  for (const Submodule& sub : plan.submodules)
    for (std::uint32_t i = 0; i < sub.nodes.size(); ++i)
      position[sub.nodes[i]] = i;
  for (std::uint32_t s = 0; s < plan.submodules.size(); ++s) {
    for (NodeId node : plan.submodules[s].nodes) {
      for (ValueId value : graph.inputs(node)) {
        if (value == ir::kNoValue)
          continue;
        NodeId producer = graph.producer(value);
        std::uint32_t from = plan.submoduleOf[producer];
        if (from == kNoSubmodule)
          continue;
        if (from > s || (from == s && position[producer] >= position[node]))
          return broken(plan) << "'" << graph.name(node) << "' in '" << plan.submodules[s].name << "' reads '"
                              << graph.valueName(value) << "' from '" << graph.name(producer) << "', which runs after it";
      }
    }
  }
  return {};
}

// The parameters a submodule reads (each tensor once) fit its memory limit.
Status checkMemory(const ir::Graph& graph, const CutPlan& plan) {
  for (const Submodule& sub : plan.submodules) {
    if (sub.memoryLimitBytes < 0)
      continue;
    std::unordered_set<std::uint32_t> counted;
    std::int64_t bytes = 0;
    auto count = [&](NodeId owner) {
      for (ir::ParamId param : graph.parameters(owner))
        if (counted.insert(index(graph.storageOf(param))).second)
          bytes += graph.parameter(graph.storageOf(param)).bytes;
    };
    for (NodeId node : sub.nodes) {
      count(node);
      for (ValueId value : graph.inputs(node))
        if (value != ir::kNoValue && graph.kind(graph.producer(value)) == ir::NodeKind::Parameter)
          count(graph.producer(value));
    }
    if (bytes > sub.memoryLimitBytes)
      return broken(plan) << "submodule '" << sub.name << "' reads " << bytes << " bytes of parameters, over its limit of "
                          << sub.memoryLimitBytes;
  }
  return {};
}

Status checkReasons(const ir::Graph& graph, const CutPlan& plan) {
  for (std::size_t i = 0; i < plan.reasons.size(); ++i) {
    NodeId node = plan.reasons[i].node;
    if (index(node) >= graph.numNodes() || !graph.isCallable(node))
      return broken(plan) << "a placement reason names node #" << index(node) << ", not an operation";
    if (i > 0 && !(plan.reasons[i - 1].node < node))
      return broken(plan) << "placement reasons are not sorted and unique at '" << graph.name(node) << "'";
  }
  return {};
}
} // namespace

Status verify(const ir::Graph& graph, const CutPlan& plan) {
  CLEAVE_CHECK(checkMembership(graph, plan));
  CLEAVE_CHECK(checkOrder(graph, plan));
  CLEAVE_CHECK(checkMemory(graph, plan));
  return checkReasons(graph, plan);
}

} // namespace cleave::plan
