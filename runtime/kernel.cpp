#include "runtime/kernel.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <ATen/Parallel.h>

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

void configureThreads() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("OMP_NUM_THREADS"))
      return;
    unsigned threads = std::thread::hardware_concurrency();
    if (threads > 0 && at::get_num_threads() < static_cast<int>(threads))
      at::set_num_threads(static_cast<int>(threads));
  });
}

at::Tensor linear(KernelContext& c, const at::Tensor& x, const at::Tensor& weight, bool weightIsNK,
                  const at::Tensor& bias) {
  bool onednn = at::hasMKLDNN() && x.device().is_cpu() && x.scalar_type() == at::kFloat &&
                weight.scalar_type() == at::kFloat && weight.dim() == 2 && x.dim() >= 1 && x.numel() > 0 &&
                (!bias.defined() || (bias.scalar_type() == at::kFloat && bias.dim() == 1));
  if (!onednn) {
    at::Tensor product = at::matmul(x, weightIsNK ? weight.t() : weight);
    return bias.defined() ? product + bias : product;
  }
  KernelCache* cache = c.cache();
  at::Tensor packed;
  if (cache && cache->derived.defined() && cache->source.is_same(weight)) {
    packed = cache->derived;
  } else {
    packed = (weightIsNK ? weight : weight.t()).contiguous().to_mkldnn();
    if (cache) { // the source stays referenced, so its identity cannot be reused by another tensor
      cache->source = weight;
      cache->derived = packed;
    }
  }
  std::int64_t k = x.size(-1), n = packed.size(0);
  std::vector<std::int64_t> shape = x.sizes().vec();
  shape.back() = n;
  at::Tensor rows = x.reshape({-1, k}).contiguous().to_mkldnn();
  at::Tensor out = bias.defined() ? at::mkldnn_linear(rows, packed, bias.contiguous().to_mkldnn())
                                  : at::mkldnn_linear(rows, packed, c10::nullopt);
  return out.to_dense().reshape(shape);
}

at::Tensor batchedMatmul(const at::Tensor& a, const at::Tensor& b) {
  bool onednn = at::hasMKLDNN() && a.device().is_cpu() && b.device().is_cpu() && a.scalar_type() == at::kFloat &&
                b.scalar_type() == at::kFloat && a.dim() >= 3 && b.dim() >= 3 && a.numel() > 0 && b.numel() > 0;
  if (!onednn)
    return at::matmul(a, b);
  // Broadcast the batch dims, then one oneDNN product per batch entry.
  std::vector<std::int64_t> batchA(a.sizes().begin(), a.sizes().end() - 2), batchB(b.sizes().begin(), b.sizes().end() - 2);
  std::vector<std::int64_t> batch = at::infer_size(batchA, batchB);
  std::int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1), count = 1;
  for (std::int64_t d : batch)
    count *= d;
  std::vector<std::int64_t> shapeA = batch, shapeB = batch;
  shapeA.insert(shapeA.end(), {m, k});
  shapeB.insert(shapeB.end(), {k, n});
  at::Tensor left = a.expand(shapeA).reshape({count, m, k}), right = b.expand(shapeB).reshape({count, k, n});
  std::vector<at::Tensor> products;
  products.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i)
    products.push_back(at::mkldnn_linear(left[i].contiguous().to_mkldnn(), right[i].t().contiguous().to_mkldnn(),
                                         c10::nullopt)
                           .to_dense());
  std::vector<std::int64_t> shape = batch;
  shape.insert(shape.end(), {m, n});
  return at::stack(products).reshape(shape);
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

at::Tensor flattenTo2d(const at::Tensor& x, std::int64_t axis) {
  if (axis < 0)
    axis += x.dim();
  std::int64_t outer = 1;
  for (std::int64_t d = 0; d < axis; ++d)
    outer *= x.size(d);
  return x.reshape({outer, outer == 0 ? 0 : x.numel() / std::max<std::int64_t>(outer, 1)});
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
