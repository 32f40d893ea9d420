#include "runtime/cpu/onednn.h"

#ifdef CLEAVE_HAVE_DNNL
#include <ATen/OpaqueTensorImpl.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <unordered_map>
#endif

namespace cleave::runtime::onednn {

#ifdef CLEAVE_HAVE_DNNL
namespace {
using Dims = dnnl::memory::dims;
using DataType = dnnl::memory::data_type;
using Tag = dnnl::memory::format_tag;

const dnnl::engine& cpuEngine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// A dense float32 CPU tensor (not one of ATen's own mkldnn tensors, nor a blocked activation).
bool eligible(const at::Tensor& t) {
  // Not for autograd: oneDNN's direct products record no backward.
  return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided && t.scalar_type() == at::kFloat &&
         !t.requires_grad() && !isBlockedActivation(t);
}

// The tensor's sizes and strides as a oneDNN memory descriptor (no copy).
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

std::atomic<std::size_t> heldBytes{0};

// A weight copy: oneDNN memory of `desc` over a buffer of its own (64-byte aligned, from the C
// library as oneDNN's own allocation would be), counted in heldWeightBytes() until the last
// holder of `owner` lets it go.
struct HeldWeight {
  std::shared_ptr<void> owner;
  dnnl::memory memory;
};
HeldWeight holdWeight(const dnnl::memory::desc& desc) {
  constexpr std::size_t kAlignment = 64;
  const std::size_t bytes = std::max(kAlignment, (desc.get_size() + kAlignment - 1) / kAlignment * kAlignment);
  void* data = std::aligned_alloc(kAlignment, bytes);
  if (!data)
    throw std::bad_alloc();
  heldBytes += bytes;
  std::shared_ptr<void> owner(data, [bytes](void* freed) {
    heldBytes -= bytes;
    std::free(freed);
  });
  return {owner, dnnl::memory(desc, cpuEngine(), data)};
}

// Whether `layout` is one of oneDNN's blocked ones (dims in blocks: nChw8c, a packed product
// weight), not a permutation of plain dims.
bool hasInnerBlocks(const dnnl::memory::desc& layout) {
  return layout.data.format_kind == dnnl_blocked && layout.data.format_desc.blocking.inner_nblks > 0;
}

} // namespace

std::size_t heldWeightBytes() { return heldBytes.load(); }

bool available() { return true; }

struct PackedWeight {
  std::int64_t k = 0, n = 0;
  std::shared_ptr<void> owner; // memory's buffer
  dnnl::memory memory;         // [K, N] in the layout the matmul primitive picks for this CPU
};

struct PackedProduct {
  at::Tensor source; // the weight it was reordered from; kept referenced, so its identity stays unique
  std::shared_ptr<const PackedWeight> packedSource; // or the packed weight it reads
  std::int64_t rows = -1;
  bool withBias = false;
  bool thenGelu = false;
  dnnl::matmul primitive;
  std::shared_ptr<void> weightOwner; // weight's buffer when it is a copy
  dnnl::memory weight;               // [K, N] stored as [N, K] rows: a copy, or the source's own bytes
};

namespace {
// Products of at most this many rows (a batch-1 classifier head) run as oneDNN's sgemm on the
// weight as it is stored. Measured (interleaved A/B, 2 threads, [1, 960] x [960, 1280] and
// [1, 1280] x [1280, 1000]): 51 us against 190 us for the matmul primitive on the [N, K] copy,
// and 50 against 60 us for OpenBLAS's gemv; at 4 rows 80-90 us against 190-210; at 16 rows
// sgemm is 1.4-2.0x slower than the primitive.
constexpr std::int64_t kFewRows = 4;

// rows [M, K] times kn (a [K, N] view whose rows or columns are unit-stride, as a stored weight
// or its transpose is) plus bias, then GELU; undefined when kn's strides do not fit.
at::Tensor fewRowsProduct(const at::Tensor& rows, const at::Tensor& kn, const at::Tensor& bias, bool thenGelu) {
  const std::int64_t m = rows.size(0), k = kn.size(0), n = kn.size(1);
  char transposeB;
  std::int64_t ldb;
  if (kn.stride(1) == 1 && kn.stride(0) >= n) { // [K, N] rows
    transposeB = 'N';
    ldb = kn.stride(0);
  } else if (kn.stride(0) == 1 && kn.stride(1) >= k) { // [N, K] rows (Gemm's transB weight)
    transposeB = 'T';
    ldb = kn.stride(1);
  } else {
    return {};
  }
  // A fresh output, the bias copied in (never bias.expand().contiguous(): for one row that is the
  // bias itself, and sgemm would accumulate into the parameter).
  at::Tensor out = at::empty({m, n}, rows.options());
  if (bias.defined())
    out.copy_(bias);
  if (dnnl_sgemm('N', transposeB, m, n, k, 1.0f, rows.data_ptr<float>(), k, kn.data_ptr<float>(), ldb,
                 bias.defined() ? 1.0f : 0.0f, out.data_ptr<float>(), n) != dnnl_success)
    return {};
  return thenGelu ? at::gelu_(out) : out; // `out` is this call's own: GELU over it, no second buffer
}
} // namespace

namespace {
// The matmul primitive for [m, k] rows times a [k, n] weight laid out as `weight` (a layout, or
// Tag::any for the primitive's choice), with a [1, n] bias and GELU when asked.
dnnl::matmul::primitive_desc productDesc(std::int64_t m, std::int64_t k, std::int64_t n, bool withBias,
                                         bool thenGelu, const dnnl::memory::desc& weight) {
  const dnnl::memory::desc srcDesc({m, k}, DataType::f32, Tag::ab), dstDesc({m, n}, DataType::f32, Tag::ab),
      biasDesc({1, n}, DataType::f32, Tag::ab);
  dnnl::post_ops post;
  if (thenGelu)
    post.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(post);
  return withBias ? dnnl::matmul::primitive_desc(dnnl::matmul::desc(srcDesc, weight, biasDesc, dstDesc), attr, cpuEngine())
                  : dnnl::matmul::primitive_desc(dnnl::matmul::desc(srcDesc, weight, dstDesc), attr, cpuEngine());
}

// Whether `packed` was made for this product's form (its weight is checked by the caller).
bool fits(const PackedProduct& packed, std::int64_t rows, bool withBias, bool thenGelu) {
  return packed.rows == rows && packed.withBias == withBias && packed.thenGelu == thenGelu;
}

// The product for `pd`, reading its weight from `given` where that is already the layout the
// primitive wants (no second copy; the caller keeps `given`'s bytes alive), else from a copy
// reordered once.
std::shared_ptr<PackedProduct> makeProduct(const dnnl::matmul::primitive_desc& pd, dnnl::memory given,
                                           std::int64_t rows, bool withBias, bool thenGelu) {
  auto fresh = std::make_shared<PackedProduct>();
  if (given.get_desc() == pd.weights_desc()) {
    fresh->weight = given;
  } else {
    HeldWeight copy = holdWeight(pd.weights_desc());
    fresh->weightOwner = std::move(copy.owner);
    fresh->weight = copy.memory;
    execute(dnnl::reorder(given, fresh->weight), {{DNNL_ARG_FROM, given}, {DNNL_ARG_TO, fresh->weight}});
  }
  fresh->primitive = dnnl::matmul(pd);
  fresh->rows = rows;
  fresh->withBias = withBias;
  fresh->thenGelu = thenGelu;
  return fresh;
}

// `packed`'s primitive on rows [m, k] into a fresh [m, n] output, shaped `shape`.
at::Tensor runProduct(const PackedProduct& packed, const at::Tensor& rows, const at::Tensor& bias, std::int64_t n,
                      const std::vector<std::int64_t>& shape) {
  const std::int64_t m = rows.size(0), k = rows.size(1);
  const dnnl::memory::desc srcDesc({m, k}, DataType::f32, Tag::ab), dstDesc({m, n}, DataType::f32, Tag::ab),
      biasDesc({1, n}, DataType::f32, Tag::ab);
  at::Tensor out = at::empty({m, n}, rows.options());
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, view(srcDesc, rows)}, {DNNL_ARG_WEIGHTS, packed.weight}, {DNNL_ARG_DST, view(dstDesc, out)}};
  at::Tensor denseBias = bias.defined() ? bias.contiguous() : at::Tensor();
  if (denseBias.defined())
    args.emplace(DNNL_ARG_BIAS, view(biasDesc, denseBias));
  execute(packed.primitive, args);
  return out.view(shape);
}
} // namespace

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, bool weightIsNK, const at::Tensor& bias,
                  bool thenGelu, std::shared_ptr<PackedProduct>& packed) {
  if (!eligible(x) || !eligible(weight) || weight.dim() != 2 || x.dim() < 1 || x.numel() == 0 ||
      (bias.defined() && (!eligible(bias) || bias.dim() != 1)))
    return {};
  const std::int64_t k = x.size(-1), n = weightIsNK ? weight.size(0) : weight.size(1);
  if ((weightIsNK ? weight.size(1) : weight.size(0)) != k || (bias.defined() && bias.size(0) != n))
    return {}; // ATen reports the mismatch
  at::Tensor rows = x.reshape({-1, k}).contiguous();
  const std::int64_t m = rows.size(0);
  std::vector<std::int64_t> shape = x.sizes().vec();
  shape.back() = n;
  if (m <= kFewRows) {
    at::Tensor out = fewRowsProduct(rows, weightIsNK ? weight.t() : weight, bias, thenGelu);
    if (out.defined())
      return out.view(shape);
  }
  try {
    if (!packed || !packed->source.is_same(weight) || !fits(*packed, m, bias.defined(), thenGelu)) {
      // The weight [K, N] stored transposed (each output's K weights contiguous): a weight already
      // stored as [N, K] rows (Gemm's transB weights; MatMul weights under --no-packed-weights) is
      // read in place, where the primitive's own layout (Tag::any, what packWeight makes) would be
      // a second copy. `source` keeps the tensor alive.
      dnnl::matmul::primitive_desc pd =
          productDesc(m, k, n, bias.defined(), thenGelu, dnnl::memory::desc({k, n}, DataType::f32, Tag::ba));
      at::Tensor kn = weightIsNK ? weight.t() : weight; // a [K, N] view, any strides
      packed = makeProduct(pd, view(describe(kn), kn), m, bias.defined(), thenGelu);
      packed->source = weight;
    }
    return runProduct(*packed, rows, bias, n, shape);
  } catch (const dnnl::error&) {
    return {};
  }
}

