// split/preview.h - what a split costs at its seams (torch's split_preview): per submodule the
// bytes it receives and sends, and for each accelerator submodule the queries per second a
// host link of the given bandwidth allows when every call moves max(in, out) bytes across it.
// The slowest acc submodule bounds the whole model (the bottleneck). Values that are not
// tensors crossing an acc submodule's seam are warned about (lowering may reject them).
// Complexity: O(boundary values).
#pragma once

#include <string>
#include <vector>

#include "plan/materialize.h"

namespace cleave::split {

struct SubmodulePreview {
  std::int64_t inputBytes = 0, outputBytes = 0; // unknown sizes count 0
  double maxQps = 0.0;                          // acc submodules only
  std::vector<std::string> warnings;            // acc submodules only
};

struct SplitPreview {
  double linkBytesPerSecond = 0.0;
  std::vector<SubmodulePreview> submodules; // plan order
  double maxQps = 0.0;    // the model's bound: the smallest acc submodule's, else the link's
  std::string bottleneck; // the acc submodule that sets it; empty when none
};

SplitPreview previewSplit(const ir::Graph& graph, const plan::CutPlan& plan,
                          const std::vector<plan::Boundary>& boundaries, double linkBytesPerSecond);

} // namespace cleave::split
