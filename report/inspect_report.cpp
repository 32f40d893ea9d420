#include "report/inspect_report.h"

#include <iomanip>

#include "ir/printer.h"
#include "report/value_json.h"

namespace cleave::report {
namespace {

const char* formatName(ir::SourceFormat format) {
  switch (format) {
  case ir::SourceFormat::Onnx: return "onnx";
  case ir::SourceFormat::Fx: return "fx";
  case ir::SourceFormat::Synthetic: return "synthetic";
  }
  return "?";
}

std::string describeType(const ir::Graph& graph, ir::ValueId value) {
  ir::ValueType type = graph.valueType(value);
  if (type.kind == ir::ValueKind::Tensor)
    return std::string(ir::dtypeName(type.dtype)) + ir::formatShape(type.shape);
  return std::string(ir::valueKindName(type.kind)) +
         (type.typeName.empty() ? "" : "<" + type.typeName + ">");
}

Json nodeJson(const ir::Graph& graph, ir::NodeId node) {
  Json out;
  out["name"] = std::string(graph.name(node));
  out["op"] = std::string(ir::nodeKindName(graph.kind(node)));
  out["target"] = graph.isCallable(node) ? Json(graph.target(node)) : Json(nullptr);
  out["scope"] = std::string(graph.scope(node));
  Json inputs = Json::array();
  for (ir::ValueId value : graph.inputs(node))
    inputs.push_back(value == ir::kNoValue ? Json(nullptr) : Json(std::string(graph.valueName(value))));
  out["inputs"] = std::move(inputs);
  Json outputs = Json::array();
  for (ir::ValueId value : graph.outputs(node))
    outputs.push_back(valueJson(graph, value));
  out["outputs"] = std::move(outputs);
  out["parameter_bytes"] = graph.parameterBytes(node);
  return out;
}

} // namespace

namespace {
Json batchJson(const io::FixedBatch& batch) {
  Json holders = Json::array();
  for (const io::BatchHolder& holder : batch.holders)
    holders.push_back({{"node", holder.node}, {"op", holder.opType}, {"shape", holder.shape}});
  return {{"exported_rows", batch.batch >= 0 ? Json(batch.batch) : Json(nullptr)},
          {"free", batch.batchIsFree()},
          {"holders", std::move(holders)}};
}

void printBatchText(const io::FixedBatch& batch, std::ostream& out) {
  out << "batch:       ";
  if (batch.batch < 0)
    out << "free (no input has a static dim 0)\n";
  else if (batch.batchIsFree())
    out << batch.batch << " rows exported; free: no constant shape holds them, so microbatches of other rows run\n";
  else
    out << "fixed at " << batch.batch << " rows: " << io::describeFixedBatch(batch) << "\n";
}
} // namespace

Json inspectJson(const ir::Graph& graph, const ir::GraphStats& stats, const std::string& path,
                 const InspectOptions& options) {
  const ir::ModelInfo& info = graph.modelInfo();
  Json out;
  out["model"] = path;
  out["format"] = formatName(info.format);
  Json opsets = Json::object();
  for (const auto& [domain, version] : info.opsetImports)
    opsets[domain.empty() ? "ai.onnx" : domain] = version;
  out["opsets"] = std::move(opsets);
  if (info.convertedFromOpset)
    out["converted_from_opset"] = info.convertedFromOpset;
  out["nodes"] = stats.nodes;
  out["callable_nodes"] = stats.callableNodes;
  out["input_nodes"] = stats.inputs;
  out["parameter_nodes"] = stats.parameterNodes;
  out["edges"] = stats.edges;
  out["parameters"] = stats.parameterCount;
  out["parameter_bytes"] = stats.parameterBytes;
  out["activation_bytes"] = stats.activationBytes;
  out["unknown_size_values"] = stats.unknownSizeValues;
  out["depth"] = stats.depth;
  out["widest_level"] = {{"level", stats.widestLevel}, {"nodes", stats.widestLevelNodes}};
  Json inputs = Json::array();
  for (ir::NodeId node : graph.inputNodes())
    inputs.push_back(valueJson(graph, graph.outputs(node)[0]));
  out["inputs"] = std::move(inputs);
  Json outputs = Json::array();
  for (ir::ValueId value : graph.graphOutputs())
    outputs.push_back(valueJson(graph, value));
  out["outputs"] = std::move(outputs);
  Json ops = Json::object();
  std::size_t shown = 0;
  for (const ir::OpCount& op : stats.opHistogram) {
    if (options.topOps && shown++ == options.topOps)
      break;
    ops[op.target] = op.count;
  }
  out["op_histogram"] = std::move(ops);
  if (options.missingKernels)
    out["runtime_missing_ops"] = *options.missingKernels;
  if (options.batch)
    out["batch"] = batchJson(*options.batch);
  else if (!options.batchUnknown.empty())
    out["batch"] = {{"free", nullptr}, {"unknown", options.batchUnknown}};
  if (options.includeNodes) {
    Json nodes = Json::array();
    for (std::uint32_t n = 0; n < graph.numNodes(); ++n)
      nodes.push_back(nodeJson(graph, ir::NodeId{n}));
    out["node_list"] = std::move(nodes);
  }
  return out;
}

void printInspectText(const ir::Graph& graph, const ir::GraphStats& stats, const std::string& path,
                      const InspectOptions& options, std::ostream& out) {
  const ir::ModelInfo& info = graph.modelInfo();
  out << "model:       " << path << " (" << formatName(info.format);
  for (const auto& [domain, version] : info.opsetImports)
    out << ", opset " << (domain.empty() ? "ai.onnx" : domain) << " " << version;
  if (info.convertedFromOpset)
    out << " (converted from opset " << info.convertedFromOpset << ")";
  if (!info.producerName.empty())
    out << ", from " << info.producerName
        << (info.producerVersion.empty() ? "" : " " + info.producerVersion);
  out << ")\n";
  out << "nodes:       " << stats.nodes << " (" << stats.inputs << " inputs, " << stats.parameterNodes
      << " parameter nodes, " << stats.callableNodes << " ops, 1 output)\n";
  out << "edges:       " << stats.edges << "\n";
  out << "parameters:  " << stats.parameterCount << " tensors, " << formatBytes(stats.parameterBytes)
      << " (" << stats.parameterBytes << " bytes)\n";
  out << "activations: " << formatBytes(stats.activationBytes) << " (" << stats.activationBytes
      << " bytes over op outputs";
  if (stats.unknownSizeValues)
    out << "; " << stats.unknownSizeValues << " values of unknown size";
  out << ")\n";
  out << "depth:       " << stats.depth << " ops on the longest path\n";
  out << "widest:      " << stats.widestLevelNodes << " ops at level " << stats.widestLevel << "\n";
  out << "inputs:\n";
  for (ir::NodeId node : graph.inputNodes())
    out << "  " << graph.name(node) << "  " << describeType(graph, graph.outputs(node)[0]) << "\n";
  out << "outputs:\n";
  for (ir::ValueId value : graph.graphOutputs())
    out << "  " << graph.valueName(value) << "  " << describeType(graph, value) << "\n";
  out << "ops:\n";
  std::size_t shown = 0;
  for (const ir::OpCount& op : stats.opHistogram) {
    if (options.topOps && shown++ == options.topOps) {
      out << "  ... " << stats.opHistogram.size() - options.topOps << " more op types\n";
      break;
    }
    out << "  " << std::left << std::setw(40) << op.target << std::right << std::setw(8) << op.count << "\n";
  }
  if (options.missingKernels) {
    out << "runtime: ";
    if (options.missingKernels->empty())
      out << "a kernel for every op\n";
    for (std::size_t i = 0; i < options.missingKernels->size(); ++i)
      out << (i ? ", " : "no kernel for ") << (*options.missingKernels)[i]
          << (i + 1 == options.missingKernels->size() ? "\n" : "");
  }
  if (options.batch)
    printBatchText(*options.batch, out);
  else if (!options.batchUnknown.empty())
    out << "batch:       not analysed (" << options.batchUnknown << ")\n";
  if (options.includeNodes) {
    out << "\n";
    ir::printGraph(graph, out);
  }
}

} // namespace cleave::report
