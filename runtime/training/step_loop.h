// runtime/training/step_loop.h - a training run's steps, as one loop every trainer shares (a
// model's Trainer, a plan's PipelineTrainer, in one process or on every rank): each step, then its
// timing, its held-out loss, its report and its checkpoint, in that order, through hooks.
//
// Guarantees: steps run in order from `first` to `last`; the held-out loss follows every
// evalEvery-th step and the run's last (`steps`), whoever stops it earlier; each record carries
// the step's rate (throughput.h) measured over the step hook alone; a failing hook ends the loop
// with its error, before the checkpoint of that step. Collective hooks (a plan's step, timing,
// evaluation and checkpoint) are called in the same order on every rank.
// Complexity: O(steps) calls of the hooks.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "base/expected.h"
#include "runtime/training/step_record.h"

namespace cleave::runtime {

struct StepLoopOptions {
  std::int64_t first = 0, last = 0; // the steps this process runs, from 0
  std::int64_t steps = 0;           // the run's steps (a resumed or stopped run spans them)
  std::int64_t batch = 1;           // rows a step
  std::int64_t tokensPerRow = 0;    // TrainingData::tokensPerRow
  std::optional<double> flopsPerRow; // throughput.h
  std::int64_t evalEvery = 0;       // 0: a held-out loss after the last step only (with `evaluate`)
};

struct StepLoopHooks {
  std::function<Expected<StepResult>(std::int64_t step)> step;
  std::function<Expected<std::optional<StepTiming>>()> timing; // null: no timing gathered
  std::function<Expected<double>()> evaluate;                  // null: no held-out loss
  std::function<Status(const StepRecord&)> report;            // null: nothing reported
  std::function<Status(std::int64_t stepsDone)> checkpoint;    // null: no checkpoints
};

// Runs the steps; returns how many were skipped (NonFinitePolicy::Skip).
Expected<std::int64_t> runStepLoop(const StepLoopOptions& options, const StepLoopHooks& hooks);

} // namespace cleave::runtime
