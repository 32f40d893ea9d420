// ir/analysis.h - value-returning analyses over a Graph (nothing cached, nothing to invalidate).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace cleave::ir {

// ASAP level of every node: inputs, parameters and nodes without operands are at level 0; any
// other node is one above its deepest operand producer. Complexity O(V + E).
IdVector<NodeId, std::uint32_t> computeLevels(const Graph& graph);

struct OpCount {
  std::string target;
  std::uint32_t count = 0;
};

struct GraphStats {
  std::uint32_t nodes = 0, callableNodes = 0, edges = 0;
  std::uint32_t inputs = 0, parameterNodes = 0, outputs = 0;
  std::vector<OpCount> opHistogram; // callable targets, by count descending then name
  std::int64_t parameterBytes = 0;  // all parameters the graph owns
  std::uint32_t parameterCount = 0;
  std::int64_t activationBytes = 0; // outputs of callable nodes with a known size
  std::uint32_t unknownSizeValues = 0;
  std::uint32_t depth = 0;          // longest chain of callable nodes
  std::uint32_t widestLevel = 0;    // level with the most callable nodes
  std::uint32_t widestLevelNodes = 0;
};

// Counts and sizes for `cleave inspect`. Edges count each (operand value, user node) once.
// Complexity O(V + E + T log T) for T distinct targets.
GraphStats computeGraphStats(const Graph& graph);

} // namespace cleave::ir
