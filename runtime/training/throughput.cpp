#include "runtime/training/throughput.h"

#include <algorithm>
#include <string>
#include <utility>

namespace cleave::runtime {
namespace {

// A value's elements per row: dims known, or the rows' symbol (counted as 1); none otherwise.
std::optional<double> elementsPerRow(const ir::Graph& graph, ir::ValueId value, std::string_view rows,
                                     std::size_t from = 0) {
  if (value == ir::kNoValue || !graph.rankKnown(value))
    return std::nullopt;
  double elements = 1.0;
  std::span<const ir::DimEntry> dims = graph.dims(value);
  for (std::size_t d = from; d < dims.size(); ++d) {
    if (dims[d].extent >= 0)
      elements *= static_cast<double>(dims[d].extent);
    else if (rows.empty() || dims[d].symbol == 0 || graph.symbolName(dims[d].symbol) != rows)
      return std::nullopt;
  }
  return elements;
}

// 2 M N K per row for MatMul and Gemm, 2 x outputs x (weight elements / Cout) for convolutions.
std::optional<double> productFlopsPerRow(const ir::Graph& graph, ir::NodeId node, std::string_view rows) {
  std::span<const ir::ValueId> inputs = graph.inputs(node);
  std::optional<double> outputs = elementsPerRow(graph, graph.outputs(node)[0], rows);
  if (!outputs || inputs.size() < 2)
    return std::nullopt;
  std::string_view op = graph.opType(node);
  std::optional<double> perOutput;
  if (op == "MatMul" || op == "Gemm") { // K: the first operand's last dim (its first under Gemm's transA)
    const ir::Attribute* transA = op == "Gemm" ? graph.findAttribute(node, "transA") : nullptr;
    std::span<const ir::DimEntry> a = graph.dims(inputs[0]);
    const std::size_t k = transA && transA->intValue ? 0 : a.size() - 1;
    if (!a.empty() && a[k].extent >= 0)
      perOutput = static_cast<double>(a[k].extent);
  } else { // Conv, ConvTranspose: the weight's elements per output channel
    std::optional<double> weight = elementsPerRow(graph, inputs[1], "", 1);
    perOutput = weight;
  }
  if (!perOutput)
    return std::nullopt;
  return 2.0 * *outputs * *perOutput;
}

bool isProduct(std::string_view op) { return op == "MatMul" || op == "Gemm" || op == "Conv" || op == "ConvTranspose"; }

// The symbol of the first graph input's dim 0 ("" when static: then the rows are its extent).
std::pair<std::string, std::int64_t> rowsOf(const ir::Graph& graph) {
  for (ir::NodeId input : graph.inputNodes()) {
    const ir::ValueId value = graph.outputs(input)[0];
    if (!graph.rankKnown(value) || graph.dims(value).empty())
      continue;
    const ir::DimEntry dim = graph.dims(value)[0];
    if (dim.extent >= 0)
      return {std::string(), dim.extent};
    if (dim.symbol != 0)
      return {std::string(graph.symbolName(dim.symbol)), 1};
  }
  return {std::string(), 0};
}

} // namespace

std::optional<double> trainingFlopsPerRow(std::span<const ir::Graph* const> graphs) {
  if (graphs.empty())
    return std::nullopt;
  const auto [rows, exported] = rowsOf(*graphs.front());
  if (exported <= 0)
    return std::nullopt;
  double flops = 0.0;
  for (const ir::Graph* graph : graphs)
    for (std::uint32_t n = 0; n < graph->numNodes(); ++n) {
      const ir::NodeId node{n};
      if (graph->kind(node) != ir::NodeKind::Op || !isProduct(graph->opType(node)))
        continue;
      std::optional<double> product = productFlopsPerRow(*graph, node, rows);
      if (!product)
        return std::nullopt;
      flops += *product;
    }
  if (flops <= 0.0)
    return std::nullopt;
  return 3.0 * flops / static_cast<double>(exported);
}

StepRate ThroughputMeter::endStep() {
  StepRate rate;
  rate.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  const double perSecond = rate.seconds > 0.0 ? 1.0 / rate.seconds : 0.0;
  rate.rowsPerSecond = static_cast<double>(rows_) * perSecond;
  rate.tokensPerSecond = rate.rowsPerSecond * static_cast<double>(tokensPerRow_);
  if (flopsPerRow_)
    rate.flopsPerSecond = *flopsPerRow_ * rate.rowsPerSecond;
  secondsDone_ += rate.seconds;
  ++stepsDone_;
  rate.etaSeconds = secondsDone_ / static_cast<double>(stepsDone_) * static_cast<double>(std::max<std::int64_t>(stepsLeft_ - stepsDone_, 0));
  return rate;
}

} // namespace cleave::runtime
