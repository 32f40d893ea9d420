#include "runtime/distributed/plan_shapes.h"

namespace cleave::runtime::distributed {

PlanShapes::PlanShapes(const std::vector<plan::PlanFileValue>& values) {
  for (const plan::PlanFileValue& value : values)
    values_.emplace(value.name, value);
}

const plan::PlanFileValue* PlanShapes::value(const std::string& name) const {
  auto found = values_.find(name);
  return found == values_.end() ? nullptr : &found->second;
}

SymbolSizes PlanShapes::bind(const TensorMap& tensors) const {
  SymbolSizes symbols;
  for (const auto& [name, tensor] : tensors) {
    const plan::PlanFileValue* type = value(name);
    if (!type || !type->rankKnown || static_cast<std::int64_t>(type->shape.size()) != tensor.dim())
      continue;
    for (std::size_t d = 0; d < type->shape.size(); ++d) {
      const std::string& symbol = type->shape[d].symbol;
      if (symbol.empty())
        continue;
      const std::int64_t size = tensor.size(static_cast<std::int64_t>(d));
      auto [it, fresh] = symbols.sizes.emplace(symbol, size);
      if (!fresh && it->second != size)
        symbols.conflicting.insert(symbol);
    }
  }
  return symbols;
}

std::optional<MessageShape> PlanShapes::shapeOf(const std::string& name, const SymbolSizes& symbols) const {
  const plan::PlanFileValue* type = value(name);
  if (!type || type->kind != "tensor" || !type->rankKnown)
    return std::nullopt;
  std::optional<ir::DType> dtype = ir::parseDTypeName(type->dtype);
  if (!dtype)
    return std::nullopt;
  Expected<at::ScalarType> scalar = scalarTypeOf(*dtype);
  if (!scalar)
    return std::nullopt;
  MessageShape shape{*scalar, {}};
  for (const plan::PlanFileDim& dim : type->shape) {
    auto bound = symbols.sizes.find(dim.symbol);
    if (dim.extent >= 0)
      shape.dims.push_back(dim.extent);
    else if (!dim.symbol.empty() && bound != symbols.sizes.end() && !symbols.conflicting.count(dim.symbol))
      shape.dims.push_back(bound->second);
    else
      return std::nullopt;
  }
  return shape;
}

} // namespace cleave::runtime::distributed
