#include "split/placement_reason.h"

namespace cleave::split {

SplitReason reasonForRejection(support::Reason reason) {
  switch (reason) {
  case support::Reason::UnsupportedDtype: return SplitReason::DtypeNotAllowed;
  case support::Reason::UnsupportedRank: return SplitReason::RankTooHigh;
  case support::Reason::UnsupportedShape: return SplitReason::ShapeNotAllowed;
  case support::Reason::UnsupportedAttribute: return SplitReason::AttributeNotAllowed;
  case support::Reason::Denied: return SplitReason::Denied;
  case support::Reason::Forced: return SplitReason::ForcedToCpu;
  case support::Reason::Custom: return SplitReason::CustomPredicate;
  case support::Reason::Supported:
  case support::Reason::NotCallable:
  case support::Reason::UnsupportedOp: break;
  }
  return SplitReason::NotInProfile;
}

SplitReason splitReasonOf(const plan::CutPlan& plan, ir::NodeId node) {
  const plan::PlacementReason* reason = plan::reasonOf(plan, node);
  return reason ? static_cast<SplitReason>(reason->code) : SplitReason::Accelerator;
}

} // namespace cleave::split
