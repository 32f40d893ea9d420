#include "split/splitter.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <optional>
#include <queue>

#include "split/fusion_groups.h"

namespace cleave::split {
using ir::NodeId;

namespace {
// Per node, the reason the split gives while it works (dense, by node id); the plan gets the
// CPU ones as a sorted list at the end.
struct SplitNotes {
  IdVector<NodeId, SplitReason> reason;
  IdVector<NodeId, std::string> detail;
  std::vector<std::string> remarks;
};

std::vector<plan::PlacementReason> cpuReasons(const ir::Graph& graph, SplitNotes& notes) {
  std::vector<plan::PlacementReason> reasons;
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId node{n};
    if (graph.isCallable(node) && notes.reason[node] != SplitReason::Accelerator)
      reasons.push_back({node, static_cast<std::uint8_t>(notes.reason[node]), std::move(notes.detail[node])});
  }
  return reasons;
}

struct Phase {
  bool isAcc;
  std::vector<NodeId> nodes;
};

// Dependencies between callable nodes (CSR), with the fusion-group additions.
struct Dependencies {
  std::vector<std::vector<NodeId>> dependents; // reverse edges: who waits for this node
  IdVector<NodeId, std::uint32_t> remaining;   // unplaced dependencies per node
};

Dependencies buildDependencies(const ir::Graph& graph, const FusionGroups& fusion) {
  std::uint32_t count = graph.numNodes();
  std::vector<std::vector<NodeId>> deps(count);
  for (std::uint32_t n = 0; n < count; ++n) {
    NodeId node{n};
    if (!graph.isCallable(node))
      continue;
    for (ir::ValueId value : graph.inputs(node))
      if (value != ir::kNoValue && graph.isCallable(graph.producer(value)))
        deps[n].push_back(graph.producer(value));
  }
  for (const std::vector<NodeId>& group : fusion.groups) {
    if (group.empty())
      continue;
    auto inGroup = [&](NodeId node) { return std::binary_search(group.begin(), group.end(), node); };
    std::vector<NodeId> outside;
    for (NodeId member : group)
      for (NodeId dep : deps[index(member)])
        if (!inGroup(dep))
          outside.push_back(dep);
    std::vector<NodeId> users;
    for (NodeId member : group)
      for (ir::ValueId value : graph.outputs(member))
        for (NodeId user : graph.users(value))
          if (graph.isCallable(user) && !inGroup(user))
            users.push_back(user);
    for (NodeId member : group)
      deps[index(member)].insert(deps[index(member)].end(), outside.begin(), outside.end());
    for (NodeId user : users)
      deps[index(user)].insert(deps[index(user)].end(), group.begin(), group.end());
  }
  Dependencies result;
  result.dependents.resize(count);
  result.remaining = IdVector<NodeId, std::uint32_t>(count, 0);
  for (std::uint32_t n = 0; n < count; ++n) {
    std::vector<NodeId>& list = deps[n];
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    result.remaining[NodeId{n}] = static_cast<std::uint32_t>(list.size());
    for (NodeId dep : list)
      result.dependents[index(dep)].push_back(NodeId{n});
  }
  return result;
}

using ReadyQueue = std::priority_queue<NodeId, std::vector<NodeId>, std::greater<NodeId>>;

Expected<std::vector<Phase>> sweep(const ir::Graph& graph, const AccNodes& acc, Dependencies deps) {
  ReadyQueue ready[2]; // [0] cpu, [1] acc
  std::uint32_t callable = 0;
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId node{n};
    if (!graph.isCallable(node))
      continue;
    ++callable;
    if (deps.remaining[node] == 0)
      ready[acc.isAcc[node]].push(node);
  }
  std::vector<Phase> phases;
  bool accMode = ready[0].empty(); // the reference starts on the CPU when a CPU node is ready
  std::vector<NodeId> current;
  std::uint32_t placed = 0, emptyFlips = 0;
  while (placed < callable) {
    ReadyQueue& queue = ready[accMode ? 1 : 0];
    if (queue.empty()) {
      if (current.empty()) {
        if (++emptyFlips > 1) // neither kind can move: only inconsistent dependencies do this
          return Error(ErrorCode::InvalidGraph) << "splitter cannot place the remaining "
                                                << callable - placed << " nodes (dependency cycle)";
      } else {
        phases.push_back({accMode, std::move(current)});
        current.clear();
        emptyFlips = 0;
      }
      accMode = !accMode;
      continue;
    }
    NodeId node = queue.top();
    queue.pop();
    current.push_back(node);
    ++placed;
    for (NodeId dependent : deps.dependents[index(node)])
      if (--deps.remaining[dependent] == 0)
        ready[acc.isAcc[dependent]].push(dependent);
  }
  if (!current.empty())
    phases.push_back({accMode, std::move(current)});
  return phases;
}

