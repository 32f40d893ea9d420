#include "runtime/training/trainable_set.h"

#include <set>
#include <string>

namespace cleave::runtime {

TrainableSet trainableSet(std::span<const ir::Graph* const> graphs) {
  TrainableSet set;
  std::set<std::string> counted;
  for (const ir::Graph* graph : graphs) {
    set.defaultRule = set.defaultRule || !graph->modelInfo().buffersListed;
    for (std::uint32_t p = 0; p < graph->numParameters(); ++p) {
      const ir::Parameter& param = graph->parameter(ir::ParamId{p});
      if (graph->storageOf(ir::ParamId{p}) != ir::ParamId{p} || !counted.insert(param.name).second)
        continue;
      if (param.isBuffer())
        ++set.fixed[param.fixed];
      else if (!ir::isFloating(param.dtype))
        ++set.integer;
      else {
        ++set.trains;
        set.trainedBytes += param.bytes;
      }
    }
  }
  return set;
}

} // namespace cleave::runtime
