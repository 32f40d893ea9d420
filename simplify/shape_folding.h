// simplify/shape_folding.h - the shape arithmetic exporters write (Shape -> Gather -> Mul/Div ->
// Concat -> Reshape, for every x.size() and view), folded to constants where the shapes are static,
// so that a split never cuts the accelerator around integer math (issue: real exports).
//
// planShapeFolding computes the plan; applyFoldPlan materializes it (one home each):
//  - a `Shape` or `Size` of a value whose dims (in the range asked for) are static is a constant;
//  - so is every op of simplify/constant.h's foldableOps() whose inputs are all constants
//    (initializers, Constant nodes read as parameters, earlier folds), when it evaluates exactly;
//  - folded values that a remaining node or the graph's outputs read become initializers named as
//    the values; every op node whose outputs nothing reads any more is removed.
// Guarantees: the graph's inputs and outputs keep their names, order and types; every remaining
// node reads the same values (some now initializers) and computes the same thing, so the outputs
// are unchanged; the same graph gives the same plan, byte for byte. Only the ai.onnx domain folds;
// a value over `maxElements` elements never does (shape tensors are small; a large constant would
// only grow the model).
// Complexity: O(nodes + operands) plus the elements evaluated (each result <= maxElements) and the
// bytes of the small initializers read.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/expected.h"
#include "ir/graph.h"
#include "simplify/constant.h"

namespace cleave::simplify {

struct FoldOptions {
  std::int64_t maxElements = 4096;
};

struct FoldPlan {
  std::vector<ir::NodeId> kept;                             // the op nodes that stay, in order
  std::vector<std::pair<ir::ValueId, Constant>> constants;  // folded values still read
  std::size_t folded = 0;                                   // op nodes evaluated to constants
  std::size_t removed = 0;                                  // op nodes gone (folded or unread)
  std::map<std::string, std::size_t> foldedByOp;            // op type -> nodes folded
  bool changes() const { return removed > 0; }
};

FoldPlan planShapeFolding(const ir::Graph& graph, const FoldOptions& options = {});

// The graph without the plan's removed nodes, its constants as initializers. Fails: what
// ir::extractSubgraph fails with (a plan of another graph).
Expected<ir::Graph> applyFoldPlan(const ir::Graph& graph, const FoldPlan& plan);

} // namespace cleave::simplify