SubgraphCounts countKinds(const std::vector<Phase>& phases) {
  SubgraphCounts counts;
  for (const Phase& phase : phases)
    ++(phase.isAcc ? counts.acc : counts.cpu);
  return counts;
}

void demote(const ir::Graph& graph, Phase& phase, SplitReason why, const std::string& detail,
            SplitNotes& notes) {
  for (NodeId node : phase.nodes) {
    notes.reason[node] = why;
    notes.detail[node] = detail;
  }
  phase.isAcc = false;
}

// The reference's remove_small_acc_subgraphs, with reasons recorded.
std::vector<Phase> removeSmallAccSubgraphs(const ir::Graph& graph, std::vector<Phase> phases,
                                           std::int64_t minAccSize, SplitNotes& notes) {
  std::vector<Phase> result;
  for (Phase& phase : phases) {
    if (phase.isAcc && static_cast<std::int64_t>(phase.nodes.size()) < minAccSize) {
      demote(graph, phase, SplitReason::BelowMinSize,
             "acc subgraph of " + std::to_string(phase.nodes.size()) + " nodes is below --min-acc-size " +
                 std::to_string(minAccSize),
             notes);
      if (!result.empty()) {
        result.back().nodes.insert(result.back().nodes.end(), phase.nodes.begin(), phase.nodes.end());
        continue;
      }
    } else if (!phase.isAcc && !result.empty() && !result.back().isAcc) {
      result.back().nodes.insert(result.back().nodes.end(), phase.nodes.begin(), phase.nodes.end());
      continue;
    }
    result.push_back(std::move(phase));
  }
  return result;
}

// Bytes of the values that cross each phase's boundary (read from, or read by, another phase).
std::vector<std::int64_t> boundaryBytes(const ir::Graph& graph, const std::vector<Phase>& phases) {
  IdVector<NodeId, std::uint32_t> phaseOf(graph.numNodes(), UINT32_MAX);
  for (std::uint32_t p = 0; p < phases.size(); ++p)
    for (NodeId node : phases[p].nodes)
      phaseOf[node] = p;
  std::vector<std::int64_t> bytes(phases.size(), 0);
  for (std::uint32_t v = 0; v < graph.numValues(); ++v) {
    ir::ValueId value{v};
    std::uint32_t producer = phaseOf[graph.producer(value)];
    if (graph.kind(graph.producer(value)) == ir::NodeKind::Parameter)
      continue; // weights travel with their submodule
    std::int64_t size = std::max<std::int64_t>(graph.bytes(value), 0);
    std::vector<std::uint32_t> readers;
    for (NodeId user : graph.users(value))
      if (phaseOf[user] != producer)
        readers.push_back(phaseOf[user]);
    std::sort(readers.begin(), readers.end());
    readers.erase(std::unique(readers.begin(), readers.end()), readers.end());
    if (readers.empty())
      continue;
    if (producer != UINT32_MAX)
      bytes[producer] += size;
    for (std::uint32_t reader : readers)
      if (reader != UINT32_MAX)
        bytes[reader] += size;
  }
  return bytes;
}

