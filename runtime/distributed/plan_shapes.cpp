#include "runtime/distributed/plan_shapes.h"

namespace cleave::runtime::distributed {

std::int64_t ShapeClasses::classOf(const TensorMap& inputs) {
  std::vector<std::int64_t> signature;
  for (const auto& [name, tensor] : inputs) { // a std::map: name order
    signature.push_back(tensor.dim());
    signature.insert(signature.end(), tensor.sizes().begin(), tensor.sizes().end());
  }
  return classes_.try_emplace(std::move(signature), static_cast<std::int64_t>(classes_.size())).first->second;
}

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
    if (tensor.dim() > 0 && type->shape[0].extent >= 0 && type->shape[0].extent != tensor.size(0))
      symbols.rowsDifferFromExport = true;
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

namespace {
// The ATen dtype of a plan tensor value with a known rank, if it has one.
std::optional<at::ScalarType> tensorType(const plan::PlanFileValue* type) {
  if (!type || type->kind != "tensor" || !type->rankKnown)
    return std::nullopt;
  std::optional<ir::DType> dtype = ir::parseDTypeName(type->dtype);
  Expected<at::ScalarType> scalar = dtype ? scalarTypeOf(*dtype) : Expected<at::ScalarType>(Error(ErrorCode::Unsupported));
  return scalar ? std::optional<at::ScalarType>(*scalar) : std::nullopt;
}
} // namespace

Status PlanShapes::checkRows(const std::string& name, const at::Tensor& tensor) const {
  const plan::PlanFileValue* type = value(name);
  std::optional<at::ScalarType> scalar = tensorType(type);
  if (!scalar)
    return {};
  if (*scalar != tensor.scalar_type())
    return Error(ErrorCode::InvalidArgument) << "data '" << name << "' is " << tensor.scalar_type()
                                             << ", the plan's input " << type->dtype;
  const std::vector<plan::PlanFileDim>& dims = type->shape;
  if (static_cast<std::int64_t>(dims.size()) != tensor.dim())
    return Error(ErrorCode::InvalidArgument) << "data '" << name << "' has " << tensor.dim()
                                             << " dims, the plan's input " << dims.size();
  for (std::size_t d = 1; d < dims.size(); ++d)
    if (dims[d].extent >= 0 && dims[d].extent != tensor.size(static_cast<std::int64_t>(d)))
      return Error(ErrorCode::InvalidArgument) << "data '" << name << "' has " << tensor.size(static_cast<std::int64_t>(d))
                                               << " in dim " << d << ", the plan's input " << dims[d].extent;
  return {};
}

std::optional<MessageShape> PlanShapes::shapeOf(const std::string& name, const SymbolSizes& symbols) const {
  const plan::PlanFileValue* type = value(name);
  std::optional<at::ScalarType> scalar = tensorType(type);
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
  shape.declared = !symbols.rowsDifferFromExport;
  return shape;
}

} // namespace cleave::runtime::distributed
