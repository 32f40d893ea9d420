#include "split/preview.h"

#include <algorithm>

namespace cleave::split {
using ir::ValueId;

namespace {
std::int64_t bytesOf(const ir::Graph& graph, const std::vector<ValueId>& values, const char* side,
                     std::vector<std::string>& warnings) {
  std::int64_t bytes = 0;
  for (ValueId value : values) {
    if (graph.valueKind(value) != ir::ValueKind::Tensor)
      warnings.push_back(std::string(side) + " " + std::string(graph.valueName(value)) + " is not a tensor");
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
    sub.inputBytes = bytesOf(graph, boundaries[s].inputs, "input", warnings);
    sub.outputBytes = bytesOf(graph, boundaries[s].outputs, "output", warnings);
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

} // namespace cleave::split
