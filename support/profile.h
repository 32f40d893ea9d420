// support/profile.h - what an accelerator runs: operator-support profiles and their decisions.
//
// A profile is JSON. The simplest lists op names, accepted for any dtype:
//   {"ops": ["Conv", "Relu", "torch.relu"]}
// The full form (docs/support-profiles.md):
//   {"name": "npu",
//    "ops": {"Conv": {"inputs": [["i8", "f16"], ["i8", "f16"], null], "max_rank": 4,
//                     "static_shapes": true, "max_elements": 1048576, "attrs": {"group": [1]}},
//            "_operator.add": {"inputs": [["f32"], ["f32"]], "kwargs": {"alpha": ["f32"]}},
//            "Relu": null},
//    "deny": ["/head/*"],          node-name globs never placed on the accelerator
//    "force_cpu": ["layer4.*"],    module-scope globs kept on the CPU
//    "all_of": [PROFILE, ...], "any_of": [PROFILE, ...]}   combinators over nested profiles
// Op keys are ONNX op types (optionally "domain::Type") or FX targets as torch's
// get_node_target spells them. "inputs" follows torch's OperatorSupport: one entry per
// positional input, null = not checked, non-tensor arguments are not checked; "kwargs" likewise
// by name (FX). Every decision carries a reason.
// Complexity: O(inputs) per node decision plus one hash lookup of its op.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/expected.h"
#include "ir/graph.h"

namespace cleave::support {

enum class Reason : std::uint8_t {
  Supported,
  NotCallable,         // inputs, parameters, outputs: never placed by a profile
  UnsupportedOp,       // op not in the profile
  UnsupportedDtype,    // an input's dtype is not allowed
  UnsupportedRank,     // an input's rank is above max_rank
  UnsupportedShape,    // an input's shape is not static, or has too many elements
  UnsupportedAttribute,// an attribute value is not allowed
  Denied,              // the node's name matches a deny glob
  Forced,              // the node's scope matches a force_cpu glob
  Custom,              // a C++ predicate said no
};
// How many reasons there are (the split numbers its own after them: split/placement_reason.h).
inline constexpr std::uint8_t kReasonCount = static_cast<std::uint8_t>(Reason::Custom) + 1;
// Its one name, wherever a reason is shown (support, split reports, backend refusals).
std::string_view reasonName(Reason reason);

struct Decision {
  bool supported = false;
  Reason reason = Reason::UnsupportedOp;
  std::string detail; // e.g. "input 1 (%w) is i8, allowed: f16, f32"
};

// A C++ predicate: return nullopt to defer to the profile, or a decision.
using CustomPredicate = std::function<std::optional<Decision>(const ir::Graph&, ir::NodeId)>;

class Profile {
public:
  Profile();
  ~Profile();
  Profile(Profile&&) noexcept;
  Profile& operator=(Profile&&) noexcept;

  // Parses a profile; errors carry the JSON location ("profile.json: ops.Conv.inputs[1]: ...").
  static Expected<Profile> fromJson(std::string_view text, const std::string& sourceName);
  static Expected<Profile> load(const std::string& path);

  const std::string& name() const;
  // Applied before the JSON rules; the first one that answers wins.
  void addCustomPredicate(std::string name, CustomPredicate predicate);

  Decision decide(const ir::Graph& graph, ir::NodeId node) const;

  struct Rule;

private:
  std::unique_ptr<Rule> root_;
  std::string name_;
  std::vector<std::pair<std::string, CustomPredicate>> custom_;
};

// One decision per node (NotCallable for non-callable nodes), in NodeId order.
IdVector<ir::NodeId, Decision> decideAll(const ir::Graph& graph, const Profile& profile);

// The operand at FX positional argument `index` (ONNX: input `index`), or kNoValue when that
// argument is not a node (a constant) or does not exist.
ir::ValueId positionalOperand(const ir::Graph& graph, ir::NodeId node, std::size_t index);
// The operand passed as FX keyword argument `name`, or kNoValue.
ir::ValueId keywordOperand(const ir::Graph& graph, ir::NodeId node, std::string_view name);

} // namespace cleave::support