bool packsProductWeight(std::int64_t k, std::int64_t n) {
  if (!available() || k <= 0 || n <= 0)
    return false;
  try {
    return hasInnerBlocks(
        productDesc(128, k, n, false, false, dnnl::memory::desc({k, n}, DataType::f32, Tag::any)).weights_desc());
  } catch (const dnnl::error&) {
    return false;
  }
}

std::shared_ptr<PackedWeight> packWeight(const at::Tensor& kn) {
  if (!eligible(kn) || kn.dim() != 2 || kn.numel() == 0)
    return nullptr;
  const std::int64_t k = kn.size(0), n = kn.size(1);
  try {
    // The layout does not depend on the row count, the bias or GELU (checked on this oneDNN for
    // 1 to 4096 rows and transformer and classifier shapes); a product whose primitive wants
    // another one reorders a copy of its own (linearPacked).
    dnnl::matmul::primitive_desc pd =
        productDesc(128, k, n, false, false, dnnl::memory::desc({k, n}, DataType::f32, Tag::any));
    auto packed = std::make_shared<PackedWeight>();
    packed->k = k;
    packed->n = n;
    HeldWeight copy = holdWeight(pd.weights_desc());
    packed->owner = std::move(copy.owner);
    packed->memory = copy.memory;
    dnnl::memory given = view(describe(kn), kn);
    execute(dnnl::reorder(given, packed->memory), {{DNNL_ARG_FROM, given}, {DNNL_ARG_TO, packed->memory}});
    return packed;
  } catch (const dnnl::error&) {
    return nullptr;
  }
}

at::Tensor unpackWeight(const PackedWeight& weight) {
  at::Tensor kn = at::empty({weight.k, weight.n}, at::kFloat);
  dnnl::memory plain = view(describe(kn), kn);
  dnnl::memory source = weight.memory; // a handle: reorder takes non-const memories
  execute(dnnl::reorder(source, plain), {{DNNL_ARG_FROM, source}, {DNNL_ARG_TO, plain}});
  return kn;
}

std::array<std::int64_t, 2> packedWeightDims(const PackedWeight& weight) { return {weight.k, weight.n}; }

at::Tensor linearPacked(const at::Tensor& x, const std::shared_ptr<const PackedWeight>& weight, const at::Tensor& bias,
                        bool thenGelu, std::shared_ptr<PackedProduct>& packed) {
  const std::int64_t k = weight->k, n = weight->n;
  if (!eligible(x) || x.dim() < 1 || x.numel() == 0 || x.size(-1) != k ||
      (bias.defined() && (!eligible(bias) || bias.dim() != 1 || bias.size(0) != n)))
    return {};
  at::Tensor rows = x.reshape({-1, k}).contiguous();
  const std::int64_t m = rows.size(0);
  std::vector<std::int64_t> shape = x.sizes().vec();
  shape.back() = n;
  try {
    if (!packed || packed->packedSource != weight || !fits(*packed, m, bias.defined(), thenGelu)) {
      // The packed weight is the one copy, shared; a primitive wanting another layout (none seen)
      // reorders a copy of its own.
      dnnl::matmul::primitive_desc pd =
          productDesc(m, k, n, bias.defined(), thenGelu, dnnl::memory::desc({k, n}, DataType::f32, Tag::any));
      packed = makeProduct(pd, weight->memory, m, bias.defined(), thenGelu);
      packed->packedSource = weight;
    }
    return runProduct(*packed, rows, bias, n, shape);
  } catch (const dnnl::error&) {
    return {};
  }
}

