// simplify/static_dims.h - the static dims of an op's output from its inputs' dims and constant
// operands, for the ops that carry a shape along a model: what onnx's inference would say once the
// operands folding just made constant are constants.
//
// Folding runs in rounds because a fold (a Pad's pads computed from x.shape, a view's target)
// makes dims known that only inference anew could spread to the Shape nodes after it; a swin_t
// took 16 rounds of inference, one per block. planShapeFolding asks this for each op it keeps
// whose output dims its types leave unknown, and reads the answer as that value's dims, so a chain
// of blocks folds in one round.
//
// Ops: same-shape unary ops, broadcasting binary and Where, MatMul, Reshape, Transpose, Pad,
// Slice, Concat, Unsqueeze, Squeeze, Expand, Gather, Flatten, reductions with constant axes,
// LayerNormalization and Softmax. Each follows the ONNX spec of the graph's opset.
// Guarantees: an answer only where every dim it needs is static and every operand that sets a
// size is a constant; nullopt otherwise (never a guess).
// Complexity: O(rank + the constant operands' elements) per node.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "simplify/constant.h"

namespace cleave::simplify {

struct DimsSources {
  // A value's dims, -1 where not static; nullopt when its rank is unknown.
  std::function<std::optional<std::vector<std::int64_t>>(ir::ValueId)> dims;
  // A value's constant, or null.
  std::function<const Constant*(ir::ValueId)> constant;
};

// `value`'s dims as the types say: `types` (by ValueId; what onnx's inference gave anew) where
// that knows its rank, else the graph's own, symbols named; nullopt when neither knows the rank.
std::optional<std::vector<ir::Dim>> typedDims(const ir::Graph& graph, ir::ValueId value,
                                              std::span<const ir::ValueType> types);

// The dims [start, end) that Shape node `shapeNode` of a rank-`rank` input reports (opset 15's
// start and end, counted from the end when negative, clamped; end >= start).
std::pair<std::int64_t, std::int64_t> shapeNodeRange(const ir::Graph& graph, ir::NodeId shapeNode, std::int64_t rank);

std::optional<std::vector<std::int64_t>> staticOutputDims(const ir::Graph& graph, ir::NodeId node, std::int64_t opset,
                                                          const DimsSources& sources);

} // namespace cleave::simplify
