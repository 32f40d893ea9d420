// io/fixed_parameters.h - which of an ONNX model's tensors train, written where ONNX says nothing.
//
// ONNX does not tell a module's parameters from its registered buffers: both are initializers. A
// model's metadata entry `cleave.fixed_parameters` does (docs/distributed.md, "What trains"):
//   {"version": 1, "buffers_listed": true, "fixed": {"rope.inv_freq": "buffer", ...}}
// and, for a model whose merged parameters could not be told apart (ir::ModelInfo::untrainable),
// "untrainable": the reason training refuses it.
// with a reason of ir::kFixedReasons for each tensor held fixed. tools/cleave_onnx.py writes it
// from the PyTorch module (named_buffers, parameters with requires_grad=False) beside an export;
// cleave writes it into every model it writes (the stages of a plan, a split's submodules), so
// that values its folding made stay fixed when the files are read again.
// Without the entry the default rule decides: every floating initializer trains except Constants,
// a normalization's running statistics and folded values; a buffer exported as an initializer
// would train, and `cleave train` says so.
//
// Guarantees: reading marks each listed tensor that the model has (a listed name it lacks is
// skipped: an exporter may fold a buffer away) and keeps a reason already known (a Constant stays
// one); writing lists every fixed tensor by name in sorted order (the same graph gives the same
// bytes), except Constant nodes and running statistics, which reading finds again by the nodes
// that hold and read them (a constant written as an initializer is listed).
// Complexity: linear in the entry's size and the graph's parameters.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>

#include "base/expected.h"
#include "ir/builder.h"
#include "ir/graph.h"
#include "io/onnx.h"

namespace cleave::io {

inline constexpr std::string_view kFixedParametersKey = "cleave.fixed_parameters";

// What torch.onnx's dynamo exporter notes (the signature's kinds, folds, merged parameters) is
// read by io/exporter_signature.h.

// Applies the model's own entry (in builder.modelInfo().metadata), if any: marks its tensors and
// sets ModelInfo::buffersListed; then `patterns` freeze the floating tensors that still train
// and match a --frozen pattern or, given --trainable, none of those. Fails: ParseError naming the
// key (not the schema above, an unknown reason), InvalidArgument (a pattern that matches no
// floating tensor: a misspelt name would otherwise change nothing).
Status applyFixedParameters(ir::GraphBuilder& builder, const FixedPatterns& patterns = {});

// The names the model's own entry holds fixed (empty without one, or for an entry that is not
// well formed: applyFixedParameters reports that).
std::unordered_set<std::string> listedFixedTensors(const ir::ModelInfo& info);

// The entry's value for `graph`; none when the graph neither lists its buffers nor holds any
// tensor fixed but Constants and running statistics.
std::optional<std::string> fixedParametersEntry(const ir::Graph& graph);

} // namespace cleave::io
