#include "ir/analysis.h"

#include <algorithm>
#include <map>

namespace cleave::ir {

IdVector<NodeId, std::uint32_t> computeLevels(const Graph& graph) {
  IdVector<NodeId, std::uint32_t> levels(graph.numNodes(), 0);
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId node{n};
    if (!graph.isCallable(node) && graph.kind(node) != NodeKind::Output)
      continue;
    std::uint32_t level = 0;
    for (ValueId value : graph.inputs(node))
      if (value != kNoValue) {
        NodeId producer = graph.producer(value);
        level = std::max(level, levels[producer] + (graph.isCallable(producer) ? 1u : 0u));
      }
    // Callable nodes fed only by inputs/parameters sit at level 1 so level 0 holds sources.
    levels[node] = std::max(level, 1u);
  }
  return levels;
}

GraphStats computeGraphStats(const Graph& graph) {
  GraphStats stats;
  stats.nodes = graph.numNodes();
  IdVector<NodeId, std::uint32_t> levels = computeLevels(graph);
  std::map<std::string, std::uint32_t> histogram;
  std::vector<std::uint32_t> nodesPerLevel;
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId node{n};
    switch (graph.kind(node)) {
    case NodeKind::Input: ++stats.inputs; break;
    case NodeKind::Parameter: ++stats.parameterNodes; break;
    case NodeKind::Output: stats.outputs = static_cast<std::uint32_t>(graph.inputs(node).size()); break;
    default: {
      ++stats.callableNodes;
      ++histogram[graph.target(node)];
      std::uint32_t level = levels[node];
      if (nodesPerLevel.size() <= level)
        nodesPerLevel.resize(level + 1, 0);
      ++nodesPerLevel[level];
      stats.depth = std::max(stats.depth, level);
      for (ValueId value : graph.outputs(node)) {
        if (graph.bytes(value) >= 0)
          stats.activationBytes += graph.bytes(value);
        else
          ++stats.unknownSizeValues;
      }
    }
    }
  }
  for (std::uint32_t v = 0; v < graph.numValues(); ++v)
    stats.edges += static_cast<std::uint32_t>(graph.users(ValueId{v}).size());
  for (std::uint32_t p = 0; p < graph.numParameters(); ++p)
    stats.parameterBytes += graph.parameter(ParamId{p}).bytes;
  stats.parameterCount = graph.numParameters();
  for (std::uint32_t level = 0; level < nodesPerLevel.size(); ++level)
    if (nodesPerLevel[level] > stats.widestLevelNodes) {
      stats.widestLevelNodes = nodesPerLevel[level];
      stats.widestLevel = level;
    }
  for (const auto& [target, count] : histogram)
    stats.opHistogram.push_back({target, count});
  std::stable_sort(stats.opHistogram.begin(), stats.opHistogram.end(),
                   [](const OpCount& a, const OpCount& b) { return a.count > b.count; });
  return stats;
}

} // namespace cleave::ir