at::Tensor batchedMatmul(const at::Tensor& a, const at::Tensor& b) {
  if (!eligible(a) || !eligible(b) || a.dim() < 2 || b.dim() < 2 || a.numel() == 0 || b.numel() == 0)
    return {};
  const std::int64_t rank = std::max(a.dim(), b.dim());
  if (rank > DNNL_MAX_NDIMS || a.size(-1) != b.size(-2))
    return {};
  // Leading unit dims to equal ranks; oneDNN broadcasts batch dims of size 1.
  auto toRank = [rank](at::Tensor t) {
    while (t.dim() < rank)
      t = t.unsqueeze(0);
    return t;
  };
  at::Tensor left = toRank(a), right = toRank(b);
  std::vector<std::int64_t> outSizes;
  for (std::int64_t d = 0; d + 2 < rank; ++d) {
    std::int64_t l = left.size(d), r = right.size(d);
    if (l != r && l != 1 && r != 1)
      return {}; // ATen reports the mismatch
    outSizes.push_back(std::max(l, r));
  }
  outSizes.push_back(left.size(-2));
  outSizes.push_back(right.size(-1));
  at::Tensor out = at::empty(outSizes, a.options());
  auto run = [&](const at::Tensor& l, const at::Tensor& r) {
    const dnnl::memory::desc lDesc = describe(l), rDesc = describe(r), oDesc = describe(out);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(lDesc, rDesc, oDesc), cpuEngine());
    execute(dnnl::matmul(pd), {{DNNL_ARG_SRC, view(lDesc, l)}, {DNNL_ARG_WEIGHTS, view(rDesc, r)}, {DNNL_ARG_DST, view(oDesc, out)}});
  };
  try {
    run(left, right);
  } catch (const dnnl::error&) {
    try { // a stride pattern the primitive refuses: dense copies
      run(left.contiguous(), right.contiguous());
    } catch (const dnnl::error&) {
      return {};
    }
  }
  return out;
}

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

namespace {
// A 2-D (4-dim tensor) or 3-D (5-dim) convolution's or pooling's channels-last order: ATen's memory format and
// oneDNN's tag for it.
at::MemoryFormat channelsLast(std::int64_t rank) {
  return rank == 5 ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::ChannelsLast;
}
Tag channelsLastTag(std::int64_t rank) { return rank == 5 ? Tag::ndhwc : Tag::nhwc; }

// A blocked activation's data: its bytes (an ATen buffer, so ATen's allocator reuses them and the
// memory statistics count them) and their oneDNN layout; and its channels-last copy once a reader
// has asked for one, so that a value with several readers that read channels-last is reordered
// once, not once per reader (it lives as long as the value).
struct BlockedData {
  at::Tensor buffer;
  dnnl::memory::desc layout;
  mutable at::Tensor channelsLastCopy;
};
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

// An uninitialized float32 buffer of at least `desc`'s bytes, from ATen's allocator.
at::Tensor bufferFor(const dnnl::memory::desc& desc) {
  return at::empty({static_cast<std::int64_t>((desc.get_size() + sizeof(float) - 1) / sizeof(float))}, at::kFloat);
}
} // namespace

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

struct ReorderedWeight {
  at::Tensor source; // the weight it was reordered from; kept referenced, so its identity stays unique
  // From the C library's heap (holdWeight). Tried: ATen's allocator, to count these copies in
  // --profile's tensor bytes; the copies made during the first run then sat among its
  // activations' blocks and peak resident memory grew 28-51 MiB on SSD300, RetinaNet, Mask R-CNN.
  std::shared_ptr<void> owner;
  dnnl::memory memory;
  dnnl::memory::desc plainDesc; // the source's dims and plain layout, to reorder it back
};

struct OnlyReorderedWeight {
  at::Tensor standIn; // a meta tensor: the weight's dims and dtype, and its identity
  at::Tensor plain;   // until `kept` exists
  std::shared_ptr<const ReorderedWeight> kept; // a copy in a layout that converts back
};

struct PackedConvolution {
  std::shared_ptr<const ReorderedWeight> weight;
  std::vector<std::int64_t> inputDims;
  bool withBias = false;
  bool transposed = false; // a deconvolution (ConvTranspose)
  ConvPostOps post;
  dnnl::primitive primitive;
  // A deconvolution's bias [+ Relu], one pass over its output after it (oneDNN 2.6 runs a
  // deconvolution's own bias and post-ops in slow loops); empty without a bias.
  dnnl::primitive epilogue;
  dnnl::memory::desc src, dst;
  std::vector<std::int64_t> outputDims;
  // A convolution that reads and writes oneDNN's blocked layout (Winograd's, or a direct kernel
  // that is faster blocked: blockedDirectPays; neither has a residual): a channels-last input is
  // reordered into `blockedSrc` before it (a blocked activation in that layout is read as it is),
  // and the output out of `blockedDst` after it unless it is returned blocked.
  bool blocked = false;
  bool winograd = false;
  dnnl::memory::desc blockedSrc, blockedDst;
  dnnl::primitive toBlocked, fromBlocked;
  dnnl::memory::desc scratchpad; // the primitive's, passed on each call (user scratchpad mode)
  // The primitives' arguments (runConvolution points them at each call's tensors), made on the
  // first call. So one packed convolution is never run by two threads at once (a node's cache
  // is not).
  struct Arguments {
    bool made = false;
    dnnl::memory src, dst, bias, scratchpad, blockedSrc, blockedDst;
    std::unordered_map<int, dnnl::memory> primitive, toBlocked, fromBlocked;
  } arguments;
};

namespace {
dnnl::primitive_attr postOpsAttr(const ConvPostOps& post) {
  dnnl::post_ops ops;
  if (post.addResidual)
    ops.append_sum(1.0f);
  using A = ConvPostOps::Activation;
  switch (post.activation) {
  case A::None: break;
  case A::Relu: ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f); break;
  case A::Clip: ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, post.clipLow, post.clipHigh); break;
  case A::HardSwish: ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_hardswish, 1.0f / 6.0f, 0.5f); break;
  case A::HardSigmoid: // oneDNN 2.6 has no hard sigmoid: a linear map, then the clip
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, post.alpha, post.beta);
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, 0.0f, 1.0f);
    break;
  case A::Swish: ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0.0f); break;
  }
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  return attr;
}

OnlyReorderedWeight* onlyReorderedIn(const ReorderedWeights* pool, const at::Tensor& w) {
  if (!pool || !w.defined() || !w.is_meta())
    return nullptr;
  auto found = pool->onlyReordered.find(w.unsafeGetTensorImpl());
  return found == pool->onlyReordered.end() ? nullptr : found->second.get();
}

// Whether a weight in `layout` reorders back to the plain one: oneDNN's blocked layouts do (the
// direct kernels'), Winograd's transformed weights do not.
bool convertsBack(const dnnl::memory::desc& layout) { return layout.data.format_kind == dnnl_blocked; }

