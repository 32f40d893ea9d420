#include "split/preview.h"

#include <algorithm>
#include <map>

namespace cleave::split {
using ir::ValueId;

namespace {
// The bytes of `values` whose size is known; `unknown` counts the others.
std::int64_t bytesOf(const ir::Graph& graph, const std::vector<ValueId>& values, const char* side,
                     std::uint32_t& unknown, std::vector<std::string>& warnings) {
  std::int64_t bytes = 0;
  for (ValueId value : values) {
    if (graph.valueKind(value) != ir::ValueKind::Tensor)
      warnings.push_back(std::string(side) + " " + std::string(graph.valueName(value)) + " is not a tensor");
    else if (graph.bytes(value) < 0)
      ++unknown;
    bytes += std::max<std::int64_t>(graph.bytes(value), 0);
  }
  return bytes;
}
} // namespace

SplitPreview previewSplit(const ir::Graph& graph, const plan::CutPlan& plan,
                          const std::vector<plan::Boundary>& boundaries, double linkBytesPerSecond) {
  SplitPreview preview;
  preview.linkBytesPerSecond = linkBytesPerSecond;
  preview.maxQps = linkBytesPerSecond;
  for (std::size_t s = 0; s < plan.submodules.size(); ++s) {
    SubmodulePreview& sub = preview.submodules.emplace_back();
    std::vector<std::string> warnings;
    sub.inputBytes = bytesOf(graph, boundaries[s].inputs, "input", sub.unknownInputs, warnings);
    sub.outputBytes = bytesOf(graph, boundaries[s].outputs, "output", sub.unknownOutputs, warnings);
    if (plan.submodules[s].role != plan::SubmoduleRole::Accelerator)
      continue;
    sub.warnings = std::move(warnings);
    std::int64_t bound = std::max(sub.inputBytes, sub.outputBytes);
    sub.maxQps = bound > 0 ? linkBytesPerSecond / static_cast<double>(bound) : linkBytesPerSecond;
    if (sub.maxQps < preview.maxQps) {
      preview.maxQps = sub.maxQps;
      preview.bottleneck = plan.submodules[s].name;
    }
  }
  return preview;
}

namespace {
// The op types the profile itself leaves on the CPU, each with its nodes; the `maxOps` most
// numerous (ties: by name).
std::vector<std::pair<std::string, std::vector<ir::NodeId>>> cpuOpTypes(
    const ir::Graph& graph, const IdVector<ir::NodeId, support::Decision>& decisions, std::size_t maxOps) {
  std::map<std::string, std::vector<ir::NodeId>> byOp;
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    const ir::NodeId node{n};
    const support::Reason reason = decisions[node].reason;
    if (!graph.isCallable(node) || decisions[node].supported || reason == support::Reason::Denied ||
        reason == support::Reason::Forced || reason == support::Reason::NotCallable)
      continue;
    byOp[graph.target(node)].push_back(node);
  }
  std::vector<std::pair<std::string, std::vector<ir::NodeId>>> types(byOp.begin(), byOp.end());
  std::stable_sort(types.begin(), types.end(),
                   [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  if (types.size() > maxOps)
    types.resize(maxOps);
  return types;
}
} // namespace

Expected<std::vector<OpSegmentCost>> segmentCostByOp(const ir::Graph& graph,
                                                     const IdVector<ir::NodeId, support::Decision>& decisions,
                                                     const SplitOptions& options, std::size_t maxOps) {
  CLEAVE_TRY(SplitResult split, splitGraph(graph, decisions, options));
  const std::size_t submodules = split.plan.submodules.size();
  IdVector<ir::NodeId, support::Decision> trial = decisions;
  std::vector<OpSegmentCost> costs;
  for (const auto& [op, nodes] : cpuOpTypes(graph, decisions, maxOps)) {
    for (ir::NodeId node : nodes)
      trial[node] = support::Decision{true, support::Reason::Supported, {}};
    CLEAVE_TRY(SplitResult supported, splitGraph(graph, trial, options));
    costs.push_back({op, nodes.size(), submodules, supported.plan.submodules.size()});
    for (ir::NodeId node : nodes)
      trial[node] = decisions[node];
  }
  std::stable_sort(costs.begin(), costs.end(), [](const OpSegmentCost& a, const OpSegmentCost& b) {
    return a.saved() != b.saved() ? a.saved() > b.saved() : a.op < b.op;
  });
  return costs;
}

} // namespace cleave::split
