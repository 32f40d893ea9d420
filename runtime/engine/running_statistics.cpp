#include "runtime/engine/running_statistics.h"

namespace cleave::runtime {

std::vector<ir::ParamId> updatedRunningStatistics(const ir::Graph& g) {
  std::vector<bool> updated(g.numParameters(), false);
  for (std::uint32_t n = 0; n < g.numNodes(); ++n) {
    const ir::NodeId node{n};
    if (g.kind(node) != ir::NodeKind::Op || g.opType(node) != "BatchNormalization")
      continue;
    const ir::Attribute* training = g.findAttribute(node, "training_mode");
    auto inputs = g.inputs(node);
    if (!training || training->kind != ir::AttrKind::Int || training->intValue == 0 || inputs.size() < 5)
      continue;
    for (std::size_t operand : {3u, 4u}) {
      const ir::NodeId producer = g.producer(inputs[operand]);
      if (g.kind(producer) != ir::NodeKind::Parameter)
        continue;
      const ir::ParamId owner = g.storageOf(g.parameters(producer)[0]);
      if (g.parameter(owner).fixed == ir::Fixed::RunningStatistic && ir::isFloating(g.parameter(owner).dtype))
        updated[static_cast<std::size_t>(owner)] = true;
    }
  }
  std::vector<ir::ParamId> owners;
  for (std::uint32_t p = 0; p < updated.size(); ++p)
    if (updated[p])
      owners.push_back(ir::ParamId{p});
  return owners;
}

} // namespace cleave::runtime