at::Tensor plainOf(const OnlyReorderedWeight& only) {
  if (only.plain.defined())
    return only.plain;
  at::Tensor plain = at::empty(only.standIn.sizes(), only.standIn.options().device(at::kCPU));
  dnnl::memory from = only.kept->memory;
  dnnl::memory to(only.kept->plainDesc, cpuEngine(), plain.data_ptr());
  execute(dnnl::reorder(from, to), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
  return plain;
}

// w (plain, `plainTag` over `weightDims`, or a stand-in of the pool's) in the layout `wanted`: the
// pool's copy when it holds one, else a copy reordered now (and kept in the pool, weakly). A
// stand-in's first copy that converts back is kept for good, and its plain tensor let go.
std::shared_ptr<const ReorderedWeight> reorderedWeight(ReorderedWeights* pool, const at::Tensor& w,
                                                       const Dims& weightDims, Tag plainTag,
                                                       const dnnl::memory::desc& wanted) {
  std::vector<std::weak_ptr<const ReorderedWeight>>* copies =
      pool ? &pool->byWeight[w.unsafeGetTensorImpl()] : nullptr;
  if (copies) {
    std::erase_if(*copies, [](const std::weak_ptr<const ReorderedWeight>& copy) { return copy.expired(); });
    for (const std::weak_ptr<const ReorderedWeight>& copy : *copies)
      if (std::shared_ptr<const ReorderedWeight> held = copy.lock();
          held && held->source.is_same(w) && held->memory.get_desc() == wanted)
        return held;
  }
  auto fresh = std::make_shared<ReorderedWeight>();
  fresh->source = w;
  fresh->plainDesc = dnnl::memory::desc(weightDims, DataType::f32, plainTag);
  HeldWeight copy = holdWeight(wanted);
  fresh->owner = std::move(copy.owner);
  fresh->memory = copy.memory;
  OnlyReorderedWeight* only = onlyReorderedIn(pool, w);
  {
    at::Tensor plainWeight = only ? plainOf(*only) : w.contiguous();
    dnnl::memory given(fresh->plainDesc, cpuEngine(), plainWeight.data_ptr());
    execute(dnnl::reorder(given, fresh->memory), {{DNNL_ARG_FROM, given}, {DNNL_ARG_TO, fresh->memory}});
  }
  if (only && !only->kept && convertsBack(wanted)) {
    only->kept = fresh;
    only->plain = at::Tensor();
  }
  if (copies) {
    copies->push_back(fresh);
    if (pool->byWeight.size() > pool->sweepAbove) {
      std::erase_if(pool->byWeight, [](const auto& entry) {
        return std::all_of(entry.second.begin(), entry.second.end(), [](const auto& copy) { return copy.expired(); });
      });
      pool->sweepAbove = std::max<std::size_t>(64, 2 * pool->byWeight.size());
    }
  }
  return fresh;
}

// Gives `packed` w in `wanted`, the layout the primitive picked (from `cache`'s pool), and records
// what `packed` is keyed by.
void keepReorderedWeight(PackedConvolution& packed, const at::Tensor& w, const Dims& weightDims, Tag plainTag,
                         const dnnl::memory::desc& wanted, const at::Tensor& x, bool withBias,
                         std::vector<std::int64_t> outputDims, const ConvolutionCache* cache) {
  packed.weight = reorderedWeight(cache ? cache->weights.get() : nullptr, w, weightDims, plainTag, wanted);
  packed.inputDims = x.sizes().vec();
  packed.withBias = withBias;
  packed.outputDims = std::move(outputDims);
}

// The argument maps of `packed`'s primitives, over memory objects made once without data (each
// call points them at its tensors: making them costs an allocation each, and a small model's
// convolutions made about 200 a run).
void bindArguments(PackedConvolution& packed) {
  auto unbound = [](const dnnl::memory::desc& desc) { return dnnl::memory(desc, cpuEngine(), DNNL_MEMORY_NONE); };
  PackedConvolution::Arguments& bound = packed.arguments;
  bound.src = unbound(packed.src);
  bound.dst = unbound(packed.dst);
  bound.bias = unbound(dnnl::memory::desc({packed.outputDims[1]}, DataType::f32, Tag::a));
  bound.scratchpad = unbound(packed.scratchpad);
  bound.primitive = {{DNNL_ARG_WEIGHTS, packed.weight->memory}};
  if (packed.blocked) {
    bound.blockedSrc = unbound(packed.blockedSrc);
    bound.blockedDst = unbound(packed.blockedDst);
    bound.primitive.emplace(DNNL_ARG_SRC, bound.blockedSrc);
    bound.primitive.emplace(DNNL_ARG_DST, bound.blockedDst);
    bound.toBlocked = {{DNNL_ARG_FROM, bound.src}, {DNNL_ARG_TO, bound.blockedSrc}};
    bound.fromBlocked = {{DNNL_ARG_FROM, bound.blockedDst}, {DNNL_ARG_TO, bound.dst}};
  } else {
    bound.primitive.emplace(DNNL_ARG_SRC, bound.src);
    bound.primitive.emplace(DNNL_ARG_DST, bound.dst);
  }
  if (packed.scratchpad.get_size() > 0)
    bound.primitive.emplace(DNNL_ARG_SCRATCHPAD, bound.scratchpad);
  if (packed.withBias && !packed.transposed) // a deconvolution's bias is added after it (epilogue)
    bound.primitive.emplace(DNNL_ARG_BIAS, bound.bias);
  bound.made = true;
}

// `packed`'s primitive on x plus the bias, accumulating onto the residual when it has one, and
// its output: blocked when `packed` runs blocked and `mayReturnBlocked`, else channels-last. x is
// read as it is where it is channels-last or blocked in the layout the primitive reads, otherwise
// after one reorder; a blocked residual is reordered to channels-last. Scratch memory (the
// primitive's scratchpad, blocked operands) comes from ATen's allocator, which keeps freed memory
// for reuse.
at::Tensor runConvolution(PackedConvolution& packed, const at::Tensor& x, const at::Tensor& bias,
                          const at::Tensor& residual, bool residualIsScratch, bool mayReturnBlocked) {
  if (!packed.arguments.made)
    bindArguments(packed);
  PackedConvolution::Arguments& bound = packed.arguments;
  const at::MemoryFormat lastChannels = channelsLast(x.dim());
  // The source.
  const BlockedData* blockedX = blockedDataOf(x);
  at::Tensor src;
  if (packed.blocked && blockedX && blockedX->layout == packed.blockedSrc) {
    src = blockedX->buffer;
    bound.blockedSrc.set_data_handle(src.data_ptr());
  } else {
    const at::Tensor dense = (blockedX ? denseFromBlocked(x) : x).contiguous(lastChannels);
    bound.src.set_data_handle(dense.data_ptr());
    src = dense;
    if (packed.blocked) {
      src = bufferFor(packed.blockedSrc);
      bound.blockedSrc.set_data_handle(src.data_ptr());
      execute(packed.toBlocked, bound.toBlocked);
    }
  }
  // The destination, holding the residual first when there is one (a blocked residual's
  // channels-last copy is its other readers' too, so it is copied, never accumulated onto).
  at::Tensor out;
  if (packed.blocked) {
    out = bufferFor(packed.blockedDst);
    bound.blockedDst.set_data_handle(out.data_ptr());
  } else {
    const at::Tensor denseResidual = denseFromBlocked(residual);
    if (packed.post.addResidual && residualIsScratch && !isBlockedActivation(residual) &&
        denseResidual.is_contiguous(lastChannels)) {
      out = denseResidual; // the sum post-op accumulates onto it: no copy
    } else {
      out = at::empty(packed.outputDims, at::TensorOptions(at::kFloat).memory_format(lastChannels));
      if (packed.post.addResidual)
        out.copy_(denseResidual);
    }
    bound.dst.set_data_handle(out.data_ptr());
  }
  at::Tensor scratchpad;
  if (packed.scratchpad.get_size() > 0) {
    scratchpad = bufferFor(packed.scratchpad);
    bound.scratchpad.set_data_handle(scratchpad.data_ptr());
  }
  const at::Tensor denseBias = bias.defined() ? bias.contiguous() : at::Tensor(); // [OC]
  if (denseBias.defined())
    bound.bias.set_data_handle(denseBias.data_ptr());
  execute(packed.primitive, bound.primitive);
  if (!packed.blocked)
    return out;
  if (mayReturnBlocked)
    return blockedActivation(out, packed.blockedDst, packed.outputDims);
  at::Tensor dense = at::empty(packed.outputDims, at::TensorOptions(at::kFloat).memory_format(lastChannels));
  bound.dst.set_data_handle(dense.data_ptr());
  execute(packed.fromBlocked, bound.fromBlocked);
  return dense;
}

// [N, OC, (OD,) OH, OW] of a convolution of x by w.
std::vector<std::int64_t> convolutionOutputDims(const at::Tensor& x, const at::Tensor& w,
                                                const std::vector<std::int64_t>& strides,
                                                const std::vector<std::int64_t>& padBegin,
                                                const std::vector<std::int64_t>& padEnd,
                                                const std::vector<std::int64_t>& dilations) {
  std::vector<std::int64_t> out{x.size(0), w.size(0)};
  for (std::size_t d = 0; d < strides.size(); ++d) {
    const std::int64_t in = x.size(static_cast<std::int64_t>(d) + 2), k = w.size(static_cast<std::int64_t>(d) + 2);
    out.push_back((in + padBegin[d] + padEnd[d] - dilations[d] * (k - 1) - 1) / strides[d] + 1);
  }
  return out;
}

// Whether a convolution may run as Winograd's (oneDNN's jit_fp32_wino_2x3, F(2x2, 3x3), or
// jit_wino_4x3, F(4x4, 3x3), whichever oneDNN picks) in oneDNN's blocked layout, with the reorders
// from and to channels-last around it, rather than the direct channels-last kernel: 3x3, stride 1,
// undilated, ungrouped, channels in multiples of 16 and more than 16 out, at least 14x14, no
// residual. Measured on ResNet-50's 3x3 convolutions (bench_conv_layout, AVX-512, 2 threads, two
// runs), reorders included: 11-12% faster at 56x56x64, 13-23% at 28x28x128, 24-29% at 14x14x256,
// and 0-5% slower at 7x7x512; SSD300's 512-to-16 box head at 38x38 took 2.9 ms against the direct
// kernel's 0.8 (32 outputs were mixed: DenseNet's 128-to-32 layers 9-20% faster at 14x14 and
// 28x28, Inception-v3's 32-to-32 at 147x147 41% slower; left on Winograd). Its results differ
// from the direct kernel's by rounding (the tile transforms).
bool winogradPays(const at::Tensor& x, const at::Tensor& w, const std::vector<std::int64_t>& strides,
                  const std::vector<std::int64_t>& dilations, std::int64_t groups, const ConvPostOps& post) {
  return w.dim() == 4 && w.size(2) == 3 && w.size(3) == 3 && strides[0] == 1 && strides[1] == 1 && dilations[0] == 1 &&
         dilations[1] == 1 && groups == 1 && x.size(1) % 16 == 0 && w.size(0) % 16 == 0 && w.size(0) > 16 &&
         x.size(2) >= 14 && x.size(3) >= 14 && !post.addResidual;
}

// Whether Winograd's transformed weight is worth its memory: its bytes beyond the plain weight's
// at most kWinogradExtraPerOutputByte times the output's. The saving grows with the output's
// pixels and the extra memory does not (F(4x4, 3x3) holds 36 values per 9 of the weight, F(2x2,
// 3x3) 16), so this keeps Winograd where its work is large for the memory. SSD300 (VGG's 512x512
// weights, F(4x4, 3x3)): at 19x19 (ratio 38) three layers saved 6.5 ms a run for 85 MiB of copies;
// at 38x38 (ratio 9.6) two saved 19 ms for 57 MiB; at 75x75 (1.2) two saved 22 ms for 14 MiB.
// VGG-11's 512x512 layers (ratios 17.7 at 28x28, F(4x4, 3x3), and 18.3 at 14x14, F(2x2, 3x3))
// ran 3.3x and 3.7x slower on the direct kernel: a limit of 16 cost VGG-11 a third of its speed,
// so the limit is 32. ResNet-50's F(2x2, 3x3) layers are at most 9.2 (14x14x256).
constexpr std::size_t kWinogradExtraPerOutputByte = 32;
bool winogradWeightAffordable(const dnnl::convolution_forward::primitive_desc& winograd, const at::Tensor& w,
                              const std::vector<std::int64_t>& outputDims) {
  const std::size_t plain = static_cast<std::size_t>(w.numel()) * sizeof(float);
  const std::size_t transformed = winograd.weights_desc().get_size();
  const std::size_t output = static_cast<std::size_t>(
      std::accumulate(outputDims.begin(), outputDims.end(), std::int64_t{1}, std::multiplies<>()) * sizeof(float));
  return transformed <= plain || transformed - plain <= kWinogradExtraPerOutputByte * output;
}

// Whether a direct convolution may run in oneDNN's blocked layout with reorders from and to
// channels-last around it (where its channels-last kernel is not a native one:
// directInPreferredLayout): a 2-D, ungrouped convolution with a kernel larger than 1x1 and no
// residual. Measured on an AMD EPYC (AVX2, oneDNN 2.6's jit:avx2, nChw8c against nhwc; 2
// threads): bench_conv_layout's ResNet-50 trunk all blocked 0.85x channels-last, its 3x3 layers
// 0.64-0.87x; end to end, in pairs in one process (cleave run --baseline), FCOS 0.91x and
// ResNet-50 0.98-0.99x with these blocked; with the 1x1 ones too ResNet-50 took 1.11x (their
// kernels gain 2-4%, less than the reorders cost).
// The choice is the convolution's shape's alone, never its input's layout: a cut model's
// convolution after a seam reads a channels-last value where the whole model's read a blocked
// one, and the two must run the same kernel to give the same sums. (Running the 1x1 ones blocked
// whenever their input was blocked made a cut ResNet-50 differ from the whole one by 4.5e-4 of
// an output's magnitude, past `cleave verify`'s tolerance, and gained nothing: the 1x1 kernels
// took 26.2 ms a run blocked against 26.1 channels-last.)
bool blockedDirectPays(const at::Tensor& x, const at::Tensor& w, std::int64_t groups, const ConvPostOps& post) {
  return x.dim() == 4 && groups == 1 && !post.addResidual && (w.size(2) > 1 || w.size(3) > 1);
}

// The direct convolution with its source and destination in the layouts oneDNN prefers, where
// the destination's is blocked and `channelsLast` (the same convolution channels-last) is not one
// of its native channels-last kernels (brgconv, AVX-512); else nothing (the caller runs
// `channelsLast`). The source's may be plain: an image's 3 channels fill no block, and jit:avx2
// reads them as nchw and writes nChw8c (VGG-11's first layer 1.31 ms against 1.48 channels-last,
// and the max pool after it, on the blocked output, 1.8-2.1 ms against 2.6-3.8).
template <typename Describe>
std::optional<dnnl::convolution_forward::primitive_desc>
directInPreferredLayout(const Describe& describeConvolution, const dnnl::primitive_attr& attr,
                        const dnnl::convolution_forward::primitive_desc& channelsLast) {
  if (std::string_view(channelsLast.impl_info_str()).rfind("brg", 0) == 0)
    return std::nullopt;
  try {
    dnnl::convolution_forward::primitive_desc preferred(
        describeConvolution(dnnl::algorithm::convolution_direct,
                            dnnl::memory::desc(channelsLast.src_desc().dims(), DataType::f32, Tag::any),
                            dnnl::memory::desc(channelsLast.dst_desc().dims(), DataType::f32, Tag::any)),
        attr, cpuEngine());
    if (!hasInnerBlocks(preferred.dst_desc()))
      return std::nullopt;
    return preferred;
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

// The convolution for x's dims: the primitive (oneDNN picks the weight layout), the weight
// reordered into it once.
std::shared_ptr<PackedConvolution> packConvolution(const at::Tensor& x, const at::Tensor& w, bool withBias,
                                                   const std::vector<std::int64_t>& strides,
                                                   const std::vector<std::int64_t>& padBegin,
                                                   const std::vector<std::int64_t>& padEnd,
                                                   const std::vector<std::int64_t>& dilations, std::int64_t groups,
                                                   const ConvPostOps& post, const ConvolutionCache* cache) {
  auto packed = std::make_shared<PackedConvolution>();
  const std::int64_t oc = w.size(0);
  const std::vector<std::int64_t> out = convolutionOutputDims(x, w, strides, padBegin, padEnd, dilations);
  Dims weightDims(w.sizes().begin(), w.sizes().end());
  if (groups > 1) { // (groups, OC / groups, IC / groups, spatial...)
    weightDims[0] = oc / groups;
    weightDims.insert(weightDims.begin(), groups);
  }
  packed->src = dnnl::memory::desc(Dims(x.sizes().begin(), x.sizes().end()), DataType::f32, channelsLastTag(x.dim()));
  packed->dst = dnnl::memory::desc(Dims(out.begin(), out.end()), DataType::f32, channelsLastTag(x.dim()));
  const dnnl::memory::desc anyWeight(weightDims, DataType::f32, Tag::any), biasDesc({oc}, DataType::f32, Tag::a);
  Dims dilates;
  for (const std::int64_t dilation : dilations)
    dilates.push_back(dilation - 1);
  auto describeConvolution = [&](dnnl::algorithm algorithm, const dnnl::memory::desc& src,
                                 const dnnl::memory::desc& dst) {
    return withBias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, algorithm, src, anyWeight,
                                                      biasDesc, dst, Dims(strides.begin(), strides.end()), dilates,
                                                      Dims(padBegin.begin(), padBegin.end()),
                                                      Dims(padEnd.begin(), padEnd.end()))
                    : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, algorithm, src, anyWeight,
                                                      dst, Dims(strides.begin(), strides.end()), dilates,
                                                      Dims(padBegin.begin(), padBegin.end()),
                                                      Dims(padEnd.begin(), padEnd.end()));
  };
  // The primitive's scratchpad (Winograd's transformed tiles: 33 MiB over ResNet-50's when each
  // primitive held its own) comes from ATen's allocator on each call, which keeps freed memory.
  dnnl::primitive_attr attr = postOpsAttr(post);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  std::optional<dnnl::convolution_forward::primitive_desc> winograd;
  if ((!cache || cache->allowWinograd) && winogradPays(x, w, strides, dilations, groups, post)) {
    packed->blockedSrc = dnnl::memory::desc(packed->src.dims(), DataType::f32, Tag::nChw16c);
    packed->blockedDst = dnnl::memory::desc(packed->dst.dims(), DataType::f32, Tag::nChw16c);
    try {
      winograd.emplace(
          describeConvolution(dnnl::algorithm::convolution_winograd, packed->blockedSrc, packed->blockedDst), attr,
          cpuEngine());
    } catch (const dnnl::error&) {
      // this CPU or oneDNN has no Winograd kernel for it: the direct one below
    }
    if (winograd && !winogradWeightAffordable(*winograd, w, out))
      winograd.reset();
  }
  std::optional<dnnl::convolution_forward::primitive_desc> blockedDirect, channelsLast;
  if (!winograd) { // the channels-last kernel; the blocked one instead where that is not native
    channelsLast.emplace(describeConvolution(dnnl::algorithm::convolution_direct, packed->src, packed->dst), attr,
                         cpuEngine());
    if ((!cache || cache->allowBlockedDirect) && blockedDirectPays(x, w, groups, post))
      blockedDirect = directInPreferredLayout(describeConvolution, attr, *channelsLast);
    if (blockedDirect) {
      packed->blockedSrc = blockedDirect->src_desc();
      packed->blockedDst = blockedDirect->dst_desc();
    }
  }
  const dnnl::convolution_forward::primitive_desc& pd =
      winograd ? *winograd : blockedDirect ? *blockedDirect : *channelsLast;
  packed->scratchpad = pd.scratchpad_desc();
  if (winograd || blockedDirect) {
    packed->blocked = true;
    packed->winograd = winograd.has_value();
    packed->toBlocked = dnnl::reorder(dnnl::reorder::primitive_desc(cpuEngine(), packed->src, cpuEngine(),
                                                                     packed->blockedSrc));
    packed->fromBlocked = dnnl::reorder(dnnl::reorder::primitive_desc(cpuEngine(), packed->blockedDst, cpuEngine(),
                                                                       packed->dst));
  }
  const Tag plainWeight = x.dim() == 5 ? (groups > 1 ? Tag::goidhw : Tag::oidhw) : (groups > 1 ? Tag::goihw : Tag::oihw);
  keepReorderedWeight(*packed, w, weightDims, plainWeight, pd.weights_desc(), x, withBias, out, cache);
  packed->primitive = dnnl::convolution_forward(pd);
  packed->post = post;
  return packed;
}
} // namespace