// Merges the least valuable acc phases into the CPU until at most maxSplits phases remain.
std::vector<Phase> enforceMaxSplits(const ir::Graph& graph, std::vector<Phase> phases,
                                    std::int64_t maxSplits, SplitNotes& notes) {
  if (maxSplits <= 0 || static_cast<std::int64_t>(phases.size()) <= maxSplits)
    return phases;
  std::vector<std::int64_t> bytes = boundaryBytes(graph, phases);
  std::vector<std::uint32_t> candidates;
  for (std::uint32_t p = 0; p < phases.size(); ++p)
    if (phases[p].isAcc)
      candidates.push_back(p);
  // Least work per byte first: nodes_a / bytes_a < nodes_b / bytes_b, compared exactly.
  std::stable_sort(candidates.begin(), candidates.end(), [&](std::uint32_t a, std::uint32_t b) {
    __int128 left = static_cast<__int128>(phases[a].nodes.size()) * (bytes[b] + 1);
    __int128 right = static_cast<__int128>(phases[b].nodes.size()) * (bytes[a] + 1);
    return left < right;
  });
  std::size_t total = phases.size();
  std::vector<std::uint8_t> isCpu(phases.size());
  for (std::uint32_t p = 0; p < phases.size(); ++p)
    isCpu[p] = !phases[p].isAcc;
  for (std::uint32_t p : candidates) {
    if (static_cast<std::int64_t>(total) <= maxSplits)
      break;
    // Merging removes this phase plus each CPU neighbour it joins.
    std::size_t joined = 0;
    if (p > 0 && isCpu[p - 1]) ++joined;
    if (p + 1 < phases.size() && isCpu[p + 1]) ++joined;
    total -= joined == 0 ? 0 : joined;
    isCpu[p] = 1;
    demote(graph, phases[p], SplitReason::MaxSplitsMerge,
           "acc subgraph merged back to the CPU to keep at most " + std::to_string(maxSplits) +
               " submodules (" + std::to_string(phases[p].nodes.size()) + " nodes, " +
               std::to_string(bytes[p]) + " boundary bytes)",
           notes);
  }
  std::vector<Phase> merged;
  for (Phase& phase : phases) {
    if (!phase.isAcc && !merged.empty() && !merged.back().isAcc) {
      merged.back().nodes.insert(merged.back().nodes.end(), phase.nodes.begin(), phase.nodes.end());
      continue;
    }
    merged.push_back(std::move(phase));
  }
  return merged;
}

// Demotes acc nodes that, after merges, exchange a non-tensor value with a CPU submodule.
// Returns whether any node changed.
bool demoteNonTensorCrossings(const ir::Graph& graph, const std::vector<Phase>& phases, AccNodes& acc) {
  IdVector<NodeId, std::uint8_t> onAcc(graph.numNodes(), 0);
  for (const Phase& phase : phases)
    if (phase.isAcc)
      for (NodeId node : phase.nodes)
        onAcc[node] = 1;
  bool changed = false;
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId producer{n};
    if (!graph.isCallable(producer) || producesTensor(graph, producer))
      continue;
    for (ir::ValueId value : graph.outputs(producer))
      for (NodeId user : graph.users(value)) {
        if (!graph.isCallable(user) || onAcc[user] == onAcc[producer])
          continue;
        NodeId accSide = onAcc[producer] ? producer : user;
        if (!acc.isAcc[accSide])
          continue;
        acc.isAcc[accSide] = 0;
        acc.reason[accSide] = SplitReason::NonTensorBoundary;
        acc.detail[accSide] = "exchanges non-tensor value '" + std::string(graph.valueName(value)) +
                              "' with a CPU node after small subgraphs were merged";
        changed = true;
      }
  }
  return changed;
}

// torch's extend_acc_subgraph for phase `target` (an acc phase). Complexity: O(V + E) to build
// the reverse dependencies, plus O(moved nodes x their edges).
// extendAccPhase's reverse dependencies: per node, the callable users in phases before `target`
// that must move first, with each fusion group's members sharing their users outside the group.
std::vector<std::vector<NodeId>> usersInEarlierPhases(const ir::Graph& graph, const FusionGroups& fusion,
                                                      const IdVector<NodeId, std::uint32_t>& phaseOf,
                                                      std::uint32_t target) {
  std::uint32_t count = graph.numNodes();
  std::vector<std::vector<NodeId>> waitsFor(count);
  for (std::uint32_t n = 0; n < count; ++n) {
    NodeId node{n};
    if (!graph.isCallable(node))
      continue;
    for (ir::ValueId value : graph.outputs(node))
      for (NodeId user : graph.users(value))
        if (graph.isCallable(user) && phaseOf[user] < target)
          waitsFor[n].push_back(user);
  }
  for (const std::vector<NodeId>& group : fusion.groups) {
    if (group.empty())
      continue;
    auto inGroup = [&](NodeId node) { return std::binary_search(group.begin(), group.end(), node); };
    std::vector<NodeId> merged;
    for (NodeId member : group)
      for (NodeId user : waitsFor[index(member)])
        if (!inGroup(user))
          merged.push_back(user);
    for (NodeId member : group) {
      waitsFor[index(member)] = merged;
      for (ir::ValueId value : graph.inputs(member))
        if (value != ir::kNoValue && graph.isCallable(graph.producer(value)) && !inGroup(graph.producer(value)))
          waitsFor[index(graph.producer(value))].insert(waitsFor[index(graph.producer(value))].end(),
                                                        group.begin(), group.end());
    }
  }
  return waitsFor;
}

