#include "runtime/kernel.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <thread>

#include <ATen/Parallel.h>

#include "runtime/tensors.h"

namespace cleave::runtime {

const at::Tensor& KernelContext::input(std::size_t i) const {
  if (!has(i))
    throw KernelError("operand " + std::to_string(i) + " is missing");
  return inputs_[i];
}

bool KernelContext::mayOverwrite(std::size_t i) const {
  if (!has(i))
    return false;
  const at::Tensor& t = inputs_[i];
  return t.use_count() == 1 && t.layout() == at::kStrided && t.has_storage() && t.storage().use_count() == 1 &&
         !t.requires_grad();
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
                  const at::Tensor& bias, bool thenGelu) {
  std::shared_ptr<onednn::PackedProduct> uncached;
  at::Tensor out = onednn::linear(x, weight, weightIsNK, bias, thenGelu, c.cache() ? c.cache()->product : uncached);
  if (out.defined())
    return out;
  at::Tensor product = at::matmul(x, weightIsNK ? weight.t() : weight);
  if (bias.defined())
    product = product + bias;
  return thenGelu ? at::gelu(product) : product;
}

at::Tensor batchedMatmul(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor out = onednn::batchedMatmul(a, b);
  return out.defined() ? out : at::matmul(a, b);
}

at::Tensor productWeight(const KernelContext& c, std::size_t i) {
  if (c.has(i) || !c.cache() || !c.cache()->packedWeight)
    return c.input(i);
  return at::Tensor();
}

at::Tensor matmul(KernelContext& c, const at::Tensor& a, const at::Tensor& packedOrB, const at::Tensor& bias,
                  bool thenGelu) {
  at::Tensor b = packedOrB;
  if (!b.defined()) { // the weight lives packed in the node's cache
    const std::shared_ptr<const onednn::PackedWeight>& packed = c.cache()->packedWeight;
    const std::int64_t n = onednn::packedWeightDims(*packed)[1];
    const bool takesBias =
        !bias.defined() || (bias.dim() == 1 && bias.size(0) == n && bias.scalar_type() == a.scalar_type());
    if (a.dim() >= 2 && takesBias) {
      at::Tensor out = onednn::linearPacked(a, packed, bias, thenGelu, c.cache()->product);
      if (out.defined())
        return out;
    }
    b = onednn::unpackWeight(*packed);
  }
  const bool byWeight = b.dim() == 2 && a.dim() >= 2; // activations times a 2-D weight
  const bool inProduct =
      !bias.defined() || (bias.dim() == 1 && bias.size(0) == b.size(1) && bias.scalar_type() == a.scalar_type());
  if (byWeight && inProduct)
    return linear(c, a, b, false, bias, thenGelu);
  at::Tensor product = byWeight ? linear(c, a, b, false, at::Tensor()) : batchedMatmul(a, b);
  if (bias.defined())
    product = at::add(product, bias);
  return thenGelu ? at::gelu(product) : product;
}

std::vector<std::int64_t> KernelContext::ints(std::size_t i) const {
  at::Tensor values = input(i).to(at::kCPU).to(at::kLong).contiguous().flatten();
  const std::int64_t* p = values.data_ptr<std::int64_t>();
  return std::vector<std::int64_t>(p, p + values.numel());
}

void KernelTable::add(std::string opType, Kernel kernel, Layouts layouts) {
  entries_.emplace_back(std::move(opType), KernelEntry{kernel, layouts});
}

const KernelEntry* KernelTable::find(std::string_view domain, std::string_view opType) const {
  std::string key = domain.empty() || domain == "ai.onnx" ? std::string(opType)
                                                          : std::string(domain) + "::" + std::string(opType);
  auto it = std::lower_bound(entries_.begin(), entries_.end(), key,
                             [](const auto& entry, const std::string& k) { return entry.first < k; });
  return it != entries_.end() && it->first == key ? &it->second : nullptr;
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
    registerLossKernels(t);
    registerIndexKernels(t);
    registerQuantKernels(t);
    registerResizeKernels(t);
    registerRecurrentKernels(t);
    registerSignalKernels(t);
    registerSpatialKernels(t);
    registerSequenceKernels(t);
    registerTextKernels(t);
    registerRandomKernels(t);
    std::sort(t.entries_.begin(), t.entries_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return t;
  }();
  return table;
}

std::vector<std::string> missingKernels(const ir::Graph& graph) {
  std::vector<std::string> missing;
  const KernelTable& table = kernelTable();
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    ir::NodeId node{n};
    if (graph.kind(node) == ir::NodeKind::Op && !table.find(graph.opDomain(node), graph.opType(node)))
      missing.push_back(graph.target(node));
  }
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  return missing;
}

