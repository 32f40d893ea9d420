// io/onnx_functions.h - nodes of an ONNX model replaced by the bodies of the functions they call.
//
// ONNX defines many newer ops as functions of older ones (RMSNormalization, RotaryEmbedding,
// Attention, Swish, SwiGLU, Mish, AffineGrid, ...: a schema's function body, fixed or built from
// the node's types), and exporters call model-local functions (FunctionProto). A reader's client
// that cannot run such a node as one op (the runtime, for an op it has no kernel for) asks for it
// to be expanded; planning keeps every node whole, so a profile still names the op.
// Guarantees: a model with no selected node comes back as the same file, after one scan of its
// node headers (no protobuf tree is built); otherwise the model is parsed, typed by onnx's shape
// inference and inlined by onnx's inliner, both in an isolated child (base/isolated_call.h), and
// comes back as a model in memory under the same name.
// Complexity: the scan is O(model bytes outside initializer data); an expansion costs a parse of
// the model plus onnx's inliner, which runs shape inference once per context-dependent call
// (O(calls x nodes)).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "base/expected.h"
#include "base/mapped_file.h"

namespace cleave::io {

// A model's opset per domain ("" for ai.onnx, however spelled), from its top-level opset_import
// fields alone (the graph is skipped); a malformed field ends the scan. O(model's top-level fields).
std::map<std::string, std::int64_t> opsetImportsOf(std::string_view model);

// True for an op (its domain, "" for ai.onnx, and type) the caller wants expanded wherever a
// function defines it.
using ExpandFunctionFilter = std::function<bool(std::string_view domain, std::string_view opType)>;

// `file` with each top-level node whose op `wanted` selects and that calls a function (one of the
// model's own, or its ai.onnx schema's at the model's opset) replaced by that function's body.
// Fails: ParseError (the model is not a valid protobuf), Unsupported (onnx's inliner refused or
// failed: the message names the ops asked for).
[[nodiscard]] Expected<std::shared_ptr<const MappedFile>> expandFunctionNodes(const std::shared_ptr<const MappedFile>& file,
                                                                            const ExpandFunctionFilter& wanted);

} // namespace cleave::io