// Moves the `moved` nodes among `candidates` into phase `target`, keeping each phase sorted.
void takeIntoPhase(std::vector<Phase>& phases, IdVector<NodeId, std::uint32_t>& phaseOf, std::uint32_t target,
                   const std::vector<NodeId>& candidates, const IdVector<NodeId, std::uint8_t>& moved,
                   SplitNotes& notes) {
  for (Phase& phase : phases)
    phase.nodes.erase(std::remove_if(phase.nodes.begin(), phase.nodes.end(), [&](NodeId n) { return moved[n] != 0; }),
                      phase.nodes.end());
  for (NodeId node : candidates)
    if (moved[node]) {
      phases[target].nodes.push_back(node);
      phaseOf[node] = target;
      notes.reason[node] = SplitReason::Accelerator;
      notes.detail[node].clear();
    }
  std::sort(phases[target].nodes.begin(), phases[target].nodes.end());
}

void extendAccPhase(const ir::Graph& graph, const AccNodes& acc, const FusionGroups& fusion,
                    std::vector<Phase>& phases, IdVector<NodeId, std::uint32_t>& phaseOf,
                    std::uint32_t target, bool allowNonTensor, SplitNotes& notes) {
  std::uint32_t count = graph.numNodes();
  std::vector<std::vector<NodeId>> waitsFor = usersInEarlierPhases(graph, fusion, phaseOf, target);
  // Candidates: callable inputs of the phase from other phases; take those ready, to a fixpoint
  // (the taken set is the closure, whatever the order: readiness only grows).
  IdVector<NodeId, std::uint8_t> moved(count, 0), candidate(count, 0);
  std::vector<NodeId> candidates;
  auto addInputsOf = [&](NodeId node) {
    for (ir::ValueId value : graph.inputs(node)) {
      if (value == ir::kNoValue)
        continue;
      NodeId producer = graph.producer(value);
      if (graph.isCallable(producer) && phaseOf[producer] != target && !moved[producer] && !candidate[producer]) {
        candidate[producer] = 1;
        candidates.push_back(producer);
      }
    }
  };
  // Beyond the reference: unless non-tensor flow is allowed, a node moves only if each non-tensor
  // value it reads or writes stays inside the target (the reference can create such a crossing).
  auto inTarget = [&](NodeId node) { return phaseOf[node] == target || moved[node]; };
  auto keepsNonTensorInside = [&](NodeId node) {
    for (ir::ValueId value : graph.inputs(node))
      if (value != ir::kNoValue && graph.isCallable(graph.producer(value)) &&
          !producesTensor(graph, graph.producer(value)) && !inTarget(graph.producer(value)))
        return false;
    if (!producesTensor(graph, node))
      for (ir::ValueId value : graph.outputs(node))
        for (NodeId user : graph.users(value))
          if (!graph.isCallable(user) || !inTarget(user))
            return false;
    return true;
  };
  for (NodeId node : phases[target].nodes)
    addInputsOf(node);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      NodeId node = candidates[i];
      if (moved[node] || !acc.isAcc[node])
        continue;
      bool ready = std::all_of(waitsFor[index(node)].begin(), waitsFor[index(node)].end(),
                               [&](NodeId user) { return moved[user] != 0; });
      if (!ready || (!allowNonTensor && !keepsNonTensorInside(node)))
        continue;
      moved[node] = 1;
      progress = true;
      std::uint32_t group = fusion.groupOf[node];
      if (group != kNoGroup)
        for (NodeId buddy : fusion.groups[group])
          if (!moved[buddy] && !candidate[buddy]) {
            candidate[buddy] = 1;
            candidates.push_back(buddy);
          }
      addInputsOf(node);
    }
  }
  takeIntoPhase(phases, phaseOf, target, candidates, moved, notes);
}

// The callable users of `node`'s outputs that are in some phase.
std::vector<NodeId> phasedUsers(const ir::Graph& graph, const IdVector<NodeId, std::uint32_t>& phaseOf, NodeId node) {
  std::vector<NodeId> out;
  for (ir::ValueId value : graph.outputs(node))
    for (NodeId user : graph.users(value))
      if (graph.isCallable(user) && phaseOf[user] != UINT32_MAX)
        out.push_back(user);
  return out;
}

bool hasUsersElsewhere(const ir::Graph& graph, const IdVector<NodeId, std::uint32_t>& phaseOf, NodeId node,
                       std::uint32_t phase) {
  for (NodeId user : phasedUsers(graph, phaseOf, node))
    if (phaseOf[user] != phase)
      return true;
  return false;
}

