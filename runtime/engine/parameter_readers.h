// runtime/engine/parameter_readers.h - which parameters only certain readers read, decided before
// parameters load (how a parameter is held depends on every use of every name it goes by).
// Guarantees: per storage owner (ir::Graph::storageOf), in parameter order; a parameter without
// readers is never "read only by" anything. Complexity: O(nodes + operands).
#pragma once

#include <functional>
#include <vector>

#include "ir/graph.h"
#include "runtime/engine/fusion.h"

namespace cleave::runtime {

// Whether each parameter has readers and `takes` holds for each (every operand use of every name
// it goes by, aliases included).
std::vector<bool> parametersReadOnlyBy(const ir::Graph& g,
                                       const std::function<bool(ir::NodeId user, ir::ValueId value)>& takes);

// Whether `node` is a convolution whose fused group folds a normalization into its weight (and so
// reads the weight itself, in float32).
bool foldsNormalizationInto(const FusionPlan& fusion, ir::NodeId node);

// Floating parameters read only as the weight (operand 1) of MatMul, Gemm, Conv or ConvTranspose,
// not folded with a normalization: what mixed precision casts to its half type for every run
// alike, so it may hold them in it from the start.
std::vector<bool> productWeightsOnly(const ir::Graph& g, const FusionPlan& fusion);

} // namespace cleave::runtime
