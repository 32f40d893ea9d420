// io/fx.h - FX-graph JSON (schema "cleave.fx_graph", documented in docs/fx-graph-json.md,
// written by tools/cleave_fx.py) into cleave's IR.
//
// Mapping: placeholder -> Input, get_attr -> Parameter, call_function -> Op, call_module ->
// ModuleCall, call_method -> MethodCall, output -> Output. Each node's value has the node's name;
// operands are FX's all_input_nodes (unique, in argument order); the non-node parts of args and
// kwargs are kept as JSON attributes "args" and "kwargs"; opType is torch's get_node_target.
// Complexity: O(file size) to parse, O(V + E) to build.
#pragma once

#include <string>

#include "base/expected.h"
#include "ir/graph.h"

namespace cleave::io {

inline constexpr const char* kFxSchema = "cleave.fx_graph";
inline constexpr int kFxSchemaVersion = 1;

// Fails: NotFound, ParseError (not JSON, another schema or version, missing fields, unknown
// op or dtype, users that disagree with inputs), InvalidGraph (dangling names, cycles).
[[nodiscard]] Expected<ir::Graph> readFxGraph(const std::string& path);
[[nodiscard]] Expected<ir::Graph> parseFxGraph(std::string_view text, const std::string& sourceName);

} // namespace cleave::io