at::Tensor convolution(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                       const std::vector<std::int64_t>& strides, const std::vector<std::int64_t>& padBegin,
                       const std::vector<std::int64_t>& padEnd, const std::vector<std::int64_t>& dilations,
                       std::int64_t groups, const ConvPostOps& post, const at::Tensor& residual,
                       bool residualIsScratch, std::shared_ptr<PackedConvolution>& packed,
                       const ConvolutionCache* cache, bool mayReturnBlocked) {
  const bool heldOnlyReordered = cache && onlyReorderedIn(cache->weights.get(), w);
  const bool inputBlocked = isBlockedActivation(x);
  if (!(eligible(x) || inputBlocked) || !(eligible(w) || heldOnlyReordered) || (x.dim() != 4 && x.dim() != 5) ||
      w.dim() != x.dim())
    return {};
  const std::size_t spatial = static_cast<std::size_t>(x.dim()) - 2;
  if (x.numel() == 0 || groups < 1 || x.size(1) != w.size(1) * groups || w.size(0) % groups != 0 || strides.size() != spatial ||
      padBegin.size() != spatial || padEnd.size() != spatial || dilations.size() != spatial ||
      (bias.defined() && (!eligible(bias) || bias.numel() != w.size(0))) ||
      (post.addResidual && !(eligible(residual) || isBlockedActivation(residual))))
    return {};
  // A residual of another shape (a broadcast Add) is refused before the cache is touched, so the
  // caller's plain convolution keeps its own primitive instead of rebuilding it every run.
  if (post.addResidual && residual.sizes().vec() != convolutionOutputDims(x, w, strides, padBegin, padEnd, dilations))
    return {};
  try {
    if (!packed || packed->transposed || !packed->weight->source.is_same(w) || packed->inputDims != x.sizes().vec() ||
        packed->withBias != bias.defined() || !(packed->post == post))
      packed = packConvolution(x, w, bias.defined(), strides, padBegin, padEnd, dilations, groups, post, cache);
    return runConvolution(*packed, x, bias, residual, residualIsScratch, mayReturnBlocked);
  } catch (const dnnl::error&) {
    packed.reset();
    return {};
  }
}

