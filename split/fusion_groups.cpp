#include "split/fusion_groups.h"

#include <algorithm>

namespace cleave::split {
using ir::NodeId;

namespace {

template <typename Visit> void forEachCallableInput(const ir::Graph& graph, NodeId node, Visit&& visit) {
  for (ir::ValueId value : graph.inputs(node))
    if (value != ir::kNoValue && graph.isCallable(graph.producer(value)))
      visit(graph.producer(value));
}

template <typename Visit> void forEachCallableUser(const ir::Graph& graph, NodeId node, Visit&& visit) {
  for (ir::ValueId value : graph.outputs(node))
    for (NodeId user : graph.users(value))
      if (graph.isCallable(user))
        visit(user);
}

class GroupBuilder {
public:
  explicit GroupBuilder(const ir::Graph& graph)
      : graph_(graph), inGroup_(graph.numNodes(), 0), forward_(graph.numNodes(), 0),
        backward_(graph.numNodes(), 0) {}

  std::vector<NodeId> grow(NodeId seed) {
    members_.assign(1, seed);
    inGroup_[seed] = 1;
    std::vector<NodeId> queue{seed};
    while (!queue.empty()) {
      while (!queue.empty()) {
        NodeId member = queue.back();
        queue.pop_back();
        if (!hasTensorMeta(graph_, member))
          forEachCallableUser(graph_, member, [&](NodeId user) { add(user, queue); });
        forEachCallableInput(graph_, member, [&](NodeId input) {
          if (!hasTensorMeta(graph_, input))
            add(input, queue);
        });
      }
      closeConvexly(queue);
    }
    std::vector<NodeId> result = members_;
    for (NodeId member : members_)
      inGroup_[member] = 0;
    std::sort(result.begin(), result.end());
    return result;
  }

private:
  void add(NodeId node, std::vector<NodeId>& queue) {
    if (inGroup_[node])
      return;
    inGroup_[node] = 1;
    members_.push_back(node);
    queue.push_back(node);
  }

  // Adds every node both reachable from a member and reaching a member; they lie within the
  // members' id window because ids are topological.
  void closeConvexly(std::vector<NodeId>& queue) {
    auto [low, high] = std::minmax_element(members_.begin(), members_.end());
    std::uint32_t first = index(*low), last = index(*high);
    for (std::uint32_t n = first; n <= last; ++n) {
      NodeId node{n};
      forward_[node] = inGroup_[node];
      if (!forward_[node] && graph_.isCallable(node))
        forEachCallableInput(graph_, node, [&](NodeId input) {
          if (index(input) >= first && forward_[input])
            forward_[node] = 1;
        });
    }
    for (std::uint32_t n = last + 1; n-- > first;) {
      NodeId node{n};
      backward_[node] = inGroup_[node];
      if (!backward_[node] && graph_.isCallable(node))
        forEachCallableUser(graph_, node, [&](NodeId user) {
          if (index(user) <= last && backward_[user])
            backward_[node] = 1;
        });
    }
    for (std::uint32_t n = first; n <= last; ++n) {
      NodeId node{n};
      if (forward_[node] && backward_[node] && !inGroup_[node])
        add(node, queue);
      forward_[node] = backward_[node] = 0;
    }
  }

  const ir::Graph& graph_;
  std::vector<NodeId> members_;
  IdVector<NodeId, std::uint8_t> inGroup_, forward_, backward_;
};

} // namespace

FusionGroups findFusionGroups(const ir::Graph& graph, AccNodes& acc) {
  FusionGroups result;
  result.groupOf = IdVector<NodeId, std::uint32_t>(graph.numNodes(), kNoGroup);
  GroupBuilder builder(graph);
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId seed{n};
    if (!acc.isAcc[seed] || !graph.isCallable(seed) || hasTensorMeta(graph, seed) ||
        result.groupOf[seed] != kNoGroup)
      continue;
    std::vector<NodeId> members = builder.grow(seed);
    // Merge with every earlier group it touches (groups stay disjoint).
    std::vector<std::uint32_t> touched;
    for (NodeId member : members)
      if (result.groupOf[member] != kNoGroup)
        touched.push_back(result.groupOf[member]);
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    auto id = static_cast<std::uint32_t>(result.groups.size());
    for (std::uint32_t old : touched) {
      members.insert(members.end(), result.groups[old].begin(), result.groups[old].end());
      result.groups[old].clear();
    }
    std::sort(members.begin(), members.end());
    members.erase(std::unique(members.begin(), members.end()), members.end());
    for (NodeId member : members)
      result.groupOf[member] = id;
    result.groups.push_back(std::move(members));
  }
  for (std::vector<NodeId>& group : result.groups) {
    auto cpu = std::find_if(group.begin(), group.end(), [&](NodeId node) { return !acc.isAcc[node]; });
    if (cpu == group.end())
      continue;
    std::string why = "fusion group (non-tensor data flow) with CPU node '" + std::string(graph.name(*cpu)) + "'";
    for (NodeId member : group) {
      result.groupOf[member] = kNoGroup;
      if (acc.isAcc[member]) {
        acc.isAcc[member] = 0;
        acc.reason[member] = plan::Placement::FusionGroup;
        acc.detail[member] = why;
      }
    }
    group.clear();
  }
  return result;
}

} // namespace cleave::split
