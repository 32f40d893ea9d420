// report/inspect_report.h - what `cleave inspect` prints, as text and as JSON.
// Complexity: linear in the graph (plus sorting the op histogram).
#pragma once

#include <optional>
#include <ostream>
#include <string>

#include "base/json.h"
#include "io/fixed_batch.h"
#include "ir/analysis.h"

namespace cleave::report {

struct InspectOptions {
  bool includeNodes = false; // one entry per node (JSON) or the IR text form (text)
  std::size_t topOps = 0;    // 0: every op type in the histogram
  // Op targets the ATen runtime has no kernel for (ONNX models; the CLI asks the runtime), sorted.
  std::optional<std::vector<std::string>> missingKernels;
  // Whether the batch is free (io/fixed_batch.h; ONNX models, unless shape inference is off).
  std::optional<io::FixedBatch> batch;
  std::string batchUnknown; // why the analysis could not run (then `batch` is empty)
};

Json inspectJson(const ir::Graph& graph, const ir::GraphStats& stats, const std::string& path,
                 const InspectOptions& options);
void printInspectText(const ir::Graph& graph, const ir::GraphStats& stats, const std::string& path,
                      const InspectOptions& options, std::ostream& out);

} // namespace cleave::report
