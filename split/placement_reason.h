// split/placement_reason.h - why the split kept a node off the accelerator: the codes a split
// plan's plan::PlacementReason carries. A node the profile rejected carries the profile's own
// reason (support::Reason: the same number and the same name, so one reason has one name wherever
// it is shown); the split's own steps, which move a node the profile supports to the CPU, are
// numbered after the profile's reasons. report/split_report.h renders them; nothing else
// interprets the numbers.
// Complexity: a name is a table lookup, O(1); splitReasonOf is reasonOf's binary search.
#pragma once

#include <cstdint>
#include <string_view>

#include "plan/plan.h"
#include "support/profile.h"

namespace cleave::split {

enum class SplitReason : std::uint8_t {
  Accelerator = static_cast<std::uint8_t>(support::Reason::Supported), // never recorded in a plan
  // 1 .. kReasonCount - 1: the profile's rejections (rejectedByProfile).
  NonTensorBoundary = support::kReasonCount, // supported, but would pass non-tensor data to or from the CPU
  FusionGroup,                               // supported, but its fusion group holds a CPU node
  BelowMinSize,                              // its acc subgraph was smaller than --min-acc-size
  MaxSplitsMerge,                            // its acc subgraph was merged back to meet --max-acc-splits
};

// The code of a node the profile rejected for `reason` (a decision that is not supported).
constexpr SplitReason rejectedByProfile(support::Reason reason) { return static_cast<SplitReason>(reason); }

// Its name: the profile's name for a rejection (support::reasonName), else the split's step's.
std::string_view splitReasonName(SplitReason reason);

// The split reason a plan recorded for `node` (Accelerator when it recorded none).
SplitReason splitReasonOf(const plan::CutPlan& plan, ir::NodeId node);

} // namespace cleave::split
