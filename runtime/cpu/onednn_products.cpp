// runtime/cpu/onednn_products.cpp - matrix products on oneDNN, called directly: weights packed
// once in the layout the primitive picks, few-row products on sgemm, batched products
// (onednn.h; onednn_support.h); on CPUs with AVX2 but not AVX-512, packed weights run on cleave's
// own kernel instead (panel_products.h), which is faster there than oneDNN 2.6's.
#include "runtime/cpu/onednn_support.h"

#include <ATen/Parallel.h>

#include "runtime/cpu/panel_products.h"

namespace cleave::runtime::onednn {

struct PackedWeight {
  std::int64_t k = 0, n = 0;
  std::shared_ptr<void> owner; // memory's buffer
  dnnl::memory memory;         // [K, N] in the layout the matmul primitive picks for this CPU,
  const float* panels = nullptr; // or, where panels::runsHere(), memory's bytes as panel_products.h's panels
};

struct PackedProduct {
  at::Tensor source; // the weight it was reordered from; kept referenced, so its identity stays unique
  std::shared_ptr<const PackedWeight> packedSource; // or the packed weight it reads
  std::int64_t rows = -1;
  bool withBias = false;
  ProductActivation activation = ProductActivation::None;
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
// or its transpose is) plus bias, then `activation`; undefined when kn's strides do not fit.
at::Tensor fewRowsProduct(const at::Tensor& rows, const at::Tensor& kn, const at::Tensor& bias,
                          ProductActivation activation) {
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
  return activateInPlace(out, activation); // `out` is this call's own: no second buffer
}
} // namespace

namespace {
// The matmul primitive for [m, k] rows times a [k, n] weight laid out as `weight` (a layout, or
// Tag::any for the primitive's choice), with a [1, n] bias and an activation post-op when asked.
dnnl::matmul::primitive_desc productDesc(std::int64_t m, std::int64_t k, std::int64_t n, bool withBias,
                                         ProductActivation activation, const dnnl::memory::desc& weight) {
  const dnnl::memory::desc srcDesc({m, k}, DataType::f32, Tag::ab), dstDesc({m, n}, DataType::f32, Tag::ab),
      biasDesc({1, n}, DataType::f32, Tag::ab);
  dnnl::post_ops post;
  switch (activation) {
  case ProductActivation::None: break;
  case ProductActivation::Gelu: post.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f); break;
  case ProductActivation::GeluTanh: post.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f); break;
  case ProductActivation::Relu: post.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f); break;
  }
  dnnl::primitive_attr attr;
  attr.set_post_ops(post);
  return withBias ? dnnl::matmul::primitive_desc(dnnl::matmul::desc(srcDesc, weight, biasDesc, dstDesc), attr, cpuEngine())
                  : dnnl::matmul::primitive_desc(dnnl::matmul::desc(srcDesc, weight, dstDesc), attr, cpuEngine());
}

// Whether `packed` was made for this product's form (its weight is checked by the caller).
bool fits(const PackedProduct& packed, std::int64_t rows, bool withBias, ProductActivation activation) {
  return packed.rows == rows && packed.withBias == withBias && packed.activation == activation;
}

// The product for `pd`, reading its weight from `given` where that is already the layout the
// primitive wants (no second copy; the caller keeps `given`'s bytes alive), else from a copy
// reordered once.
std::shared_ptr<PackedProduct> makeProduct(const dnnl::matmul::primitive_desc& pd, dnnl::memory given,
                                           std::int64_t rows, bool withBias, ProductActivation activation) {
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
  fresh->activation = activation;
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
                  ProductActivation activation, std::shared_ptr<PackedProduct>& packed) {
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
    at::Tensor out = fewRowsProduct(rows, weightIsNK ? weight.t() : weight, bias, activation);
    if (out.defined())
      return out.view(shape);
  }
  try {
    if (!packed || !packed->source.is_same(weight) || !fits(*packed, m, bias.defined(), activation)) {
      // The weight [K, N] stored transposed (each output's K weights contiguous): a weight already
      // stored as [N, K] rows (Gemm's transB weights; MatMul weights under --no-packed-weights) is
      // read in place, where the primitive's own layout (Tag::any, what packWeight makes) would be
      // a second copy. `source` keeps the tensor alive.
      dnnl::matmul::primitive_desc pd =
          productDesc(m, k, n, bias.defined(), activation, dnnl::memory::desc({k, n}, DataType::f32, Tag::ba));
      at::Tensor kn = weightIsNK ? weight.t() : weight; // a [K, N] view, any strides
      packed = makeProduct(pd, view(describe(kn), kn), m, bias.defined(), activation);
      packed->source = weight;
    }
    return runProduct(*packed, rows, bias, n, shape);
  } catch (const dnnl::error&) {
    return {};
  }
}

