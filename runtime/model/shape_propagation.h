// runtime/model/shape_propagation.h - value types from a run on sample inputs (torch.fx's ShapeProp,
// for ONNX graphs whose static shapes are incomplete): every value made during the run gets the
// dtype and shape it had; values the run never made (the other branch of an If) keep theirs.
// The result is a new graph, ready for the memory model, the splitter's preview, or writing.
// Complexity: one run of the model plus O(V + E) to rebuild the graph.
#pragma once

#include "runtime/engine/tensors.h"

namespace cleave::runtime {

struct ShapePropagation {
  ir::Graph graph;
  std::size_t completed = 0; // values whose type was not fully static before
};

// Fails like Executor::create and run; Unsupported for FX graphs.
Expected<ShapePropagation> propagateShapes(const ir::Graph& graph, const TensorMap& inputs);

} // namespace cleave::runtime