// `node` and its descendants in phase `from`, all to move to `to`; nothing when a descendant is
// in a third phase. The walk stops at nodes already in `to`.
std::optional<std::vector<NodeId>> descendantsToMove(const ir::Graph& graph,
                                                     const IdVector<NodeId, std::uint32_t>& phaseOf, NodeId node,
                                                     std::uint32_t from, std::uint32_t to) {
  std::vector<NodeId> toMove, stack{node};
  std::vector<std::uint8_t> seen(graph.numNodes(), 0);
  while (!stack.empty()) {
    NodeId current = stack.back();
    stack.pop_back();
    if (seen[index(current)] || phaseOf[current] == to)
      continue;
    seen[index(current)] = 1;
    if (phaseOf[current] != from)
      return std::nullopt;
    toMove.push_back(current);
    for (NodeId user : phasedUsers(graph, phaseOf, current))
      stack.push_back(user);
  }
  return toMove;
}

void moveNodes(const ir::Graph& graph, std::vector<Phase>& phases, IdVector<NodeId, std::uint32_t>& phaseOf,
               const std::vector<NodeId>& toMove, NodeId nonTensorNode, std::uint32_t from, std::uint32_t to,
               SplitNotes& notes) {
  for (NodeId moved : toMove) {
    phaseOf[moved] = to;
    phases[to].nodes.push_back(moved);
    if (!phases[to].isAcc) {
      notes.reason[moved] = SplitReason::NonTensorBoundary;
      notes.detail[moved] = "moved next to the users of non-tensor node '" + std::string(graph.name(nonTensorNode)) + "'";
    }
  }
  auto& nodes = phases[from].nodes;
  nodes.erase(std::remove_if(nodes.begin(), nodes.end(), [&](NodeId n) { return phaseOf[n] != from; }), nodes.end());
  std::sort(phases[to].nodes.begin(), phases[to].nodes.end());
}

// torch's move_non_tensor_nodes_on_boundary for acc phase `from`: a non-tensor node whose users
// are all in one other phase moves there with its descendants in `from`; then its non-tensor
// parents are tried.
void moveNonTensorNodesOutOf(const ir::Graph& graph, std::vector<Phase>& phases,
                             IdVector<NodeId, std::uint32_t>& phaseOf, std::uint32_t from, SplitNotes& notes) {
  std::deque<NodeId> queue;
  for (NodeId node : phases[from].nodes)
    if (!producesTensor(graph, node) && hasUsersElsewhere(graph, phaseOf, node, from))
      queue.push_back(node);
  std::vector<std::uint8_t> processed(graph.numNodes(), 0);
  while (!queue.empty()) {
    NodeId node = queue.front();
    queue.pop_front();
    if (processed[index(node)] || phaseOf[node] != from)
      continue;
    processed[index(node)] = 1;
    std::vector<std::uint32_t> targets;
    for (NodeId user : phasedUsers(graph, phaseOf, node))
      if (phaseOf[user] != from)
        targets.push_back(phaseOf[user]);
    std::sort(targets.begin(), targets.end());
    targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
    if (targets.size() != 1) {
      notes.remarks.push_back("cannot move non-tensor node '" + std::string(graph.name(node)) +
                              "': its users are in several submodules");
      continue;
    }
    if (std::optional<std::vector<NodeId>> toMove = descendantsToMove(graph, phaseOf, node, from, targets[0]))
      moveNodes(graph, phases, phaseOf, *toMove, node, from, targets[0], notes);
    for (ir::ValueId value : graph.inputs(node)) {
      if (value == ir::kNoValue)
        continue;
      NodeId parent = graph.producer(value);
      if (graph.isCallable(parent) && phaseOf[parent] == from && !producesTensor(graph, parent) &&
          !processed[index(parent)] && hasUsersElsewhere(graph, phaseOf, parent, from))
        queue.push_back(parent);
    }
  }
}

// torch's move_non_tensor_nodes_on_boundary over the phases. Complexity: O(moved nodes x their
// descendants' edges) per acc phase.
void moveNonTensorNodesOnBoundary(const ir::Graph& graph, std::vector<Phase>& phases,
                                  IdVector<NodeId, std::uint32_t>& phaseOf, SplitNotes& notes) {
  for (std::uint32_t from = 0; from < phases.size(); ++from)
    if (phases[from].isAcc)
      moveNonTensorNodesOutOf(graph, phases, phaseOf, from, notes);
}

} // namespace

