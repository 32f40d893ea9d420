// io/fixed_batch.h - whether an ONNX model's batch is free: the nodes of a static-batch export
// whose constant shapes hold the exported batch, so that no other row count can run.
//
// torch.onnx.export with a static batch (its default) and constant folding writes the batch into
// Reshape's shape constants (a `view(B * heads, S, d)` becomes Reshape(x, [64, 8, 64])). Such a
// model runs its exported batch only: a microbatch of other rows fails inside, at run time. This
// analysis finds those nodes before anything runs: the batched inputs' dim 0 becomes a symbol,
// onnx's own shape inference runs on that copy, and a Reshape whose data input then has a dim
// that was static before (it follows the rows) while its shape is a constant that neither infers
// (-1) nor copies (0) a dim, holds the batch.
//
// Guarantees: a model with a dynamic batch (no batched input of static dim 0) has batch -1 and
// no holders; a model with holders has at least the first one (in graph order) found; later nodes
// whose input a holder already made static again are not listed; the model file is only read.
// Complexity: linear in the model's nodes and small constants, plus, where some Reshape has a
// constant target that could hold the rows, two runs of onnx's shape inference (each in a child
// process, as on reading); large weights are never copied.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/expected.h"
#include "ir/graph.h"

namespace cleave::io {

struct BatchHolder {
  std::string node, opType;
  std::vector<std::int64_t> shape; // the constant it holds the batch in
};

struct FixedBatch {
  std::int64_t batch = -1;                // the rows the export fixed; -1: the batch is free
  std::vector<std::string> batchedInputs; // inputs whose dim 0 is that batch
  std::vector<BatchHolder> holders;
  bool batchIsFree() const { return holders.empty(); }
};

// The model at `path`. `batch` >= 0: the rows to look for (a pipeline stage's inputs whose dim 0
// is the whole model's batch); -1: the first graph input's static dim 0. A model of an opset below
// 11 (converted on reading, from before exporters folded shapes) is taken as free. Fails like
// readOnnx on a model that cannot be read.
[[nodiscard]] Expected<FixedBatch> findFixedBatch(const std::string& path, std::int64_t batch = -1);

// The same answer for the model at `path` as read into `asRead` (ShapeInference::Auto, not
// simplified): the batch and its inputs from the graph's input types, and, where no Reshape has a
// constant target that could hold the rows, no holders without running inference at all (a
// million elementwise nodes: the time of a scan). Otherwise findFixedBatch(path). O(N) plus the
// Reshape targets' bytes.
[[nodiscard]] Expected<FixedBatch> findFixedBatch(const std::string& path, const ir::Graph& asRead);

// One line for a refusal: the first holder, the batch it holds, and how to export instead.
std::string describeFixedBatch(const FixedBatch& fixed);

} // namespace cleave::io
