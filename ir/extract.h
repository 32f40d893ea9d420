// ir/extract.h - a standalone graph made of some nodes of another: the one way cleave cuts a
// graph (plan/materialize.h cuts each submodule with it; the runtime cuts trial node sets and
// retypes whole graphs with it); and the way back, cut graphs joined into one (the runtime runs
// a cut model's neighbouring submodules on one backend as one graph).
//
// extractSubgraph guarantees: the result holds the given nodes in the given order (which must be
// topological), reads exactly `inputs` as its graph inputs and returns exactly `outputs`; every
// parameter a node reads (or that `outputs` lists) is copied in once, unless `inputs` lists it (a
// parameter sent by another submodule), and an alias with the parameter owning its tensor (one
// tensor under both names, as in the source); inline parameter bytes are copied, model-file
// parameters stay lazy (the file is shared). The cut is ONNX-writable when the source was ONNX.
// Fails: InvalidGraph when a node reads a value that is neither an input, a parameter nor made by
// an earlier node of the set (GraphBuilder::finish names it).
// Complexity: O(nodes + their operands + parameters, log parameters) plus copied bytes; O(nodes of
// the source) more when the set reads an alias.
#pragma once

#include <map>

#include <span>
#include <string>
#include <utility>
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

// A constant the cut holds as a new parameter named as `value` (a value its source graph computes,
// e.g. folded shape arithmetic), its bytes inline; the node that made it need not be in the cut.
struct AddedParameter {
  ValueId value = kNoValue;
  DType dtype = DType::Undefined;
  std::vector<std::int64_t> dims;
  std::string bytes;
};

struct SubgraphSpec {
  std::string name;                     // the new graph's name
  std::span<const NodeId> nodes;        // topological order
  std::span<const ValueId> inputs;      // its graph inputs, in order
  std::span<const ValueId> outputs;     // its graph outputs, in order
  const IdVector<ValueId, ValueType>* types = nullptr; // replaces the source's value types
  // Replaces the bytes of the named parameters (and of their aliases), e.g. trained weights.
  const std::map<std::string, std::string>* parameterBytes = nullptr;
  std::span<const AddedParameter> addedParameters = {}; // new parameters (not buffers of the source)
  // A node of the set that reads `first` reads `second` instead (a bypassed Identity's output and
  // its input); `second` is never itself replaced.
  std::span<const std::pair<ValueId, ValueId>> readsInstead = {};
};
[[nodiscard]] Expected<Graph> extractSubgraph(const Graph& graph, const SubgraphSpec& spec);

// The inverse of a cut: graphs that exchange values by name (a cut model's submodules, in plan
// order) joined into one, so passes that look at neighbouring nodes (fusion) see across the seams.
// joinGraphs guarantees: the result holds every part's op nodes in part order; a part's input is
// bound to the earlier part's value of that name, else it becomes a graph input (once, in order
// of first appearance); a parameter held by several parts is copied once (by name); it returns
// exactly `outputs`. Parameter bytes are not copied: a part's model-file and external data
// become external data in that part's file, relative to `folder` (where the parts' files lie);
// inline bytes are copied.
// Fails: InvalidArgument (a part's file outside `folder`), InvalidGraph (an output nothing makes,
// two parts making one value: GraphBuilder::finish names it).
// Complexity: O(nodes + operands + parameters of all parts), plus copied inline bytes.
struct JoinSpec {
  std::string name;                       // the new graph's name
  std::span<const Graph* const> parts;    // in an order where each part reads only earlier values
  std::span<const std::string> outputs;   // its graph outputs, in order
  std::string folder;                     // the parts' files lie below it
};
[[nodiscard]] Expected<Graph> joinGraphs(const JoinSpec& spec);

} // namespace cleave::ir
