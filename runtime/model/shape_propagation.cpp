#include "runtime/model/shape_propagation.h"

#include "ir/extract.h"
#include "runtime/engine/executor.h"

namespace cleave::runtime {

namespace {
bool fullyStatic(const ir::Graph& graph, ir::ValueId value) {
  if (graph.valueKind(value) != ir::ValueKind::Tensor || graph.dtype(value) == ir::DType::Undefined ||
      !graph.rankKnown(value))
    return false;
  for (const ir::DimEntry& dim : graph.dims(value))
    if (dim.extent < 0)
      return false;
  return true;
}
} // namespace

Expected<ShapePropagation> propagateShapes(const ir::Graph& graph, const TensorMap& inputs) {
  // The executor owns its graph; this one outlives it, so share without ownership.
  std::shared_ptr<const ir::Graph> shared(&graph, [](const ir::Graph*) {});
  CLEAVE_TRY(std::unique_ptr<Executor> executor, Executor::create(shared));
  IdVector<ir::ValueId, ir::ValueType> types(graph.numValues());
  for (std::uint32_t v = 0; v < graph.numValues(); ++v)
    types[ir::ValueId{v}] = graph.valueType(ir::ValueId{v});
  std::size_t completed = 0;
  Executor::Observer record = [&](ir::ValueId value, const at::Tensor& tensor) {
    ir::DType dtype = dtypeOf(tensor.scalar_type());
    if (dtype == ir::DType::Undefined)
      return;
    if (!fullyStatic(graph, value))
      ++completed;
    types[value] = ir::ValueType::tensor(dtype, tensor.sizes().vec());
  };
  CLEAVE_TRY(TensorMap outputs, executor->run(inputs, nullptr, &record));
  (void)outputs;
  // The whole graph rebuilt with the observed types.
  std::vector<ir::NodeId> callable;
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n)
    if (graph.isCallable(ir::NodeId{n}))
      callable.push_back(ir::NodeId{n});
  std::vector<ir::ValueId> graphInputs;
  for (ir::NodeId input : graph.inputNodes())
    graphInputs.push_back(graph.outputs(input)[0]);
  CLEAVE_TRY(ir::Graph typed, ir::extractSubgraph(graph, {graph.modelInfo().graphName, callable, graphInputs,
                                                          graph.graphOutputs(), &types}));
  return ShapePropagation{std::move(typed), completed};
}

} // namespace cleave::runtime
