// runtime/training/lr_schedule.h - the learning rate of each optimizer step, as PyTorch's own
// schedulers compute it for the schedules training recipes use: a linear warmup over the first
// `warmup` steps, then constant, linear decay or cosine decay over the rest of the run.
//
// In torch.optim.lr_scheduler terms (tests/train_test.py builds exactly these and compares):
//   warmup      LinearLR(start_factor=1/(warmup+1), end_factor=1, total_iters=warmup): step t < warmup
//               trains at peak * (t+1)/(warmup+1), so no step trains at 0 and step `warmup` at peak;
//   constant    the peak;
//   linear      LinearLR(start_factor=1, end_factor=0, total_iters=D): peak * (1 - u/D);
//   cosine      CosineAnnealingLR(T_max=D, eta_min=0): peak * (1 + cos(pi u/D)) / 2;
// chained by SequentialLR(milestones=[warmup]), where u = t - warmup and D = steps - warmup (the
// decay reaches 0 just after the run's last step, as HuggingFace's get_*_schedule_with_warmup).
// Guarantees: factor() is a pure function of the step, so a resumed run gets the same rates as
// one that never stopped; it is within float rounding of torch's chained (recursive) form.
// Complexity: O(1) per step. Torch-free.
#pragma once

#include <cstdint>
#include <string>

#include "base/enum_table.h"

namespace cleave::runtime {

enum class LrScheduleKind : std::uint8_t { Constant, Linear, Cosine };
inline constexpr auto kLrScheduleKinds = enumTable<LrScheduleKind>(
    {{LrScheduleKind::Constant, "constant"}, {LrScheduleKind::Linear, "linear"}, {LrScheduleKind::Cosine, "cosine"}});

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::Constant;
  std::int64_t warmup = 0; // steps of linear warmup
  std::int64_t steps = 1;  // the run's optimizer steps (the decay ends with them)

  // The peak rate's multiplier at 0-based step `step`.
  double factor(std::int64_t step) const;
  // "cosine over 100 steps, 10 of warmup": what a checkpoint records and a resume compares.
  std::string describe() const;
};

} // namespace cleave::runtime