at::Tensor fixNegativeIndices(const at::Tensor& indices, std::int64_t size) {
  at::Tensor idx = indices.to(at::kLong);
  return at::where(idx < 0, idx + size, idx);
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

at::Tensor geluInMemoryOrder(const at::Tensor& x, c10::string_view approximate) {
  if (x.is_mkldnn() || x.is_contiguous() || !x.is_non_overlapping_and_dense())
    return at::gelu(x, approximate);
  std::vector<std::int64_t> memoryOrder(static_cast<std::size_t>(x.dim())); // outermost dim first
  std::iota(memoryOrder.begin(), memoryOrder.end(), 0);
  std::stable_sort(memoryOrder.begin(), memoryOrder.end(),
                   [&](std::int64_t a, std::int64_t b) { return x.stride(a) > x.stride(b); });
  const at::Tensor inOrder = x.permute(memoryOrder);
  if (!inOrder.is_contiguous())
    return at::gelu(x, approximate);
  std::vector<std::int64_t> back(memoryOrder.size());
  for (std::size_t i = 0; i < memoryOrder.size(); ++i)
    back[static_cast<std::size_t>(memoryOrder[i])] = static_cast<std::int64_t>(i);
  return at::gelu(inOrder, approximate).permute(back);
}

at::Tensor toDense(const at::Tensor& t) {
  if (!t.defined())
    return t;
  return t.is_mkldnn() ? t.to_dense() : onednn::denseFromBlocked(t);
}

bool isBlocked(const at::Tensor& t) { return t.defined() && (t.is_mkldnn() || onednn::isBlockedActivation(t)); }

Layouts atenBlockedOrDense() { return onednn::available() ? Layouts::Dense : Layouts::DenseOrBlocked; }

at::Tensor toBlocked(const at::Tensor& t) { return t.is_mkldnn() ? t : t.to_mkldnn(); }

std::int64_t channelRowStride(const at::Tensor& t) {
  if (t.dim() < 2 || t.is_mkldnn() || t.is_sparse() || (t.size(1) > 1 && t.stride(1) != 1))
    return 0;
  // Rows nest from the last spatial dim outwards to the batch dim; dims of size 1 have no say.
  std::vector<std::int64_t> outwards;
  for (std::int64_t d = t.dim() - 1; d >= 2; --d)
    outwards.push_back(d);
  outwards.push_back(0);
  std::int64_t rowStride = 0, expected = 0;
  for (std::int64_t d : outwards) {
    if (t.size(d) == 1)
      continue;
    if (rowStride == 0)
      rowStride = expected = t.stride(d);
    if (t.stride(d) != expected)
      return 0;
    expected *= t.size(d);
  }
  if (rowStride == 0)
    rowStride = t.size(1); // a single row
  return rowStride >= t.size(1) ? rowStride : 0;
}

at::Tensor reversedTimeIndex(const at::Tensor& lengths, std::int64_t steps) {
  at::Tensor t = at::arange(steps, lengths.options()).unsqueeze(1);
  at::Tensor len = lengths.unsqueeze(0);
  return at::where(t < len, len - 1 - t, t);
}

bool blockable(const at::Tensor& t) {
  // Not for autograd: mkldnn tensors and packed weights record no backward.
  return at::hasMKLDNN() && t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat && !t.requires_grad();
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
