#include "runtime/engine/parameter_readers.h"

#include <algorithm>
#include <cstdint>

namespace cleave::runtime {
using ir::NodeId;

std::vector<bool> parametersReadOnlyBy(const ir::Graph& g,
                                       const std::function<bool(NodeId user, ir::ValueId value)>& takes) {
  enum : std::uint8_t { Unread, Taken, Other };
  std::vector<std::uint8_t> readAs(g.numParameters(), Unread); // per storage owner
  for (std::uint32_t n = 0; n < g.numNodes(); ++n) {
    if (g.kind(NodeId{n}) != ir::NodeKind::Parameter)
      continue;
    const std::uint32_t owner = index(g.storageOf(g.parameters(NodeId{n})[0]));
    const ir::ValueId value = g.outputs(NodeId{n})[0];
    for (NodeId user : g.users(value))
      readAs[owner] = readAs[owner] != Other && g.kind(user) == ir::NodeKind::Op && takes(user, value) ? Taken : Other;
  }
  std::vector<bool> only(g.numParameters());
  for (std::uint32_t p = 0; p < g.numParameters(); ++p)
    only[p] = readAs[p] == Taken;
  return only;
}

bool foldsNormalizationInto(const FusionPlan& fusion, NodeId node) {
  const std::int32_t group = fusion.groupOf[node];
  if (group < 0)
    return false;
  const FusedGroup::Kind kind = fusion.groups[group].kind;
  return kind == FusedGroup::Kind::ConvBatchNorm || kind == FusedGroup::Kind::ConvBatchNormRelu ||
         kind == FusedGroup::Kind::ConvTransposeBatchNorm || kind == FusedGroup::Kind::ConvTransposeBatchNormRelu;
}

std::vector<bool> productWeightsOnly(const ir::Graph& g, const FusionPlan& fusion) {
  std::vector<bool> only = parametersReadOnlyBy(g, [&](NodeId user, ir::ValueId value) {
    const auto operands = g.inputs(user);
    const std::string_view op = g.opType(user);
    const bool product = op == "MatMul" || op == "Gemm" || op == "Conv" || op == "ConvTranspose";
    return product && g.opDomain(user).empty() && operands.size() >= 2 && operands[1] == value &&
           std::count(operands.begin(), operands.end(), value) == 1 && !foldsNormalizationInto(fusion, user);
  });
  for (std::uint32_t p = 0; p < g.numParameters(); ++p)
    only[p] = only[p] && g.parameter(ir::ParamId{p}).dtype == ir::DType::F32;
  return only;
}

} // namespace cleave::runtime
