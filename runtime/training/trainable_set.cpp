#include "runtime/training/trainable_set.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "runtime/engine/running_statistics.h"

namespace cleave::runtime {

bool trains(const ir::Graph& graph, ir::ParamId param) {
  const ir::Parameter& p = graph.parameter(param);
  return graph.storageOf(param) == param && ir::isFloating(p.dtype) && !p.isBuffer();
}

namespace {
// Per trained tensor (by name): the module scopes of the nodes that read it, over every graph.
void addReaderScopes(const ir::Graph& graph, std::map<std::string, std::set<std::string>>& scopes) {
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    const ir::NodeId node{n};
    if (graph.kind(node) != ir::NodeKind::Parameter || graph.parameters(node).empty())
      continue;
    const ir::ParamId owner = graph.storageOf(graph.parameters(node)[0]);
    if (!trains(graph, owner))
      continue;
    std::set<std::string>& readers = scopes[graph.parameter(owner).name];
    for (ir::ValueId value : graph.outputs(node))
      for (ir::NodeId user : graph.users(value))
        if (!graph.scope(user).empty())
          readers.emplace(graph.scope(user));
  }
}

void countShared(const std::map<std::string, std::set<std::string>>& scopes, TrainableSet& set) {
  for (const auto& [name, readers] : scopes) {
    if (readers.size() < 2)
      continue;
    if (set.shared++ == 0) {
      set.sharedExample = name;
      set.sharedExampleScopes = static_cast<std::int64_t>(readers.size());
    }
  }
}
} // namespace

TrainableSet trainableSet(std::span<const ir::Graph* const> graphs) {
  TrainableSet set;
  std::set<std::string> counted, updated;
  std::map<std::string, std::set<std::string>> readerScopes;
  for (const ir::Graph* graph : graphs) {
    addReaderScopes(*graph, readerScopes);
    set.defaultRule = set.defaultRule || !graph->modelInfo().buffersListed;
    const ir::ModelInfo& info = graph->modelInfo();
    set.exporterFolds += info.exporterFolds;
    set.mergesSplit += info.exporterMergesSplit;
    for (ir::ParamId statistic : updatedRunningStatistics(*graph))
      updated.insert(graph->parameter(statistic).name);
    for (std::uint32_t p = 0; p < graph->numParameters(); ++p) {
      const ir::Parameter& param = graph->parameter(ir::ParamId{p});
      if (graph->storageOf(ir::ParamId{p}) != ir::ParamId{p} || !counted.insert(param.name).second)
        continue;
      if (trains(*graph, ir::ParamId{p})) {
        ++set.trains;
        set.trainedBytes += param.bytes;
        const bool scalar = std::all_of(param.dims.begin(), param.dims.end(), [](std::int64_t d) { return d <= 1; });
        if (!info.buffersListed && scalar && (set.possiblyConstant++ == 0 || param.name < set.possiblyConstantExample))
          set.possiblyConstantExample = param.name;
      } else if (param.isBuffer()) {
        ++set.fixed[param.fixed];
      } else {
        ++set.integer;
      }
    }
  }
  set.updated = static_cast<std::int64_t>(updated.size());
  countShared(readerScopes, set);
  return set;
}

Status checkTrainableAsExported(std::span<const ir::Graph* const> graphs) {
  for (const ir::Graph* graph : graphs)
    if (!graph->modelInfo().untrainable.empty())
      return Error(ErrorCode::InvalidArgument)
             << "the model cannot train as its module would: " << graph->modelInfo().untrainable
             << "; export it with torch.onnx.export(..., dynamo=True, optimize=False)";
  return {};
}

} // namespace cleave::runtime