bool usesWinograd(const PackedConvolution& packed) { return packed.winograd; }

bool runsBlocked(const PackedConvolution& packed) { return packed.blocked; }

at::Tensor holdOnlyReordered(ReorderedWeights& pool, const at::Tensor& w) {
  if (!eligible(w) || (w.dim() != 4 && w.dim() != 5) || !w.is_contiguous())
    return {};
  auto only = std::make_shared<OnlyReorderedWeight>();
  only->standIn = at::empty(w.sizes(), w.options().device(at::kMeta));
  only->plain = w;
  pool.onlyReordered.emplace(only->standIn.unsafeGetTensorImpl(), only);
  return only->standIn;
}

at::Tensor plainWeight(const ReorderedWeights& pool, const at::Tensor& standIn) {
  const OnlyReorderedWeight* only = onlyReorderedIn(&pool, standIn);
  return only ? plainOf(*only) : at::Tensor();
}

std::size_t releasedPlainWeights(const ReorderedWeights& pool) {
  return static_cast<std::size_t>(std::count_if(pool.onlyReordered.begin(), pool.onlyReordered.end(),
                                                [](const auto& entry) { return !entry.second->plain.defined(); }));
}

std::size_t reorderedWeightBytes(const PackedConvolution& packed) { return packed.weight->memory.get_desc().get_size(); }

