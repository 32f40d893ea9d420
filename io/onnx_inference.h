// io/onnx_inference.h - the ONNX reader's shape-inference steps, shared with the analyses that run
// onnx's inference on a changed copy of a model (io/fixed_batch.h, OnnxReadOptions::freeRows).
// Internal to io/.
//
// Guarantees: withoutLargeInitializerData copies a model's bytes without the raw data of
// initializers over 64 KiB (inference reads only their dtype and dims; small integer tensors, which
// data propagation reads, are kept); checkBeforeInference refuses what onnx's inference would
// crash on; inferTypesIsolated runs onnx's inference in a child process (a crash or hang there is a
// refused model) and returns the inputs', value_info's and outputs' types.
// Complexity: linear in the model's bytes outside large weights, plus onnx's inference.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>
#include <string_view>
#include <unordered_set>

#include "base/expected.h"
#include "ir/graph.h"

namespace cleave::io {

// False when `model` is not a well-formed message.
bool withoutLargeInitializerData(std::string_view model, std::string& out);
// `defined`: the names the enclosing scope defines (empty for a model's main graph).
Status checkBeforeInference(const onnx::GraphProto& graph, std::unordered_set<std::string> defined);
Expected<onnx::GraphProto> inferTypesIsolated(onnx::ModelProto& model);

// The graph as a model for onnx's inference (io/onnx_writer.cpp): large initializers keep their
// dtype and dims only.
Expected<onnx::ModelProto> modelForInference(const ir::Graph& graph);

struct FixedBatch;
// Makes dim 0 of every graph input with `fixed.batch` rows (-1: the first input's) a symbol and
// clears the types inference derives from it; fills `fixed`'s batch and batched inputs.
void freeTheRows(onnx::GraphProto& graph, FixedBatch& fixed);

} // namespace cleave::io
