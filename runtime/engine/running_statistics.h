// runtime/engine/running_statistics.h - the tensors a training forward updates without a
// gradient: a BatchNormalization's running mean and variance (its operands 3 and 4) where the node
// runs in training mode and they are the model's parameters (ir::Fixed::RunningStatistic).
//
// They update as torch.nn.BatchNorm's buffers do, not by ONNX's formula for the node's optional
// outputs: torch's momentum is 1 - ONNX's `momentum` attribute (what torch's exporter writes), and
// the variance that enters is the batch's unbiased one. Only an executor that trains updates them
// (ExecutorOptions::trainable), in place, once per forward: a forward replayed for its backward
// (forward_replay.h) leaves them be. A trainer checkpoints them and writes them with the trained
// parameters.
// Guarantees: storage owners only, in parameter order, each once.
// Complexity: O(nodes + parameters).
#pragma once

#include <vector>

#include "ir/graph.h"

namespace cleave::runtime {

std::vector<ir::ParamId> updatedRunningStatistics(const ir::Graph& graph);

} // namespace cleave::runtime