namespace {
// The panels of a [K, N] view (any strides), in a held buffer (counted as oneDNN's copies are).
std::shared_ptr<PackedWeight> packPanels(const at::Tensor& kn) {
  const std::int64_t k = kn.size(0), n = kn.size(1);
  auto packed = std::make_shared<PackedWeight>();
  packed->k = k;
  packed->n = n;
  HeldWeight copy = holdWeight(dnnl::memory::desc({cpu::panels::packedFloats(k, n)}, DataType::f32, Tag::a));
  packed->owner = std::move(copy.owner);
  packed->memory = copy.memory;
  auto* panels = static_cast<float*>(packed->memory.get_data_handle());
  cpu::panels::pack(kn.data_ptr<float>(), kn.stride(0), kn.stride(1), k, n, panels);
  packed->panels = panels;
  return packed;
}

// The panels' name for a product's activation.
cpu::panels::Activation panelActivation(ProductActivation activation) {
  switch (activation) {
  case ProductActivation::None: break;
  case ProductActivation::Gelu: return cpu::panels::Activation::Gelu;
  case ProductActivation::GeluTanh: return cpu::panels::Activation::GeluTanh;
  case ProductActivation::Relu: return cpu::panels::Activation::Relu;
  }
  return cpu::panels::Activation::None;
}

// rows [M, K] (contiguous) times the paneled weight, plus bias, then `activation`, in parts the
// threads take in turn.
at::Tensor panelProduct(const at::Tensor& rows, const PackedWeight& weight, const at::Tensor& bias,
                        ProductActivation activation) {
  at::Tensor out = at::empty({rows.size(0), weight.n}, rows.options());
  at::Tensor denseBias = bias.defined() ? bias.contiguous() : at::Tensor();
  const cpu::panels::Product product{rows.data_ptr<float>(), rows.size(0), weight.k, weight.n, weight.k,
                                     weight.panels, denseBias.defined() ? denseBias.data_ptr<float>() : nullptr,
                                     out.data_ptr<float>(), panelActivation(activation)};
  const int threads = at::get_num_threads(), parts = cpu::panels::partsFor(product, threads);
  std::atomic<int> nextPart{0}; // each thread takes the next part when it is free
  at::parallel_for(0, std::min(threads, parts), 1, [&](std::int64_t, std::int64_t) {
    for (int part = nextPart++; part < parts; part = nextPart++)
      cpu::panels::multiply(product, part, parts);
  });
  return out;
}
} // namespace

bool packsProductWeight(std::int64_t k, std::int64_t n) {
  if (!available() || k <= 0 || n <= 0)
    return false;
  if (cpu::panels::runsHere())
    return true;
  try {
    return hasInnerBlocks(
        productDesc(128, k, n, false, ProductActivation::None, dnnl::memory::desc({k, n}, DataType::f32, Tag::any)).weights_desc());
  } catch (const dnnl::error&) {
    return false;
  }
}

std::shared_ptr<PackedWeight> packWeight(const at::Tensor& kn) {
  if (!eligible(kn) || kn.dim() != 2 || kn.numel() == 0)
    return nullptr;
  const std::int64_t k = kn.size(0), n = kn.size(1);
  if (cpu::panels::runsHere())
    return packPanels(kn);
  try {
    // The layout does not depend on the row count, the bias or GELU (checked on this oneDNN for
    // 1 to 4096 rows and transformer and classifier shapes); a product whose primitive wants
    // another one reorders a copy of its own (linearPacked).
    dnnl::matmul::primitive_desc pd =
        productDesc(128, k, n, false, ProductActivation::None, dnnl::memory::desc({k, n}, DataType::f32, Tag::any));
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
  if (weight.panels) {
    cpu::panels::unpack(weight.panels, weight.k, weight.n, kn.data_ptr<float>());
    return kn;
  }
  dnnl::memory plain = view(describe(kn), kn);
  dnnl::memory source = weight.memory; // a handle: reorder takes non-const memories
  execute(dnnl::reorder(source, plain), {{DNNL_ARG_FROM, source}, {DNNL_ARG_TO, plain}});
  return kn;
}

std::array<std::int64_t, 2> packedWeightDims(const PackedWeight& weight) { return {weight.k, weight.n}; }

at::Tensor linearPacked(const at::Tensor& x, const std::shared_ptr<const PackedWeight>& weight, const at::Tensor& bias,
                        ProductActivation activation, std::shared_ptr<PackedProduct>& packed) {
  const std::int64_t k = weight->k, n = weight->n;
  if (!eligible(x) || x.dim() < 1 || x.numel() == 0 || x.size(-1) != k ||
      (bias.defined() && (!eligible(bias) || bias.dim() != 1 || bias.size(0) != n)))
    return {};
  at::Tensor rows = x.reshape({-1, k}).contiguous();
  const std::int64_t m = rows.size(0);
  std::vector<std::int64_t> shape = x.sizes().vec();
  shape.back() = n;
  if (weight->panels)
    return panelProduct(rows, *weight, bias, activation).view(shape);
  try {
    if (!packed || packed->packedSource != weight || !fits(*packed, m, bias.defined(), activation)) {
      // The packed weight is the one copy, shared; a primitive wanting another layout (none seen)
      // reorders a copy of its own.
      dnnl::matmul::primitive_desc pd =
          productDesc(m, k, n, bias.defined(), activation, dnnl::memory::desc({k, n}, DataType::f32, Tag::any));
      packed = makeProduct(pd, weight->memory, m, bias.defined(), activation);
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

} // namespace cleave::runtime::onednn
