// pipeline/balance.h - cutting a sequence of weighted nodes (callable nodes in topological order)
// into contiguous stages.
//
//   cutGreedy:  walk the sequence and close stage k once the running total reaches
//               (k + 1) / K of the whole (the "equal nodes / params / FLOPs / latency" policies).
//               O(N).
//   cutOptimal: the smallest possible bottleneck (largest stage weight) over all cuts into at
//               most K non-empty stages whose memory stays within a limit: a bisection on the
//               bottleneck with a greedy feasibility test (extend each stage while it fits; for
//               interval-monotone constraints that is optimal). O(N log(W / eps)), W the total.
// Both return stage starts (the first is 0), strictly increasing, at most K of them (fewer only
// when there are fewer nodes than stages).
#pragma once

#include <cstdint>
#include <vector>

#include "base/expected.h"

namespace cleave::pipeline {

std::vector<std::size_t> cutGreedy(const std::vector<double>& weights, std::size_t stages);

// `memory[i]` is node i's bytes; a stage's memory is their sum; `memoryLimit` <= 0: none.
// Fails: DoesNotFit when some node alone exceeds the limit, or K stages cannot hold it.
Expected<std::vector<std::size_t>> cutOptimal(const std::vector<double>& weights, std::size_t stages,
                                              const std::vector<std::int64_t>& memory = {},
                                              std::int64_t memoryLimit = 0);

// The largest stage weight of a cut.
double bottleneckOf(const std::vector<double>& weights, const std::vector<std::size_t>& starts);

} // namespace cleave::pipeline
