// split/shape_prologue.h - the shape arithmetic a dynamic-shape export computes for its acc nodes
// (Shape -> Gather -> Mul -> Concat -> Reshape's shape operand), which folding cannot remove when
// the dims are symbolic, kept with the acc submodule that reads it instead of cutting it there.
//
// A node belongs to the prologue when:
//  - it is an ai.onnx op the profile leaves on the CPU for its op, dtypes, rank or shape (never a
//    denied, forced or custom-refused one);
//  - every output is an integer or bool tensor of rank <= 1 (a shape, an index, a size);
//  - every input is a parameter, another prologue node's output, or, for Shape and Size (which
//    read only a tensor's dims), any tensor;
//  - every reader is another prologue node, an acc node whose outputs are themselves such small
//    integer tensors, or an acc node that reads it as a shape operand (Reshape's and Expand's shape, Slice's starts/ends/axes/steps, Tile's repeats,
//    Pad's pads, the axes of Unsqueeze, Squeeze and the reductions, Range, ConstantOfShape, ...);
//    never a graph output.
// The split then takes those nodes as the acc submodule's own: they run with it (on the host,
// before it, where the profile does not take them: a host prologue), so the segment stays whole.
// Guarantees: deterministic (graph order); no node is taken while a reader of it stays on the CPU.
// The caller applies it to ONNX models only (the FX path keeps torch's splitter semantics).
// Complexity: O(V + E): one forward pass (inputs), one backward pass (readers).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "support/profile.h"

namespace cleave::split {

struct ShapePrologue {
  std::vector<ir::NodeId> nodes;              // graph order
  std::map<std::string, std::size_t> byOp;    // op type -> nodes
};

ShapePrologue findShapePrologue(const ir::Graph& graph, const IdVector<ir::NodeId, support::Decision>& decisions);

// The prologue's nodes taken by the accelerator in `decisions` (the split places them with it).
void takeShapePrologue(const ShapePrologue& prologue, IdVector<ir::NodeId, support::Decision>& decisions);

// What split plans with: the profile's decisions, then, for an ONNX graph and unless turned off,
// the shape prologue taken. FX graphs get the profile's decisions only.
struct SplitDecisions {
  IdVector<ir::NodeId, support::Decision> decisions;
  ShapePrologue prologue;
};
SplitDecisions decideForSplit(const ir::Graph& graph, const support::Profile& profile, bool shapePrologue);

} // namespace cleave::split
