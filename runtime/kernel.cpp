#include "runtime/kernel.h"

#include <algorithm>

#include "runtime/tensors.h"

namespace cleave::runtime {

const at::Tensor& KernelContext::input(std::size_t i) const {
  if (!has(i))
    throw KernelError("operand " + std::to_string(i) + " is missing");
  return inputs_[i];
}

bool KernelContext::outputUsed(std::size_t i) const {
  auto outputs = graph_.outputs(node_);
  return i < outputs.size() && !graph_.users(outputs[i]).empty();
}

std::int64_t KernelContext::intAttr(std::string_view name, std::int64_t fallback) const {
  const ir::Attribute* attr = attribute(name);
  return attr && attr->kind == ir::AttrKind::Int ? attr->intValue : fallback;
}

float KernelContext::floatAttr(std::string_view name, float fallback) const {
  const ir::Attribute* attr = attribute(name);
  return attr && attr->kind == ir::AttrKind::Float ? static_cast<float>(attr->floatValue) : fallback;
}

std::string KernelContext::stringAttr(std::string_view name, std::string fallback) const {
  const ir::Attribute* attr = attribute(name);
  return attr && attr->kind == ir::AttrKind::String ? attr->text : fallback;
}

std::vector<std::int64_t> KernelContext::intsAttr(std::string_view name, std::vector<std::int64_t> fallback) const {
  const ir::Attribute* attr = attribute(name);
  return attr && attr->kind == ir::AttrKind::Ints ? attr->ints : fallback;
}

std::vector<float> KernelContext::floatsAttr(std::string_view name) const {
  const ir::Attribute* attr = attribute(name);
  std::vector<float> values;
  if (attr && attr->kind == ir::AttrKind::Floats)
    for (double v : attr->floats)
      values.push_back(static_cast<float>(v));
  return values;
}

at::Tensor KernelContext::tensorAttr(std::string_view name) const {
  const ir::Attribute* attr = attribute(name);
  if (!attr || attr->kind != ir::AttrKind::Tensor)
    return at::Tensor();
  Expected<at::Tensor> tensor = tensorFromProto(attr->text, "attribute '" + std::string(name) + "'");
  if (!tensor)
    throw KernelError(tensor.error().message());
  return *tensor;
}

std::vector<std::int64_t> KernelContext::ints(std::size_t i) const {
  at::Tensor values = input(i).to(at::kCPU).to(at::kLong).contiguous().flatten();
  const std::int64_t* p = values.data_ptr<std::int64_t>();
  return std::vector<std::int64_t>(p, p + values.numel());
}

void KernelTable::add(std::string opType, Kernel kernel) { entries_.emplace_back(std::move(opType), kernel); }

Kernel KernelTable::find(std::string_view domain, std::string_view opType) const {
  std::string key = domain.empty() || domain == "ai.onnx" ? std::string(opType)
                                                          : std::string(domain) + "::" + std::string(opType);
  auto it = std::lower_bound(entries_.begin(), entries_.end(), key,
                             [](const auto& entry, const std::string& k) { return entry.first < k; });
  return it != entries_.end() && it->first == key ? it->second : nullptr;
}

std::vector<std::string> KernelTable::names() const {
  std::vector<std::string> names;
  for (const auto& entry : entries_)
    names.push_back(entry.first);
  return names;
}

const KernelTable& kernelTable() {
  static const KernelTable table = [] {
    KernelTable t;
    registerElementwiseKernels(t);
    registerShapeKernels(t);
    registerNnKernels(t);
    registerReduceKernels(t);
    registerControlKernels(t);
    std::sort(t.entries_.begin(), t.entries_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return t;
  }();
  return table;
}

std::int64_t normalizeAxis(std::int64_t axis, std::int64_t rank) {
  std::int64_t fixed = axis < 0 ? axis + rank : axis;
  if (fixed < 0 || fixed >= std::max<std::int64_t>(rank, 1))
    throw KernelError("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return fixed;
}

at::ScalarType onnxScalarType(std::int64_t onnxDtype) {
  std::optional<ir::DType> dtype = ir::dtypeFromOnnx(static_cast<int>(onnxDtype));
  if (!dtype)
    throw KernelError("unknown dtype code " + std::to_string(onnxDtype));
  Expected<at::ScalarType> type = scalarTypeOf(*dtype);
  if (!type)
    throw KernelError(type.error().message());
  return *type;
}

} // namespace cleave::runtime
