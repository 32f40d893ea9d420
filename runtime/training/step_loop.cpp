#include "runtime/training/step_loop.h"

#include "runtime/training/throughput.h"

namespace cleave::runtime {

Expected<std::int64_t> runStepLoop(const StepLoopOptions& options, const StepLoopHooks& hooks) {
  ThroughputMeter meter(options.batch, options.tokensPerRow, options.flopsPerRow, options.last - options.first);
  std::int64_t skipped = 0;
  for (std::int64_t step = options.first; step < options.last; ++step) {
    StepRecord record{step};
    meter.startStep();
    CLEAVE_TRY(record.result, hooks.step(step));
    record.rate = meter.endStep();
    skipped += record.result.skipped;
    if (hooks.timing) {
      CLEAVE_TRY(record.planTiming, hooks.timing());
    }
    const bool evaluates = (options.evalEvery > 0 && (step + 1) % options.evalEvery == 0) || step + 1 == options.steps;
    if (hooks.evaluate && evaluates) {
      CLEAVE_TRY(record.evalLoss, hooks.evaluate());
    }
    if (hooks.report)
      CLEAVE_CHECK(hooks.report(record));
    if (hooks.checkpoint)
      CLEAVE_CHECK(hooks.checkpoint(step + 1));
  }
  return skipped;
}

} // namespace cleave::runtime
