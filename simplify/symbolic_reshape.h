// simplify/symbolic_reshape.h - what a Reshape makes when its target is built from its data's own
// symbolic dims, which onnx's inference leaves unknown.
//
// A dynamic-batch export writes `x.view(b, s, 3, heads, -1)` as Reshape(x, Concat(Unsqueeze(
// Gather(Shape(h), 0)), [64], [3], [8], [-1])). onnx's inference knows x is [batch, 64, 768] but
// not that the target's first element is `batch` too, so the output, and everything read from its
// dims (q.shape[-1] ** 0.5), stays unknown, and the shape arithmetic after it stays on the CPU,
// where the static twin folds it. This pass follows the integer vectors exporters build from dims
// (Shape, Gather, Unsqueeze, Squeeze, Concat, Cast, Identity; small int64 initializers) with each
// element a number or a named symbol, and gives a Reshape whose target is known that way its
// output dims: a symbol, or 0 (allowzero off), copies the data's dim there when the data has that
// symbol at that place; -1 takes what is left when every symbolic dim of the data is copied and
// the numbers divide.
//
// Guarantees: only Reshapes whose output rank or dims the types leave unknown, and only dims the
// target determines; a symbol names equal sizes, as onnx's inference names them. The same graph
// and types give the same answer.
// Complexity: O(nodes + operands + the elements of the vectors followed).
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace cleave::simplify {

// `types`: by ValueId, what onnx's inference gave anew (where one knows its rank it stands for the
// graph's own); empty: the graph's own types.
std::vector<std::pair<ir::ValueId, ir::ValueType>> reshapeTypesFromSymbols(const ir::Graph& graph,
                                                                           std::span<const ir::ValueType> types);

} // namespace cleave::simplify
