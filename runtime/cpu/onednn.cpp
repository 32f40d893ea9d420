// runtime/cpu/onednn.cpp - the oneDNN engine and what the CPU wing's oneDNN files share
// (onednn_support.h), weight copies' bytes, blocked activations, pooling and softmax; products
// are onednn_products.cpp's, convolutions onednn_convolution.cpp's.
#include "runtime/cpu/onednn_support.h"

#include <sys/mman.h>

namespace cleave::runtime::onednn {

const dnnl::engine& cpuEngine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

bool eligible(const at::Tensor& t) {
  // Not for autograd: oneDNN's direct products record no backward.
  return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided && t.scalar_type() == at::kFloat &&
         !t.requires_grad() && !isBlockedActivation(t);
}

dnnl::memory::desc describe(const at::Tensor& t) {
  return dnnl::memory::desc(Dims(t.sizes().begin(), t.sizes().end()), DataType::f32,
                            Dims(t.strides().begin(), t.strides().end()));
}

dnnl::memory view(const dnnl::memory::desc& desc, const at::Tensor& t) {
  return dnnl::memory(desc, cpuEngine(), t.data_ptr());
}

void execute(const dnnl::primitive& primitive, const std::unordered_map<int, dnnl::memory>& args) {
  dnnl::stream stream(cpuEngine());
  primitive.execute(stream, args);
  stream.wait();
}

namespace {
std::atomic<std::size_t> heldBytes{0};
} // namespace

HeldWeight holdWeight(const dnnl::memory::desc& desc) {
  constexpr std::size_t kAlignment = 64, kHugePage = std::size_t{2} << 20;
  const std::size_t bytes = std::max(kAlignment, (desc.get_size() + kAlignment - 1) / kAlignment * kAlignment);
  // A copy of 2 MiB or more starts on a huge page and asks for huge pages over its whole ones (the
  // tail stays in small pages, so no memory is added): a few-row product streams its weight once a
  // run, and the hardware prefetcher stops at each 4 KiB page (ViT-B/16 at 64x64, 5 rows: 27.5
  // against 28.7 ms, 8 interleaved rounds on an AVX2 EPYC). Where transparent huge pages are
  // off, the advice does nothing.
  const bool huge = bytes >= kHugePage;
  void* data = nullptr; // posix_memalign: the size need not be a multiple of the alignment
  if (posix_memalign(&data, huge ? kHugePage : kAlignment, bytes) != 0 || !data)
    throw std::bad_alloc();
  if (huge)
    madvise(data, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
  heldBytes += bytes;
  std::shared_ptr<void> owner(data, [bytes](void* freed) {
    heldBytes -= bytes;
    std::free(freed);
  });
  return {owner, dnnl::memory(desc, cpuEngine(), data)};
}

bool hasInnerBlocks(const dnnl::memory::desc& layout) {
  return layout.data.format_kind == dnnl_blocked && layout.data.format_desc.blocking.inner_nblks > 0;
}

std::size_t heldWeightBytes() { return heldBytes.load(); }

bool available() { return true; }

namespace {
// x's dims in a plain row-major layout. Not describe(x): a contiguous tensor's size-1 dims may
// carry any stride, and the source and the result (a fresh tensor, or x itself) must share one
// descriptor.
dnnl::memory::desc plainDesc(const at::Tensor& x) {
  Dims dims(x.sizes().begin(), x.sizes().end());
  if (dims.empty())
    dims.push_back(1);
  Dims strides(dims.size(), 1);
  for (std::size_t d = dims.size() - 1; d > 0; --d)
    strides[d - 1] = strides[d] * dims[d];
  return dnnl::memory::desc(dims, DataType::f32, strides);
}
} // namespace

at::Tensor softmax(const at::Tensor& x, std::int64_t axis, bool logarithm, bool inPlace) {
  if (!eligible(x) || x.numel() == 0 || x.dim() == 0 || x.dim() > DNNL_MAX_NDIMS || !x.is_contiguous() || axis < 0 ||
      axis >= x.dim())
    return {};
  try {
    const dnnl::memory::desc desc = plainDesc(x);
    dnnl::softmax_v2_forward::primitive_desc pd(
        dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_inference,
                                       logarithm ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate,
                                       desc, desc, static_cast<int>(axis)),
        cpuEngine());
    at::Tensor out = inPlace ? x : at::empty_like(x);
    execute(dnnl::softmax_v2_forward(pd), {{DNNL_ARG_SRC, view(desc, x)}, {DNNL_ARG_DST, view(desc, out)}});
    return out;
  } catch (const dnnl::error&) {
    return {};
  }
}

at::MemoryFormat channelsLast(std::int64_t rank) {
  return rank == 5 ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::ChannelsLast;
}
Tag channelsLastTag(std::int64_t rank) { return rank == 5 ? Tag::ndhwc : Tag::nhwc; }

using BlockedTensorImpl = at::OpaqueTensorImpl<BlockedData>;

const BlockedData* blockedDataOf(const at::Tensor& t) {
  if (!t.defined() || !t.key_set().has(c10::DispatchKey::PrivateUse1))
    return nullptr;
  auto* impl = dynamic_cast<BlockedTensorImpl*>(t.unsafeGetTensorImpl());
  return impl ? &impl->opaque_handle() : nullptr;
}

at::Tensor blockedActivation(at::Tensor buffer, const dnnl::memory::desc& layout, at::IntArrayRef dims) {
  const caffe2::TypeMeta dtype = buffer.dtype();
  return at::detail::make_tensor<BlockedTensorImpl>(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype,
                                                    at::Device(at::kCPU), BlockedData{std::move(buffer), layout}, dims);
}

at::Tensor bufferFor(const dnnl::memory::desc& desc) {
  return at::empty({static_cast<std::int64_t>((desc.get_size() + sizeof(float) - 1) / sizeof(float))}, at::kFloat);
}

bool isBlockedActivation(const at::Tensor& t) { return blockedDataOf(t) != nullptr; }

at::Tensor denseFromBlocked(const at::Tensor& t) {
  const BlockedData* data = blockedDataOf(t);
  if (!data)
    return t;
  if (data->channelsLastCopy.defined())
    return data->channelsLastCopy;
  at::Tensor out = at::empty(t.sizes(), at::TensorOptions(at::kFloat).memory_format(channelsLast(t.dim())));
  const dnnl::memory from = view(data->layout, data->buffer);
  const dnnl::memory to =
      view(dnnl::memory::desc(Dims(t.sizes().begin(), t.sizes().end()), DataType::f32, channelsLastTag(t.dim())), out);
  execute(dnnl::reorder(from, to), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
  data->channelsLastCopy = out;
  return out;
}

at::Tensor pool(const at::Tensor& x, PoolKind kind, const std::vector<std::int64_t>& kernel,
                const std::vector<std::int64_t>& strides, const std::vector<std::int64_t>& padBegin,
                const std::vector<std::int64_t>& padEnd, const std::vector<std::int64_t>& dilations, bool ceil,
                bool mayReturnBlocked) {
  const BlockedData* blocked = kind == PoolKind::Max ? blockedDataOf(x) : nullptr;
  if (!(eligible(x) || blocked) || (x.dim() != 4 && x.dim() != 5) || x.numel() == 0)
    return {};
  const std::size_t spatial = static_cast<std::size_t>(x.dim()) - 2;
  if (kernel.size() != spatial || strides.size() != spatial || padBegin.size() != spatial ||
      padEnd.size() != spatial || dilations.size() != spatial)
    return {};
  std::vector<std::int64_t> outDims{x.size(0), x.size(1)};
  Dims effectiveEnd(spatial), dilates(spatial);
  for (std::size_t d = 0; d < spatial; ++d) {
    const std::int64_t in = x.size(static_cast<std::int64_t>(d) + 2), span = dilations[d] * (kernel[d] - 1) + 1;
    const std::int64_t room = in + padBegin[d] + padEnd[d] - span;
    if (room < 0 || strides[d] < 1 || dilations[d] < 1 || kernel[d] < 1)
      return {};
    std::int64_t out = (room + (ceil ? strides[d] - 1 : 0)) / strides[d] + 1;
    if (ceil && (out - 1) * strides[d] >= in + padBegin[d])
      --out; // ATen's and ONNX's rule: the last window starts inside the input or its begin pad
    // The end padding oneDNN needs for that output size: more than given when rounding up.
    effectiveEnd[d] = (out - 1) * strides[d] + span - in - padBegin[d];
    if (kind == PoolKind::AverageWithPadding && effectiveEnd[d] > padEnd[d])
      return {}; // oneDNN would count cells past the end padding; ATen does not
    dilates[d] = dilations[d] - 1;
    outDims.push_back(out);
  }
  if (kind != PoolKind::Max && std::any_of(dilates.begin(), dilates.end(), [](std::int64_t d) { return d != 0; }))
    return {};
  const dnnl::algorithm algorithm = kind == PoolKind::Max                  ? dnnl::algorithm::pooling_max
                                    : kind == PoolKind::AverageWithPadding ? dnnl::algorithm::pooling_avg_include_padding
                                                                           : dnnl::algorithm::pooling_avg_exclude_padding;
  // A dense x is read in its own layout (channels-last or contiguous) into the same; a blocked
  // one in its layout, into the one oneDNN picks for the output (the same blocks).
  const at::MemoryFormat format =
      blocked || !x.is_contiguous(channelsLast(x.dim())) ? at::MemoryFormat::Contiguous : channelsLast(x.dim());
  const at::Tensor src = blocked ? blocked->buffer : x.contiguous(format);
  at::Tensor out = blocked ? at::Tensor() : at::empty(outDims, x.options().memory_format(format));
  try {
    const dnnl::memory::desc srcDesc = blocked ? blocked->layout : describe(src);
    const dnnl::memory::desc wantedDst =
        blocked ? dnnl::memory::desc(Dims(outDims.begin(), outDims.end()), DataType::f32, Tag::any) : describe(out);
    dnnl::pooling_v2_forward::primitive_desc pd(
        dnnl::pooling_v2_forward::desc(dnnl::prop_kind::forward_inference, algorithm, srcDesc, wantedDst,
                                       Dims(strides.begin(), strides.end()), Dims(kernel.begin(), kernel.end()),
                                       dilates, Dims(padBegin.begin(), padBegin.end()), effectiveEnd),
        cpuEngine());
    if (blocked && !hasInnerBlocks(pd.dst_desc()))
      return {};
    if (blocked)
      out = bufferFor(pd.dst_desc());
    execute(dnnl::pooling_v2_forward(pd), {{DNNL_ARG_SRC, view(srcDesc, src)}, {DNNL_ARG_DST, view(pd.dst_desc(), out)}});
    if (!blocked)
      return out;
    const at::Tensor pooled = blockedActivation(out, pd.dst_desc(), outDims);
    return mayReturnBlocked ? pooled : denseFromBlocked(pooled);
  } catch (const dnnl::error&) {
    return {};
  }
}

} // namespace cleave::runtime::onednn
