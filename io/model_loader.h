// io/model_loader.h - open a model file whatever its format (ONNX protobuf, FX-graph JSON, or a
// torch.export .pt2 archive).
// Guarantee: one loader for every format, with the format's own errors (one line, naming the
// file). Complexity: detection reads the first bytes; loading is the format reader's (linear).
#pragma once

#include <string>

#include "base/expected.h"
#include "io/onnx.h"
#include "ir/graph.h"

namespace cleave::io {

enum class ModelFormat : std::uint8_t { Onnx, FxJson, ExportedProgram };

// By content: a zip archive (a .pt2 from torch.export.save) is an exported program, a file whose
// first non-blank byte is '{' is FX-graph JSON, anything else ONNX.
Expected<ModelFormat> detectModelFormat(const std::string& path);

[[nodiscard]] Expected<ir::Graph> loadModel(const std::string& path, const OnnxReadOptions& options = {});

} // namespace cleave::io