Expected<SplitResult> splitGraph(const ir::Graph& graph,
                                 const IdVector<NodeId, support::Decision>& decisions,
                                 const SplitOptions& options) {
  if (options.minAccSize < 0)
    return Error(ErrorCode::InvalidArgument) << "--min-acc-size must not be negative";
  if (options.maxSplits < 0)
    return Error(ErrorCode::InvalidArgument) << "--max-acc-splits must not be negative";
  SplitResult result;
  plan::CutPlan& plan = result.plan;
  plan.kind = plan::PlanKind::Split;
  SplitNotes notes;

  // Phase 1: acc nodes with the non-tensor reductions. Phase 2: fusion groups.
  AccNodes acc = findAccNodes(graph, decisions, options.allowNonTensor);
  FusionGroups fusion;
  fusion.groupOf = IdVector<NodeId, std::uint32_t>(graph.numNodes(), kNoGroup);
  if (!options.skipFusion)
    fusion = findFusionGroups(graph, acc);
  // Phase 3: the sweep. Phase 4: small acc subgraphs. Phase 5: the submodule limit.
  // Phase 4 and 5 merge acc nodes into the CPU, which can leave a non-tensor value crossing
  // between acc and cpu (the reference has this gap). Unless non-tensor flow is allowed, the acc
  // side of such an edge is demoted and phases 3-5 run again; only demotions happen, so this
  // ends, and graphs without non-tensor values take one round.
  std::vector<Phase> phases;
  while (true) {
    notes.reason = acc.reason;
    notes.detail = acc.detail;
    CLEAVE_TRY(phases, sweep(graph, acc, buildDependencies(graph, fusion)));
    result.beforeMinSize = countKinds(phases);
    phases = removeSmallAccSubgraphs(graph, std::move(phases), options.minAccSize, notes);
    result.afterMinSize = countKinds(phases);
    phases = enforceMaxSplits(graph, std::move(phases), options.maxSplits, notes);
    if (options.allowNonTensor || !demoteNonTensorCrossings(graph, phases, acc))
      break;
    dissolveGroupsWithCpuMembers(graph, fusion, acc);
  }
  for (const auto& group : fusion.groups)
    result.fusionGroups += group.empty() ? 0 : 1;
  if (phases.size() != result.afterMinSize.acc + result.afterMinSize.cpu)
    notes.remarks.push_back("merged " + std::to_string(result.afterMinSize.acc + result.afterMinSize.cpu - phases.size()) +
                           " submodules to meet --max-acc-splits " + std::to_string(options.maxSplits));

  // Phase 6: name the submodules (by position, as the reference tags them).
  std::vector<std::string> names;
  for (std::uint32_t i = 0; i < phases.size(); ++i)
    names.push_back((phases[i].isAcc ? "_run_on_acc_" : "_run_on_cpu_") + std::to_string(i));

  // Phase 7 (optional): move non-tensor nodes on boundaries; extend every acc submodule
  // backwards. Submodules they empty are dropped below.
  if (options.extendAcc || options.moveNonTensorBoundary) {
    IdVector<NodeId, std::uint32_t> phaseOf(graph.numNodes(), UINT32_MAX);
    for (std::uint32_t p = 0; p < phases.size(); ++p)
      for (NodeId node : phases[p].nodes)
        phaseOf[node] = p;
    if (options.moveNonTensorBoundary)
      moveNonTensorNodesOnBoundary(graph, phases, phaseOf, notes);
    if (options.extendAcc)
      for (std::uint32_t p = 0; p < phases.size(); ++p)
        if (phases[p].isAcc)
          extendAccPhase(graph, acc, fusion, phases, phaseOf, p, options.allowNonTensor, notes);
  }

  for (std::uint32_t i = 0; i < phases.size(); ++i) {
    if (phases[i].nodes.empty())
      continue;
    plan::Submodule submodule;
    submodule.role = phases[i].isAcc ? plan::SubmoduleRole::Accelerator : plan::SubmoduleRole::Cpu;
    submodule.name = names[i];
    submodule.nodes = std::move(phases[i].nodes);
    std::sort(submodule.nodes.begin(), submodule.nodes.end());
    plan.submodules.push_back(std::move(submodule));
  }
  plan::indexSubmodules(graph, plan);
  plan.reasons = cpuReasons(graph, notes);
  plan.remarks = std::move(notes.remarks);
  return result;
}

} // namespace cleave::split
