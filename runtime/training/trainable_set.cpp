#include "runtime/training/trainable_set.h"

#include <set>
#include <string>

#include "runtime/engine/running_statistics.h"

namespace cleave::runtime {

bool trains(const ir::Graph& graph, ir::ParamId param) {
  const ir::Parameter& p = graph.parameter(param);
  return graph.storageOf(param) == param && ir::isFloating(p.dtype) && !p.isBuffer();
}

TrainableSet trainableSet(std::span<const ir::Graph* const> graphs) {
  TrainableSet set;
  std::set<std::string> counted, updated;
  for (const ir::Graph* graph : graphs) {
    set.defaultRule = set.defaultRule || !graph->modelInfo().buffersListed;
    for (ir::ParamId statistic : updatedRunningStatistics(*graph))
      updated.insert(graph->parameter(statistic).name);
    for (std::uint32_t p = 0; p < graph->numParameters(); ++p) {
      const ir::Parameter& param = graph->parameter(ir::ParamId{p});
      if (graph->storageOf(ir::ParamId{p}) != ir::ParamId{p} || !counted.insert(param.name).second)
        continue;
      if (trains(*graph, ir::ParamId{p})) {
        ++set.trains;
        set.trainedBytes += param.bytes;
      } else if (param.isBuffer()) {
        ++set.fixed[param.fixed];
      } else {
        ++set.integer;
      }
    }
  }
  set.updated = static_cast<std::int64_t>(updated.size());
  return set;
}

} // namespace cleave::runtime
