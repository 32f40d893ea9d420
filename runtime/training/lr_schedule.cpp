#include "runtime/training/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace cleave::runtime {

double LrSchedule::factor(std::int64_t step) const {
  if (step < warmup)
    return static_cast<double>(step + 1) / static_cast<double>(warmup + 1);
  const double decaySteps = static_cast<double>(std::max<std::int64_t>(steps - warmup, 1));
  const double done = std::min(static_cast<double>(step - warmup), decaySteps) / decaySteps;
  switch (kind) {
  case LrScheduleKind::Constant: return 1.0;
  case LrScheduleKind::Linear: return 1.0 - done;
  case LrScheduleKind::Cosine: return (1.0 + std::cos(M_PI * done)) / 2.0;
  }
  return 1.0;
}

std::string LrSchedule::describe() const {
  std::string text(kLrScheduleKinds.name(kind));
  if (kind != LrScheduleKind::Constant)
    text += " over " + std::to_string(steps) + " steps";
  if (warmup > 0)
    text += ", " + std::to_string(warmup) + " of warmup";
  return text;
}

} // namespace cleave::runtime
