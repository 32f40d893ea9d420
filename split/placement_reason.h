// split/placement_reason.h - why the split kept a node off the accelerator: the codes a split
// plan's plan::PlacementReason carries. The profile's own rejections come first (one code per
// support::Reason), then the split's: a supported node the sweep still had to put on the CPU.
// report/split_report.h renders them; nothing else interprets the numbers.
// Complexity: a name is a table lookup, O(1); splitReasonOf is reasonOf's binary search.
#pragma once

#include <cstdint>

#include "base/enum_table.h"
#include "plan/plan.h"
#include "support/profile.h"

namespace cleave::split {

enum class SplitReason : std::uint8_t {
  Accelerator,          // supported and kept on the accelerator (never recorded in a plan)
  NotInProfile,         // the profile has no rule for the op
  DtypeNotAllowed,      // an input's dtype is not allowed
  RankTooHigh,          // an input's rank is above max_rank
  ShapeNotAllowed,      // an input's shape is not static, or has too many elements
  AttributeNotAllowed,  // an attribute value is not allowed
  Denied,               // the node's name matches a deny glob
  ForcedToCpu,          // the node's scope matches a force_cpu glob
  CustomPredicate,      // a C++ predicate said no
  NonTensorBoundary,    // supported, but would pass non-tensor data to or from the CPU
  FusionGroup,          // supported, but its fusion group holds a CPU node
  BelowMinSize,         // its acc subgraph was smaller than --min-acc-size
  MaxSplitsMerge,       // its acc subgraph was merged back to meet --max-acc-splits
};
inline constexpr auto kSplitReasons = enumTable<SplitReason>({
    {SplitReason::Accelerator, "accelerator"},
    {SplitReason::NotInProfile, "not in the profile"},
    {SplitReason::DtypeNotAllowed, "dtype not allowed"},
    {SplitReason::RankTooHigh, "rank too high"},
    {SplitReason::ShapeNotAllowed, "shape not allowed"},
    {SplitReason::AttributeNotAllowed, "attribute not allowed"},
    {SplitReason::Denied, "denied by name"},
    {SplitReason::ForcedToCpu, "forced to cpu"},
    {SplitReason::CustomPredicate, "custom predicate"},
    {SplitReason::NonTensorBoundary, "non-tensor boundary"},
    {SplitReason::FusionGroup, "fusion group"},
    {SplitReason::BelowMinSize, "subgraph below minimum size"},
    {SplitReason::MaxSplitsMerge, "merged for max splits"},
});

// The code for a node the profile rejected (decision.supported is false).
SplitReason reasonForRejection(support::Reason reason);

// The split reason a plan recorded for `node` (Accelerator when it recorded none).
SplitReason splitReasonOf(const plan::CutPlan& plan, ir::NodeId node);

} // namespace cleave::split