bool shareReorderedWeight(const PackedConvolution& a, const PackedConvolution& b) {
  return a.weight == b.weight;
}

std::shared_ptr<PackedConvolution>& cacheEntryFor(ConvolutionCache& cache, at::IntArrayRef inputDims) {
  std::shared_ptr<PackedConvolution>* empty = nullptr;
  for (std::shared_ptr<PackedConvolution>& entry : cache.byShape) {
    if (entry && inputDims.equals(entry->inputDims))
      return entry;
    if (!entry && !empty)
      empty = &entry;
  }
  if (empty)
    return *empty;
  if (cache.byShape.size() >= ConvolutionCache::kMaxShapes)
    cache.byShape.erase(cache.byShape.begin());
  return cache.byShape.emplace_back();
}

namespace {
// [N, OC, OH, OW] of a 2-D transposed convolution of x by w [IC, OC / groups, KH, KW] (ONNX's
// ConvTranspose output size with explicit pads).
std::vector<std::int64_t> transposedOutputDims(const at::Tensor& x, const at::Tensor& w, std::int64_t groups,
                                               const std::vector<std::int64_t>& strides,
                                               const std::vector<std::int64_t>& padBegin,
                                               const std::vector<std::int64_t>& padEnd,
                                               const std::vector<std::int64_t>& dilations,
                                               const std::vector<std::int64_t>& outputPadding) {
  std::vector<std::int64_t> out{x.size(0), w.size(1) * groups};
  for (std::size_t d = 0; d < 2; ++d) {
    const std::int64_t in = x.size(static_cast<std::int64_t>(d) + 2), k = w.size(static_cast<std::int64_t>(d) + 2);
    out.push_back(strides[d] * (in - 1) + outputPadding[d] + dilations[d] * (k - 1) + 1 - padBegin[d] - padEnd[d]);
  }
  return out;
}

// The deconvolution for x's dims: the primitive (oneDNN picks the weight layout), the weight
// reordered into it once. ONNX's output_padding is less end padding for oneDNN.
std::shared_ptr<PackedConvolution> packTransposedConvolution(
    const at::Tensor& x, const at::Tensor& w, bool withBias, const std::vector<std::int64_t>& strides,
    const std::vector<std::int64_t>& padBegin, const std::vector<std::int64_t>& padEnd,
    const std::vector<std::int64_t>& dilations, const std::vector<std::int64_t>& outputPadding, std::int64_t groups,
    const ConvPostOps& post, const ConvolutionCache* cache) {
  auto packed = std::make_shared<PackedConvolution>();
  const std::int64_t ic = w.size(0), oc = w.size(1) * groups;
  const std::vector<std::int64_t> out =
      transposedOutputDims(x, w, groups, strides, padBegin, padEnd, dilations, outputPadding);
  // Logical oneDNN weight dims are (groups,) OC, IC; ONNX stores [IC, OC / groups, KH, KW], which
  // is oneDNN's (g)iohw order.
  const Dims weightDims = groups > 1 ? Dims{groups, oc / groups, ic / groups, w.size(2), w.size(3)}
                                     : Dims{oc, ic, w.size(2), w.size(3)};
  packed->src = dnnl::memory::desc(Dims(x.sizes().begin(), x.sizes().end()), DataType::f32, Tag::nhwc);
  packed->dst = dnnl::memory::desc(Dims(out.begin(), out.end()), DataType::f32, Tag::nhwc);
  const dnnl::memory::desc anyWeight(weightDims, DataType::f32, Tag::any);
  const Dims dilates{dilations[0] - 1, dilations[1] - 1}, stride(strides.begin(), strides.end()),
      left(padBegin.begin(), padBegin.end()), right{padEnd[0] - outputPadding[0], padEnd[1] - outputPadding[1]};
  using Deconvolution = dnnl::deconvolution_forward;
  Deconvolution::primitive_desc pd(Deconvolution::desc(dnnl::prop_kind::forward_inference,
                                                       dnnl::algorithm::deconvolution_direct, packed->src, anyWeight,
                                                       packed->dst, stride, dilates, left, right),
                                   cpuEngine());
  keepReorderedWeight(*packed, w, weightDims, groups > 1 ? Tag::giohw : Tag::iohw, pd.weights_desc(), x, withBias,
                      out, cache);
  packed->primitive = Deconvolution(pd);
  packed->post = post;
  if (withBias) { // output += bias per channel, then the activation, in place
    const dnnl::memory::desc perChannel({1, oc, 1, 1}, DataType::f32, Tag::nchw);
    packed->epilogue = dnnl::binary(dnnl::binary::primitive_desc(
        dnnl::binary::desc(dnnl::algorithm::binary_add, packed->dst, perChannel, packed->dst), postOpsAttr(post),
        cpuEngine()));
  }
  packed->transposed = true;
  return packed;
}
} // namespace

