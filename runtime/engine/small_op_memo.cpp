#include "runtime/engine/small_op_memo.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>

#include "runtime/engine/tensors.h"

namespace cleave::runtime {
namespace {

// Ops of the default domain whose results are a function of their operands' values and their
// attributes alone. Not here: Shape and Size (they read a possibly large operand's shape only, and
// cost less than a comparison), random ops, ops with subgraphs or sequences.
constexpr std::array<std::string_view, 40> kPureOps{
    "Abs",       "Add",   "And",     "Cast",      "Ceil",      "Concat",     "Constant",  "ConstantOfShape",
    "Div",       "Equal", "Expand",  "Flatten",   "Floor",     "Gather",     "Greater",   "GreaterOrEqual",
    "Identity",  "Less",  "LessOrEqual", "Max",   "Min",       "Mod",        "Mul",       "Neg",
    "Not",       "Or",    "Pow",     "Range",     "ReduceMax", "ReduceMin",  "ReduceProd", "ReduceSum",
    "Reshape",   "Sign",  "Slice",   "Sqrt",      "Squeeze",   "Sub",        "Unsqueeze", "Where"};

// Numbers and bools only: a string tensor's bytes are std::string objects, not their text.
bool isSmallDense(const at::Tensor& t) {
  return t.defined() && t.layout() == at::kStrided && t.device().is_cpu() && !t.requires_grad() &&
         t.numel() <= SmallOpMemo::kMaxElements && t.is_contiguous() && !isStringTensor(t) &&
         (at::isIntegralType(t.scalar_type(), /*includeBool=*/true) || at::isFloatingType(t.scalar_type()));
}

// An empty tensor has no data pointer to compare (memcmp of null is undefined even for 0 bytes).
bool sameTensor(const at::Tensor& remembered, const at::Tensor& now) {
  return remembered.scalar_type() == now.scalar_type() && remembered.sizes() == now.sizes() &&
         (remembered.numel() == 0 ||
          std::memcmp(remembered.data_ptr(), now.data_ptr(), remembered.numel() * remembered.element_size()) == 0);
}

} // namespace

SmallOpMemo::SmallOpMemo(const ir::Graph& g)
    : pure_(g.numNodes(), 0), entries_(g.numNodes()), copies_(g.numValues()) {
  for (std::uint32_t n = 0; n < g.numNodes(); ++n) {
    const ir::NodeId node{n};
    if (g.kind(node) != ir::NodeKind::Op || !(g.opDomain(node).empty() || g.opDomain(node) == "ai.onnx"))
      continue;
    const std::string_view op = g.opType(node);
    pure_[node] = std::find(kPureOps.begin(), kPureOps.end(), op) != kPureOps.end();
  }
}

bool SmallOpMemo::applies(ir::NodeId node, const std::vector<at::Tensor>& operands) const {
  if (pure_.size() == 0 || !pure_[node]) // empty: the optimization is off
    return false;
  return std::all_of(operands.begin(), operands.end(), [](const at::Tensor& t) { return isSmallDense(t); });
}

const std::vector<at::Tensor>* SmallOpMemo::recall(ir::NodeId node, const std::vector<at::Tensor>& operands) const {
  const Entry& entry = entries_[node];
  if (!entry.valid || entry.operands.size() != operands.size())
    return nullptr;
  for (std::size_t i = 0; i < operands.size(); ++i)
    if (!sameTensor(entry.operands[i], operands[i]))
      return nullptr;
  return &entry.results;
}

void SmallOpMemo::remember(ir::NodeId node, const std::vector<at::Tensor>& operands,
                           const std::vector<at::Tensor>& results) {
  Entry& entry = entries_[node];
  entry.valid = false;
  if (!std::all_of(results.begin(), results.end(), [](const at::Tensor& t) { return isSmallDense(t); }))
    return;
  entry.operands.clear();
  entry.results.clear();
  for (const at::Tensor& t : operands)
    entry.operands.push_back(t.clone());
  for (const at::Tensor& t : results)
    entry.results.push_back(t.clone());
  entry.valid = true;
}

const at::Tensor* SmallOpMemo::recallCopy(ir::ValueId value, const at::Tensor& host) const {
  if (copies_.size() == 0 || !isSmallDense(host))
    return nullptr;
  const Copy& kept = copies_[value];
  return kept.device.defined() && sameTensor(kept.host, host) ? &kept.device : nullptr;
}

void SmallOpMemo::rememberCopy(ir::ValueId value, const at::Tensor& host, const at::Tensor& copy) {
  if (copies_.size() == 0) // the optimization is off
    return;
  Copy& kept = copies_[value];
  kept = {};
  if (isSmallDense(host))
    kept = {host.clone(), copy};
}

} // namespace cleave::runtime
