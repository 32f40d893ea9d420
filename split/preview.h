// split/preview.h - what a split costs at its seams (torch's split_preview): per submodule the
// bytes it receives and sends, and for each accelerator submodule the queries per second a
// host link of the given bandwidth allows when every call moves max(in, out) bytes across it.
// The slowest acc submodule bounds the whole model (the bottleneck). Values that are not
// tensors crossing an acc submodule's seam are warned about (lowering may reject them).
// Complexity: O(boundary values).
//
// segmentCostByOp answers which ops cost the most segments: for each op type the profile leaves on
// the CPU (not by deny or force_cpu), the submodules the same split would have if the accelerator
// also took every node of that type. Ordered by submodules saved, then op name; deterministic.
// Complexity: one split per op type considered, at most `maxOps` types (the most numerous), each
// O((V + E) log V).
#pragma once

#include <string>
#include <vector>

#include "plan/materialize.h"
#include "split/splitter.h"

namespace cleave::split {

struct SubmodulePreview {
  std::int64_t inputBytes = 0, outputBytes = 0;     // of the values whose size is known
  std::uint32_t unknownInputs = 0, unknownOutputs = 0; // values of unknown size (symbolic dims):
                                                       // the bytes, and so maxQps, leave them out
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

struct OpSegmentCost {
  std::string op;                          // as graph.target names it: "Slice", "com.microsoft::Gelu"
  std::size_t cpuNodes = 0;                // its nodes the profile leaves on the CPU
  std::size_t submodules = 0;              // the split's submodules as the profile is
  std::size_t submodulesIfSupported = 0;   // ... if the accelerator also took this op's nodes
  std::size_t saved() const { return submodules > submodulesIfSupported ? submodules - submodulesIfSupported : 0; }
};
inline constexpr std::size_t kMaxSegmentCostOps = 32;
// Fails: what splitGraph fails with (bad options).
[[nodiscard]] Expected<std::vector<OpSegmentCost>> segmentCostByOp(
    const ir::Graph& graph, const IdVector<ir::NodeId, support::Decision>& decisions, const SplitOptions& options,
    std::size_t maxOps = kMaxSegmentCostOps);

} // namespace cleave::split