at::Tensor transposedConvolution2d(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                                   const std::vector<std::int64_t>& strides, const std::vector<std::int64_t>& padBegin,
                                   const std::vector<std::int64_t>& padEnd, const std::vector<std::int64_t>& dilations,
                                   const std::vector<std::int64_t>& outputPadding, std::int64_t groups,
                                   bool thenRelu, std::shared_ptr<PackedConvolution>& packed,
                                   const ConvolutionCache* cache) {
  const bool heldOnlyReordered = cache && onlyReorderedIn(cache->weights.get(), w);
  if (!eligible(x) || !(eligible(w) || heldOnlyReordered) || x.dim() != 4 || w.dim() != 4 || x.numel() == 0 ||
      w.numel() == 0 || groups < 1 || x.size(1) != w.size(0) || w.size(0) % groups != 0 || strides.size() != 2 ||
      padBegin.size() != 2 || padEnd.size() != 2 || dilations.size() != 2 || outputPadding.size() != 2 ||
      (bias.defined() && (!eligible(bias) || bias.numel() != w.size(1) * groups)))
    return {};
  for (std::size_t d = 0; d < 2; ++d)
    if (strides[d] < 1 || dilations[d] < 1 || padBegin[d] < 0 || padEnd[d] - outputPadding[d] < 0)
      return {}; // negative padding (a crop past the edge, or extra zero rows): ATen's path
  const std::vector<std::int64_t> out =
      transposedOutputDims(x, w, groups, strides, padBegin, padEnd, dilations, outputPadding);
  if (out[2] < 1 || out[3] < 1)
    return {};
  try {
    const ConvPostOps post{false, thenRelu ? ConvPostOps::Activation::Relu : ConvPostOps::Activation::None};
    if (!packed || !packed->transposed || !packed->weight->source.is_same(w) || packed->inputDims != x.sizes().vec() ||
        packed->outputDims != out || packed->withBias != bias.defined() || !(packed->post == post))
      packed = packTransposedConvolution(x, w, bias.defined(), strides, padBegin, padEnd, dilations, outputPadding,
                                         groups, post, cache);
    at::Tensor result = runConvolution(*packed, x, at::Tensor(), at::Tensor(), false, false); // channels-last
    if (bias.defined()) {
      const dnnl::memory dst = view(packed->dst, result);
      execute(packed->epilogue, {{DNNL_ARG_SRC_0, dst},
                                 {DNNL_ARG_SRC_1, view(dnnl::memory::desc({1, result.size(1), 1, 1}, DataType::f32,
                                                                          Tag::nchw),
                                                       bias.contiguous())},
                                 {DNNL_ARG_DST, dst}});
    } else if (thenRelu) {
      result.relu_();
    }
    return result;
  } catch (const dnnl::error&) {
    packed.reset();
    return {};
  }
}

#else // built without oneDNN: callers use ATen

bool available() { return false; }

struct PackedProduct {};
struct PackedWeight {};

at::Tensor linear(const at::Tensor&, const at::Tensor&, bool, const at::Tensor&, bool, std::shared_ptr<PackedProduct>&) {
  return {};
}

std::shared_ptr<PackedWeight> packWeight(const at::Tensor&) { return nullptr; }
at::Tensor unpackWeight(const PackedWeight&) { return {}; }
std::array<std::int64_t, 2> packedWeightDims(const PackedWeight&) { return {0, 0}; }
at::Tensor linearPacked(const at::Tensor&, const std::shared_ptr<const PackedWeight>&, const at::Tensor&, bool,
                        std::shared_ptr<PackedProduct>&) {
  return {};
}

at::Tensor batchedMatmul(const at::Tensor&, const at::Tensor&) { return {}; }

struct PackedConvolution {};

at::Tensor pool(const at::Tensor&, PoolKind, const std::vector<std::int64_t>&, const std::vector<std::int64_t>&,
                const std::vector<std::int64_t>&, const std::vector<std::int64_t>&, const std::vector<std::int64_t>&,
                bool, bool) {
  return {};
}

at::Tensor softmax(const at::Tensor&, std::int64_t, bool, bool) { return {}; }

at::Tensor convolution(const at::Tensor&, const at::Tensor&, const at::Tensor&, const std::vector<std::int64_t>&,
                       const std::vector<std::int64_t>&, const std::vector<std::int64_t>&,
                       const std::vector<std::int64_t>&, std::int64_t, const ConvPostOps&, const at::Tensor&, bool,
                       std::shared_ptr<PackedConvolution>&, const ConvolutionCache*, bool) {
  return {};
}

bool usesWinograd(const PackedConvolution&) { return false; }
bool runsBlocked(const PackedConvolution&) { return false; }
bool packsProductWeight(std::int64_t, std::int64_t) { return false; }
bool isBlockedActivation(const at::Tensor&) { return false; }
at::Tensor denseFromBlocked(const at::Tensor& t) { return t; }
struct OnlyReorderedWeight {};
at::Tensor holdOnlyReordered(ReorderedWeights&, const at::Tensor&) { return {}; }
at::Tensor plainWeight(const ReorderedWeights&, const at::Tensor&) { return {}; }
std::size_t releasedPlainWeights(const ReorderedWeights&) { return 0; }
std::size_t reorderedWeightBytes(const PackedConvolution&) { return 0; }
std::size_t heldWeightBytes() { return 0; }
bool shareReorderedWeight(const PackedConvolution&, const PackedConvolution&) { return false; }

std::shared_ptr<PackedConvolution>& cacheEntryFor(ConvolutionCache& cache, at::IntArrayRef) {
  if (cache.byShape.empty())
    cache.byShape.emplace_back();
  return cache.byShape.front();
}

at::Tensor transposedConvolution2d(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                   const std::vector<std::int64_t>&, const std::vector<std::int64_t>&,
                                   const std::vector<std::int64_t>&, const std::vector<std::int64_t>&,
                                   const std::vector<std::int64_t>&, std::int64_t, bool,
                                   std::shared_ptr<PackedConvolution>&, const ConvolutionCache*) {
  return {};
}

#endif

} // namespace cleave::runtime::onednn
