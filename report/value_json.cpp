#include "report/value_json.h"

#include "base/json.h"

namespace cleave::report {

Json valueJson(const ir::Graph& graph, ir::ValueId value) {
  Json out;
  out["name"] = std::string(graph.valueName(value));
  out["kind"] = std::string(ir::valueKindName(graph.valueKind(value)));
  if (graph.valueKind(value) == ir::ValueKind::Tensor) {
    out["dtype"] = std::string(ir::dtypeName(graph.dtype(value)));
    if (graph.rankKnown(value)) {
      Json shape = Json::array();
      for (const ir::DimEntry& dim : graph.dims(value)) {
        if (dim.extent >= 0)
          shape.push_back(dim.extent);
        else if (dim.symbol != 0)
          shape.push_back(std::string(graph.symbolName(dim.symbol)));
        else
          shape.push_back(nullptr);
      }
      out["shape"] = std::move(shape);
    } else {
      out["shape"] = nullptr;
    }
  }
  std::int64_t bytes = graph.bytes(value);
  out["bytes"] = bytes >= 0 ? Json(bytes) : Json(nullptr);
  return out;
}


} // namespace cleave::report
