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

  // The group grown from `seeds` (all of which are members).
  std::vector<NodeId> grow(const std::vector<NodeId>& seeds) {
    members_ = seeds;
    for (NodeId seed : seeds)
      inGroup_[seed] = 1;
    std::vector<NodeId> queue = seeds;
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

// Strongly connected components of the graph with every group contracted to one vertex
// (iterative Tarjan). Returns, for each component with more than one vertex, its nodes.
std::vector<std::vector<NodeId>> cyclicComponents(const ir::Graph& graph, const FusionGroups& fusion) {
  std::uint32_t count = graph.numNodes();
  // Vertex of a node: its group's first member, or itself.
  auto vertexOf = [&](NodeId node) {
    std::uint32_t group = fusion.groupOf[node];
    return group == kNoGroup ? node : fusion.groups[group].front();
  };
  std::vector<std::vector<NodeId>> successors(count);
  for (std::uint32_t n = 0; n < count; ++n) {
    NodeId node{n};
    if (!graph.isCallable(node))
      continue;
    NodeId from = vertexOf(node);
    forEachCallableUser(graph, node, [&](NodeId user) {
      NodeId to = vertexOf(user);
      if (to != from)
        successors[index(from)].push_back(to);
    });
  }
  std::vector<std::uint32_t> order(count, UINT32_MAX), low(count, 0);
  std::vector<std::uint8_t> onStack(count, 0);
  std::vector<NodeId> stack;
  std::vector<std::pair<NodeId, std::size_t>> work;
  std::vector<std::vector<NodeId>> components;
  std::uint32_t counter = 0;
  for (std::uint32_t root = 0; root < count; ++root) {
    if (order[root] != UINT32_MAX || !graph.isCallable(NodeId{root}) || vertexOf(NodeId{root}) != NodeId{root})
      continue;
    work.push_back({NodeId{root}, 0});
    while (!work.empty()) {
      auto& [vertex, next] = work.back();
      std::uint32_t v = index(vertex);
      if (next == 0 && order[v] == UINT32_MAX) {
        order[v] = low[v] = counter++;
        stack.push_back(vertex);
        onStack[v] = 1;
      }
      if (next < successors[v].size()) {
        NodeId to = successors[v][next++];
        if (order[index(to)] == UINT32_MAX)
          work.push_back({to, 0});
        else if (onStack[index(to)])
          low[v] = std::min(low[v], order[index(to)]);
        continue;
      }
      if (low[v] == order[v]) {
        std::vector<NodeId> component;
        NodeId top;
        do {
          top = stack.back();
          stack.pop_back();
          onStack[index(top)] = 0;
          component.push_back(top);
        } while (top != vertex);
        if (component.size() > 1)
          components.push_back(std::move(component));
      }
      work.pop_back();
      if (!work.empty())
        low[index(work.back().first)] = std::min(low[index(work.back().first)], low[v]);
    }
  }
  return components;
}

} // namespace

namespace {
// Empties group `group`, appending its members to `into`.
void takeGroup(FusionGroups& fusion, std::uint32_t group, std::vector<NodeId>& into) {
  for (NodeId member : fusion.groups[group])
    fusion.groupOf[member] = kNoGroup;
  into.insert(into.end(), fusion.groups[group].begin(), fusion.groups[group].end());
  fusion.groups[group].clear();
}

void sortUnique(std::vector<NodeId>& nodes) {
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
}

void addGroup(FusionGroups& fusion, std::vector<NodeId> members) {
  auto id = static_cast<std::uint32_t>(fusion.groups.size());
  for (NodeId member : members)
    fusion.groupOf[member] = id;
  fusion.groups.push_back(std::move(members));
}

// Phase 1: one convex group per acc node without tensor meta that no group holds yet. A group
// that touches earlier ones takes them in and grows again: a union of convex groups need not be
// convex, and a node between two merged groups would depend on itself.
void growGroups(const ir::Graph& graph, const AccNodes& acc, GroupBuilder& builder, FusionGroups& fusion) {
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId seed{n};
    if (!acc.isAcc[seed] || !graph.isCallable(seed) || hasTensorMeta(graph, seed) ||
        fusion.groupOf[seed] != kNoGroup)
      continue;
    std::vector<NodeId> members = builder.grow({seed});
    while (true) {
      std::vector<std::uint32_t> touched;
      for (NodeId member : members)
        if (fusion.groupOf[member] != kNoGroup)
          touched.push_back(fusion.groupOf[member]);
      std::sort(touched.begin(), touched.end());
      touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
      if (touched.empty())
        break;
      for (std::uint32_t old : touched)
        takeGroup(fusion, old, members);
      sortUnique(members);
      members = builder.grow(members);
    }
    addGroup(fusion, std::move(members));
  }
}

// Phase 2: contracting two groups can close a cycle (A reaches B and B reaches A through other
// nodes) even when each is convex: merge every cyclic component into one group and re-close it,
// until the contracted graph is acyclic. Each round removes groups, so this ends.
void mergeCyclicGroups(const ir::Graph& graph, GroupBuilder& builder, FusionGroups& fusion) {
  auto anyGroup = [&] {
    return std::any_of(fusion.groups.begin(), fusion.groups.end(), [](const auto& g) { return !g.empty(); });
  };
  while (anyGroup()) {
    std::vector<std::vector<NodeId>> cycles = cyclicComponents(graph, fusion);
    if (cycles.empty())
      break;
    for (const std::vector<NodeId>& cycle : cycles) {
      std::vector<NodeId> members;
      for (NodeId vertex : cycle) {
        if (fusion.groupOf[vertex] == kNoGroup)
          members.push_back(vertex);
        else
          takeGroup(fusion, fusion.groupOf[vertex], members);
      }
      std::sort(members.begin(), members.end());
      members = builder.grow(members);
      std::vector<NodeId> absorbed; // re-closing reached other groups: take them in whole
      for (NodeId member : members)
        if (fusion.groupOf[member] != kNoGroup)
          takeGroup(fusion, fusion.groupOf[member], absorbed);
      members.insert(members.end(), absorbed.begin(), absorbed.end());
      sortUnique(members);
      addGroup(fusion, std::move(members));
    }
  }
}
} // namespace

FusionGroups findFusionGroups(const ir::Graph& graph, AccNodes& acc) {
  FusionGroups result;
  result.groupOf = IdVector<NodeId, std::uint32_t>(graph.numNodes(), kNoGroup);
  GroupBuilder builder(graph);
  growGroups(graph, acc, builder, result);
  mergeCyclicGroups(graph, builder, result);
  dissolveGroupsWithCpuMembers(graph, result, acc);
  return result;
}

void dissolveGroupsWithCpuMembers(const ir::Graph& graph, FusionGroups& fusion, AccNodes& acc) {
  for (std::vector<NodeId>& group : fusion.groups) {
    auto cpu = std::find_if(group.begin(), group.end(), [&](NodeId node) { return !acc.isAcc[node]; });
    if (cpu == group.end())
      continue;
    std::string why = "fusion group (non-tensor data flow) with CPU node '" + std::string(graph.name(*cpu)) + "'";
    for (NodeId member : group) {
      fusion.groupOf[member] = kNoGroup;
      if (acc.isAcc[member]) {
        acc.isAcc[member] = 0;
        acc.reason[member] = SplitReason::FusionGroup;
        acc.detail[member] = why;
      }
    }
    group.clear();
  }
}

} // namespace cleave::split
