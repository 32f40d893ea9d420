// report/json_util.h - JSON pieces every report shares. ordered_json keeps insertion order, so
// reports are byte-for-byte deterministic.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "ir/graph.h"

namespace cleave::report {

using Json = nlohmann::ordered_json;

// {"name": ..., "kind": "tensor", "dtype": "f32", "shape": [4, "batch", null], "bytes": 64}
Json valueJson(const ir::Graph& graph, ir::ValueId value);
// Two-space indented JSON and a final newline.
std::string dumpJson(const Json& json);

} // namespace cleave::report
