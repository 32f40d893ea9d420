// ir/extract.h - a standalone graph made of some nodes of another: the one way cleave cuts a
// graph (plan/materialize.h cuts each submodule with it; the runtime cuts trial node sets and
// retypes whole graphs with it).
//
// extractSubgraph guarantees: the result holds the given nodes in the given order (which must be
// topological), reads exactly `inputs` as its graph inputs and returns exactly `outputs`; every
// parameter a node reads (or that `outputs` lists) is copied in once, unless `inputs` lists it (a
// parameter sent by another submodule); inline parameter bytes are copied, model-file parameters
// stay lazy (the file is shared). The cut is ONNX-writable when the source was ONNX.
// Fails: InvalidGraph when a node reads a value that is neither an input, a parameter nor made by
// an earlier node of the set (GraphBuilder::finish names it).
// Complexity: O(nodes + their operands + parameters, log parameters) plus copied bytes.
#pragma once

#include <map>

#include <span>
#include <string>
#include <vector>

#include "base/expected.h"
#include "ir/graph.h"

namespace cleave::ir {

// What a node set exchanges with the rest of the graph: inputs are the values its nodes read
// that no node of the set makes (parameters excluded: they are copied), outputs the values its
// nodes make that a node outside the set or the graph output reads. Both in value order.
// O(operands and users of the set + nodes of the graph).
struct NodeSetBoundary {
  std::vector<ValueId> inputs, outputs;
};
NodeSetBoundary boundaryOf(const Graph& graph, std::span<const NodeId> nodes);

struct SubgraphSpec {
  std::string name;                     // the new graph's name
  std::span<const NodeId> nodes;        // topological order
  std::span<const ValueId> inputs;      // its graph inputs, in order
  std::span<const ValueId> outputs;     // its graph outputs, in order
  const IdVector<ValueId, ValueType>* types = nullptr; // replaces the source's value types
  // Replaces the bytes of the named parameters (and of their aliases), e.g. trained weights.
  const std::map<std::string, std::string>* parameterBytes = nullptr;
};
[[nodiscard]] Expected<Graph> extractSubgraph(const Graph& graph, const SubgraphSpec& spec);

} // namespace cleave::ir
