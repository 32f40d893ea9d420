// report/value_json.h - how every report describes one value of a graph. O(rank).
#pragma once

#include <string>

#include "base/json.h"
#include "ir/graph.h"

namespace cleave::report {

// {"name": ..., "kind": "tensor", "dtype": "f32", "shape": [4, "batch", null], "bytes": 64}
Json valueJson(const ir::Graph& graph, ir::ValueId value);

} // namespace cleave::report
