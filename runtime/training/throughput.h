// runtime/training/throughput.h - how fast a training run goes: rows (tokens) per second of each
// step, the FLOP/s they achieve where the graphs' products have static shapes, and the time
// left.
//
// FLOPs of a training step: three times the forward's matrix products and convolutions (the
// backward computes two products per forward one: the inputs' and the weights' gradients), counted
// as partition/latency.h counts them (2 M N K; 2 x outputs x Cin/groups x kernel); elementwise
// work is left out, as PaLM's model-FLOPs count does. Known when every product's dims are static
// but for the rows (the first input's dim 0: a static export's count is divided by its rows, a
// dynamic one's symbol counts as one row).
// Guarantees: the rate is over the step's wall time alone; the ETA is the mean step time of the
// steps run so far times the steps left.
// Complexity: trainingFlopsPerRow O(nodes); the meter O(1) per step.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>

#include "ir/graph.h"
#include "runtime/training/step_record.h"

namespace cleave::runtime {

// The training FLOPs per row of `graphs` together (a model, or a plan's stages); none when a
// product's shape is not static or the graphs' rows are unknown.
std::optional<double> trainingFlopsPerRow(std::span<const ir::Graph* const> graphs);

class ThroughputMeter {
public:
  // `rowsPerStep`: --batch; `tokensPerRow`: 0 for tensor rows; `stepsLeft`: the steps this run is to go.
  ThroughputMeter(std::int64_t rowsPerStep, std::int64_t tokensPerRow, std::optional<double> flopsPerRow,
                  std::int64_t stepsLeft)
      : rows_(rowsPerStep), tokensPerRow_(tokensPerRow), flopsPerRow_(flopsPerRow), stepsLeft_(stepsLeft) {}
  void startStep() { started_ = std::chrono::steady_clock::now(); }
  // The step begun at startStep has ended.
  StepRate endStep();

private:
  std::int64_t rows_, tokensPerRow_;
  std::optional<double> flopsPerRow_;
  std::int64_t stepsLeft_, stepsDone_ = 0;
  double secondsDone_ = 0.0;
  std::chrono::steady_clock::time_point started_;
};

} // namespace cleave::runtime
