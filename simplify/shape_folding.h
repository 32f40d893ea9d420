// simplify/shape_folding.h - the shape arithmetic exporters write (Shape -> Gather -> Mul/Div ->
// Concat -> Reshape, for every x.size() and view), folded to constants where the shapes are static,
// so that a split never cuts the accelerator around integer math (issue: real exports).
//
// planShapeFolding computes the plan; applyFoldPlan materializes it (one home each):
//  - a `Shape` or `Size` of a value whose dims (in the range asked for) are static is a constant;
//  - so is a Gather of such a Shape whose picked dims are static, although others are not (a
//    dynamic batch's `x.size(2)`);
//  - so is every op of simplify/constant.h's foldableOps() whose inputs are all constants
//    (untrained initializers and float buffers, Constant nodes read as parameters, earlier
//    folds), when it evaluates exactly; a trained (float, not buffer) weight never folds;
//  - an op it keeps whose output dims its types leave unknown gets them from its operands where
//    they now determine them (static_dims.h), so the Shape nodes after it fold in the same plan;
//  - an Identity, a Cast to the dtype its input has, an Expand that keeps its input's dims, or an
//    inference Dropout whose mask nothing reads, is bypassed: its readers read its input (ONNX
//    Runtime's basic level removes them); so is a Gather of Reshape(X, [-1]) by indices that
//    enumerate X's elements in order with X's dims (torch.export's as_strided of a contiguous
//    view, its indices constant or computed from a symbolic batch: simplify/affine_index.h), whose
//    readers read X, or, with other dims, whose readers are all Reshapes and read the flat value;
//    not when it makes a graph output or a subgraph body reads its output by name;
//  - folded values that a remaining node or the graph's outputs read become initializers named as
//    the values; every op node whose outputs nothing reads any more is removed.
// Guarantees: the graph's inputs and outputs keep their names, order and types; every remaining
// node reads the same values (some now initializers) and computes the same thing, so the outputs
// are unchanged; the same graph gives the same plan, byte for byte. Only the ai.onnx domain folds;
// a value over `maxElements` elements never does (shape tensors are small; a large constant would
// only grow the model).
// Complexity: O(nodes + operands) plus the elements evaluated (each result <= maxElements) and the
// bytes of the small initializers read; foldToFixedPoint: that per round (a node evaluated once is
// not evaluated again: FoldMemo), plus an extraction and onnx's inference (without large weights'
// bytes) between rounds, which run only while inference anew may learn a dim planning does not
// follow (an op static_dims.h does not know, a view of symbolic dims: symbolic_reshape.h).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/expected.h"
#include "ir/graph.h"
#include "simplify/constant.h"

namespace cleave::simplify {

// The outputs of op nodes evaluated in an earlier plan of the same graph (foldToFixedPoint's
// rounds): a node whose inputs were known then has the same outputs again, so a later round
// takes them instead of evaluating (a window-attention mask is 150k elements, in every round).
struct FoldMemo {
  std::unordered_map<std::uint32_t, std::vector<Constant>> outputsByNode;
};

struct FoldOptions {
  std::int64_t maxElements = 1 << 20;
  // Types by ValueId that onnx's inference gave anew (foldToFixedPoint); where one knows its rank,
  // its dims stand for the graph's. Empty: the graph's own.
  std::span<const ir::ValueType> inferredTypes;
  FoldMemo* memo = nullptr; // read and filled when set
};

struct FoldPlan {
  std::vector<ir::NodeId> kept;                             // the op nodes that stay, in order
  std::vector<std::pair<ir::ValueId, Constant>> constants;  // folded values still read
  std::size_t folded = 0;                                   // op nodes evaluated to constants
  std::size_t removed = 0;                                  // op nodes gone (folded or unread)
  std::map<std::string, std::size_t> foldedByOp;            // op type -> nodes folded
  std::vector<std::pair<ir::ValueId, ir::ValueId>> readsInstead; // a bypassed node's output -> its input
  std::map<std::string, std::size_t> bypassedByOp;          // Identity / Dropout -> nodes bypassed
  std::size_t shapesLeft = 0; // Shape and Size nodes kept: what inference anew might still fold
  std::size_t rounds = 1;     // foldToFixedPoint's rounds of planning
  bool changes() const { return removed > 0; }
};

FoldPlan planShapeFolding(const ir::Graph& graph, const FoldOptions& options = {});

// planShapeFolding to a fixed point. A fold can make a shape computable that planning does not
// follow (an op static_dims.h does not know): while a round folds more than the last and leaves
// Shape or Size nodes, onnx's inference runs anew on the graph that round leaves
// (io::inferValueTypes), with the types symbolic_reshape.h gives views of symbolic dims declared
// in it, and the next round plans with those types. At most kMaxFoldRounds rounds; an inference
// that fails ends it with the last round's plan. Rounds after the first run only where Shape or
// Size nodes remain and either a node that stays reads a folded value while its output's dims are
// not all known, or a view's symbols say more than the types did.
inline constexpr std::size_t kMaxFoldRounds = 32;
FoldPlan foldToFixedPoint(const ir::Graph& graph, const FoldOptions& options = {});

// The graph without the plan's removed nodes, its constants as initializers. Fails: what
// ir::extractSubgraph fails with (a plan of another graph).
Expected<ir::Graph> applyFoldPlan(const ir::Graph& graph, const FoldPlan& plan);

// applyFoldPlan, then onnx's inference run anew on the result, whose types replace the graph's
// where they say more: a value whose rank or dims the export's types left unknown because they
// came from what has now folded (a Concat of folded parts), so that what later passes read of
// shapes (split's shape prologue) is what the folded model says. One more inference (without
// large weights' bytes); where it fails, applyFoldPlan's graph as it is.
Expected<ir::Graph> applyFoldPlanRetyped(const ir::Graph& graph, const FoldPlan& plan);

} // namespace cleave::simplify
