#include "split/placement_reason.h"

#include "base/enum_table.h"

namespace cleave::split {

std::string_view splitReasonName(SplitReason reason) {
  static constexpr auto kSplitSteps = enumTable<SplitReason>({
      {SplitReason::NonTensorBoundary, "non-tensor boundary"},
      {SplitReason::FusionGroup, "fusion group"},
      {SplitReason::BelowMinSize, "subgraph below minimum size"},
      {SplitReason::MaxSplitsMerge, "merged for max splits"},
  });
  const auto code = static_cast<std::uint8_t>(reason);
  return code < support::kReasonCount ? support::reasonName(static_cast<support::Reason>(code))
                                      : kSplitSteps.name(reason);
}

SplitReason splitReasonOf(const plan::CutPlan& plan, ir::NodeId node) {
  const plan::PlacementReason* reason = plan::reasonOf(plan, node);
  return reason ? static_cast<SplitReason>(reason->code) : SplitReason::Accelerator;
}

} // namespace cleave::split
