// Unit tests of the CPU wing: oneDNN's products, convolutions (post-ops, 3-D, Winograd, blocked,
// cached per shape, weights shared and held only reordered), transposed convolutions, softmax and
// pooling against ATen; the weight plan's packed and reordered-only weights through an executor.
#include "runtime/cpu/onednn.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <set>

#include "runtime/cpu/cpu_switches.h"
#include "runtime/engine/executor.h"
#include "runtime/engine/executor_test_support.h"
#include "runtime/engine/fusion.h"
#include "runtime/engine/tensors.h"
#include "runtime/kernels/helpers.h"
#include "testing/test_graphs.h"

namespace cleave::runtime {
namespace {
using cleave::testing::TestGraph;
using namespace test_support;

TEST(OneDnn, ProductsEqualAtenForBothWeightLayoutsAndBroadcastBatches) {
  if (!onednn::available())
    GTEST_SKIP() << "built without oneDNN";
  at::manual_seed(3);
  at::Tensor x = at::randn({2, 5, 8}), kn = at::randn({8, 6}), bias = at::randn({6});
  std::shared_ptr<onednn::PackedProduct> packed;
  for (int run = 0; run < 2; ++run) { // the second run reuses the reordered weight
    at::Tensor y = onednn::linear(x, kn, false, bias, ProductActivation::None, packed);
    ASSERT_TRUE(y.defined());
    EXPECT_TRUE(at::allclose(y, at::matmul(x, kn) + bias, 1e-5, 1e-5));
  }
  // Each activation as the product's post-op: a primitive of its own (the cache is rebuilt), same
  // values as ATen's activation of the product.
  const at::Tensor biased = at::matmul(x, kn) + bias;
  for (const auto& [activation, expected] :
       {std::pair{ProductActivation::Gelu, at::gelu(biased)}, std::pair{ProductActivation::GeluTanh, at::gelu(biased, "tanh")},
        std::pair{ProductActivation::Relu, at::relu(biased)}}) {
    at::Tensor activated = onednn::linear(x, kn, false, bias, activation, packed);
    ASSERT_TRUE(activated.defined());
    EXPECT_TRUE(at::allclose(activated, expected, 1e-5, 1e-5));
  }
  std::shared_ptr<onednn::PackedProduct> kept = packed;
  at::Tensor nk = at::randn({6, 8}); // another weight: reordered afresh, [N, K] this time
  at::Tensor z = onednn::linear(x, nk, true, at::Tensor(), ProductActivation::None, packed);
  EXPECT_NE(packed.get(), kept.get());
  EXPECT_TRUE(at::allclose(z, at::matmul(x, nk.t()), 1e-5, 1e-5));
  // [N, K] rows are what the product reads: used in place, not copied. (So an in-place change to
  // the weight shows in the next product; the executor never changes a parameter in place.)
  nk.mul_(2);
  EXPECT_TRUE(at::allclose(onednn::linear(x, nk, true, at::Tensor(), ProductActivation::None, packed), 2 * z, 1e-5, 1e-5));
  // A [K, N] weight stored as rows (a transposed view: the executor's stored MatMul weights) too.
  at::Tensor rows = kn.t().contiguous().t();
  at::Tensor w = onednn::linear(x, rows, false, at::Tensor(), ProductActivation::None, packed);
  rows.mul_(-1);
  EXPECT_TRUE(at::allclose(onednn::linear(x, rows, false, at::Tensor(), ProductActivation::None, packed), -w, 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(w, at::matmul(x, kn), 1e-5, 1e-5));
  // Broadcast batch dims, and a transposed view read in place.
  at::Tensor a = at::randn({3, 1, 4, 5}), b = at::randn({2, 6, 5}).transpose(-1, -2);
  at::Tensor product = onednn::batchedMatmul(a, b);
  ASSERT_TRUE(product.defined());
  EXPECT_EQ(product.sizes().vec(), (std::vector<std::int64_t>{3, 2, 4, 6}));
  EXPECT_TRUE(at::allclose(product, at::matmul(a, b), 1e-5, 1e-5));
  // Not float32: left to ATen.
  EXPECT_FALSE(onednn::batchedMatmul(a.to(at::kDouble), b.to(at::kDouble)).defined());
}

// Products of a few rows (a batch-1 classifier head) read the weight as it is stored, with no
// reordered copy; more rows, or a weight view with no unit-stride dim, take the primitive.
TEST(OneDnn, FewRowProductsReadTheStoredWeight) {
  if (!onednn::available())
    GTEST_SKIP() << "built without oneDNN";
  at::manual_seed(5);
  at::Tensor kn = at::randn({8, 6}), bias = at::randn({6}), biasBefore = bias.clone();
  struct Layout {
    const char* name;
    at::Tensor weight;
    bool weightIsNK;
  };
  const Layout layouts[] = {{"[K, N] rows", kn, false},
                            {"[N, K] rows", kn.t().contiguous(), true},
                            {"[K, N] view of [N, K] rows", kn.t().contiguous().t(), false}};
  for (std::int64_t rows : {1, 4}) {
    at::Tensor x = at::randn({1, rows, 8});
    for (const Layout& layout : layouts)
      for (bool withBias : {false, true})
        for (ProductActivation activation : {ProductActivation::None, ProductActivation::Gelu,
                                             ProductActivation::GeluTanh, ProductActivation::Relu}) {
          SCOPED_TRACE(std::string(layout.name) + ", rows " + std::to_string(rows) + (withBias ? ", bias" : "") +
                       ", activation " + std::to_string(static_cast<int>(activation)));
          std::shared_ptr<onednn::PackedProduct> packed;
          at::Tensor b = withBias ? bias : at::Tensor();
          at::Tensor y = onednn::linear(x, layout.weight, layout.weightIsNK, b, activation, packed);
          ASSERT_TRUE(y.defined());
          EXPECT_FALSE(packed) << "a few rows need no reordered weight";
          at::Tensor expected = at::matmul(x, kn);
          if (withBias)
            expected = expected + bias;
          activateInPlace(expected, activation);
          EXPECT_EQ(y.sizes().vec(), expected.sizes().vec());
          EXPECT_TRUE(at::allclose(y, expected, 1e-5, 1e-5));
          EXPECT_TRUE(at::equal(bias, biasBefore)) << "the product wrote into its bias";
        }
  }
  std::shared_ptr<onednn::PackedProduct> packed;
  at::Tensor five = at::randn({5, 8});
  EXPECT_TRUE(at::allclose(onednn::linear(five, kn, false, bias, ProductActivation::None, packed), at::matmul(five, kn) + bias, 1e-5, 1e-5));
  EXPECT_TRUE(packed) << "five rows take the primitive";
  packed.reset();
  at::Tensor strided = at::randn({8, 12}).slice(1, 0, 12, 2); // no unit-stride dim
  at::Tensor one = at::randn({1, 8});
  EXPECT_TRUE(at::allclose(onednn::linear(one, strided, false, at::Tensor(), ProductActivation::None, packed), at::matmul(one, strided),
                           1e-5, 1e-5));
  EXPECT_TRUE(packed) << "a weight with no unit-stride dim takes the primitive";
}

// oneDNN's direct convolution against at::conv2d: groups (depthwise), strides, dilations,
// asymmetric pads, a bias, and each post-op (a residual sum, then ReLU, Clip or HardSwish).
TEST(OneDnn, ConvolutionsWithPostOpsEqualAten) {
  if (!onednn::available())
    GTEST_SKIP() << "built without oneDNN";
  using Activation = onednn::ConvPostOps::Activation;
  struct Case {
    std::int64_t channels, outChannels, groups, kernel, stride, dilation;
    std::vector<std::int64_t> padBegin, padEnd;
    onednn::ConvPostOps post;
  };
  const Case cases[] = {
      {8, 16, 1, 3, 1, 1, {1, 1}, {1, 1}, {}},
      {8, 8, 8, 3, 2, 1, {1, 1}, {1, 1}, {false, Activation::Relu}},        // depthwise, stride 2
      {6, 4, 2, 3, 1, 2, {0, 1}, {2, 1}, {false, Activation::Clip, 0.0f, 6.0f}}, // groups, dilation, asymmetric
      {8, 8, 1, 1, 1, 1, {0, 0}, {0, 0}, {true, Activation::Relu}},         // 1x1 with the residual
      {8, 12, 4, 5, 2, 1, {2, 2}, {2, 2}, {false, Activation::HardSwish}},
      {8, 8, 1, 1, 1, 1, {0, 0}, {0, 0}, {false, Activation::HardSigmoid, 0.0f, 0.0f, 1.0f / 6.0f, 0.5f}},
      {8, 8, 8, 3, 1, 1, {1, 1}, {1, 1}, {false, Activation::Swish}},
  };
  at::manual_seed(11);
  for (const Case& k : cases) {
    at::Tensor x = at::randn({2, k.channels, 11, 9}), w = at::randn({k.outChannels, k.channels / k.groups, k.kernel, k.kernel});
    at::Tensor bias = at::randn({k.outChannels});
    at::Tensor padded = at::constant_pad_nd(x, {k.padBegin[1], k.padEnd[1], k.padBegin[0], k.padEnd[0]}, 0.0);
    at::Tensor want = at::conv2d(padded, w, bias, at::IntArrayRef{k.stride, k.stride}, at::IntArrayRef{0, 0},
                                 at::IntArrayRef{k.dilation, k.dilation}, k.groups);
    at::Tensor residual = at::randn(want.sizes()), residualBefore = residual.clone();
    if (k.post.addResidual)
      want = want + residual;
    if (k.post.activation == Activation::Relu)
      want = at::relu(want);
    else if (k.post.activation == Activation::Clip)
      want = at::clamp(want, k.post.clipLow, k.post.clipHigh);
    else if (k.post.activation == Activation::HardSwish)
      want = at::hardswish(want);
    else if (k.post.activation == Activation::HardSigmoid)
      want = at::clamp(want * k.post.alpha + k.post.beta, 0.0, 1.0);
    else if (k.post.activation == Activation::Swish)
      want = want * at::sigmoid(want);
    std::shared_ptr<onednn::PackedConvolution> packed;
    for (int run = 0; run < 2; ++run) { // the second reuses the primitive and the reordered weight
      // The second run may write into a channels-last copy of the residual (the caller's scratch).
      at::Tensor scratch = residual.contiguous(at::MemoryFormat::ChannelsLast).clone(at::MemoryFormat::ChannelsLast);
      at::Tensor got = onednn::convolution(run ? x.contiguous(at::MemoryFormat::ChannelsLast) : x, w, bias,
                                           {k.stride, k.stride}, k.padBegin, k.padEnd, {k.dilation, k.dilation},
                                           k.groups, k.post, run ? scratch : residual, run == 1, packed);
      ASSERT_TRUE(got.defined());
      EXPECT_EQ(got.data_ptr() == scratch.data_ptr(), run == 1 && k.post.addResidual);
      EXPECT_TRUE(at::equal(residual, residualBefore)); // a residual that is not scratch is only read
      EXPECT_TRUE(got.is_contiguous(at::MemoryFormat::ChannelsLast));
      EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-4)) << "groups " << k.groups << " kernel " << k.kernel;
    }
  }
  // What it does not take, it refuses (the caller runs ATen): float64, autograd, a bad group count.
  std::shared_ptr<onednn::PackedConvolution> packed;
  at::Tensor x = at::randn({1, 4, 5, 5}), w = at::randn({4, 4, 3, 3});
  EXPECT_FALSE(onednn::convolution(x.to(at::kDouble), w.to(at::kDouble), {}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, {},
                                   {}, false, packed).defined());
  EXPECT_FALSE(onednn::convolution(x, w.clone().requires_grad_(true), {}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, {}, {},
                                   false, packed).defined());
  EXPECT_FALSE(onednn::convolution(x, w, {}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 3, {}, {}, false, packed).defined());
  // A residual of another shape (a broadcast Add) is refused before the cache is touched, so the
  // plain convolution the caller falls back to keeps its primitive.
  ASSERT_TRUE(onednn::convolution(x, w, {}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, {}, {}, false, packed).defined());
  const std::shared_ptr<onednn::PackedConvolution> plain = packed;
  EXPECT_FALSE(onednn::convolution(x, w, {}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, {true, Activation::Relu},
                                   at::randn({1, 4, 1, 1}), true, packed).defined());
  EXPECT_EQ(packed, plain);
}

// 3-D convolutions (video models' Conv3d) run on oneDNN too: strided, dilated, grouped, with
// asymmetric pads and with a residual and Relu fused; each equals at::conv3d, the output is
// ChannelsLast3d, and a second call reuses the primitive. Mismatched ranks are refused.
TEST(OneDnn, ThreeDimensionalConvolutionsEqualAten) {
  if (!onednn::available())
    GTEST_SKIP() << "built without oneDNN";
  using Activation = onednn::ConvPostOps::Activation;
  struct Case {
    std::int64_t channels, outChannels, groups, stride, dilation;
    std::vector<std::int64_t> padBegin, padEnd;
    onednn::ConvPostOps post;
  };
  const std::vector<Case> cases = {{8, 16, 1, 1, 1, {1, 1, 1}, {1, 1, 1}, {}},
                                   {8, 8, 1, 2, 1, {0, 1, 1}, {1, 0, 2}, {false, Activation::Relu}},
                                   {12, 6, 3, 1, 2, {2, 2, 2}, {2, 2, 2}, {}},
                                   {16, 16, 1, 1, 1, {1, 1, 1}, {1, 1, 1}, {true, Activation::Relu}}};
  at::manual_seed(23);
  for (const Case& k : cases) {
    at::Tensor x = at::randn({1, k.channels, 5, 9, 8}), w = at::randn({k.outChannels, k.channels / k.groups, 3, 3, 3});
    at::Tensor bias = at::randn({k.outChannels});
    at::Tensor padded = at::constant_pad_nd(
        x, {k.padBegin[2], k.padEnd[2], k.padBegin[1], k.padEnd[1], k.padBegin[0], k.padEnd[0]}, 0.0);
    at::Tensor want = at::conv3d(padded, w, bias, at::IntArrayRef{k.stride, k.stride, k.stride}, at::IntArrayRef{0, 0, 0},
                                 at::IntArrayRef{k.dilation, k.dilation, k.dilation}, k.groups);
    at::Tensor residual = at::randn(want.sizes()).contiguous(at::MemoryFormat::ChannelsLast3d);
    if (k.post.addResidual)
      want = want + residual;
    if (k.post.activation == Activation::Relu)
      want = at::relu(want);
    std::shared_ptr<onednn::PackedConvolution> packed;
    for (int run = 0; run < 2; ++run) {
      const onednn::PackedConvolution* before = packed.get();
      at::Tensor got = onednn::convolution(x, w, bias, {k.stride, k.stride, k.stride}, k.padBegin, k.padEnd,
                                           {k.dilation, k.dilation, k.dilation}, k.groups, k.post, residual, false,
                                           packed);
      ASSERT_TRUE(got.defined()) << k.channels << " channels, groups " << k.groups;
      EXPECT_TRUE(got.is_contiguous(at::MemoryFormat::ChannelsLast3d));
      EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-4)) << k.channels << " channels, groups " << k.groups;
      if (run == 1) {
        EXPECT_EQ(packed.get(), before); // the primitive and reordered weight were kept
      }
    }
  }
  std::shared_ptr<onednn::PackedConvolution> packed;
  EXPECT_FALSE(onednn::convolution(at::randn({1, 4, 3, 5, 5}), at::randn({4, 4, 3, 3}), {}, {1, 1}, {1, 1}, {1, 1},
                                   {1, 1}, 1, {}, {}, false, packed)
                   .defined());
  EXPECT_FALSE(onednn::convolution(at::randn({1, 4, 3, 5, 5}), at::randn({4, 4, 3, 3, 3}), {}, {1, 1}, {1, 1},
                                   {1, 1}, {1, 1}, 1, {}, {}, false, packed)
                   .defined());
}

// One cache shared by nodes that run one weight at several input shapes (a detector's head over
// its pyramid levels) keeps a primitive per shape: later runs rebuild none, results equal ATen's,
// shapes whose primitives want one weight layout share the reordered copy, and a shape past
// kMaxShapes replaces the oldest.
TEST(OneDnn, ConvolutionCacheKeepsAPrimitivePerShape) {
  if (!onednn::available())
    GTEST_SKIP() << "built without oneDNN";
  at::manual_seed(47);
  const at::Tensor w = at::randn({32, 16, 3, 3}), bias = at::randn({32});
  const onednn::ConvPostOps relu{false, onednn::ConvPostOps::Activation::Relu};
  std::vector<at::Tensor> levels;
  for (std::int64_t side : {20, 10, 5, 3})
    levels.push_back(at::randn({1, 16, side, side}).contiguous(at::MemoryFormat::ChannelsLast));
  onednn::ConvolutionCache cache;
  auto run = [&](const at::Tensor& x) {
    std::shared_ptr<onednn::PackedConvolution>& entry = onednn::cacheEntryFor(cache, x.sizes());
    at::Tensor y = onednn::convolution(x, w, bias, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, relu, {}, false, entry, &cache);
    return std::make_pair(y, static_cast<const onednn::PackedConvolution*>(entry.get()));
  };
  std::vector<const onednn::PackedConvolution*> first;
  for (int pass = 0; pass < 3; ++pass)
    for (std::size_t i = 0; i < levels.size(); ++i) {
      auto [y, packed] = run(levels[i]);
      ASSERT_TRUE(y.defined());
      EXPECT_TRUE(at::allclose(y, at::relu(at::conv2d(levels[i].contiguous(), w, bias, 1, 1)), 1e-4, 1e-4));
      if (pass == 0)
        first.push_back(packed);
      else
        EXPECT_EQ(packed, first[i]) << "level " << i << " rebuilt on pass " << pass;
    }
  ASSERT_EQ(cache.byShape.size(), levels.size());
  std::size_t shared = 0;
  for (std::size_t i = 0; i < first.size(); ++i)
    for (std::size_t j = i + 1; j < first.size(); ++j)
      shared += onednn::shareReorderedWeight(*first[i], *first[j]) ? 1 : 0;
  EXPECT_GT(shared, 0u); // 10x10, 5x5 and 3x3 run the same direct kernel, on one weight layout
  for (std::int64_t side = 30; cache.byShape.size() < onednn::ConvolutionCache::kMaxShapes || side < 40; ++side)
    ASSERT_TRUE(run(at::randn({1, 16, side, 4})).first.defined());
  EXPECT_EQ(cache.byShape.size(), onednn::ConvolutionCache::kMaxShapes);
  EXPECT_FALSE(onednn::cacheEntryFor(cache, levels[0].sizes())); // the oldest shape was dropped
}

// A 3x3 stride-1 convolution with channels in multiples of 16 runs as Winograd's (where this CPU
// has the kernel) and equals at::conv2d within the rounding of its transforms; the channels-last
// input is only read; the smaller or strided ones stay on the direct kernel.
TEST(OneDnn, WinogradConvolutionsEqualAten) {
  if (!onednn::available())
    GTEST_SKIP() << "built without oneDNN";
  using Activation = onednn::ConvPostOps::Activation;
  struct Case {
    std::int64_t batch, channels, outChannels, height, width;
    onednn::ConvPostOps post;
  };
  const Case cases[] = {{1, 64, 64, 14, 14, {false, Activation::Relu}},
                        {2, 16, 64, 20, 17, {}},
                        {1, 128, 64, 28, 15, {false, Activation::Relu}}};
  at::manual_seed(5);
  bool anyWinograd = false;
  for (const Case& k : cases) {
    at::Tensor x = at::randn({k.batch, k.channels, k.height, k.width}).contiguous(at::MemoryFormat::ChannelsLast);
    at::Tensor w = at::randn({k.outChannels, k.channels, 3, 3}), bias = at::randn({k.outChannels});
    const at::Tensor xBefore = x.clone();
    at::Tensor want = at::conv2d(x.contiguous(), w, bias, 1, 1);
    if (k.post.activation == Activation::Relu)
      want = at::relu(want);
    std::shared_ptr<onednn::PackedConvolution> packed;
    for (int run = 0; run < 2; ++run) {
      at::Tensor got = onednn::convolution(x, w, bias, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, k.post, {}, false, packed);
      ASSERT_TRUE(got.defined());
      EXPECT_TRUE(got.is_contiguous(at::MemoryFormat::ChannelsLast));
      EXPECT_TRUE(at::equal(x, xBefore));
      // Sums of 9 * channels products of N(0, 1) values: the largest |want| is 47-131 here. The
      // transforms' rounding stays under 1e-5 of it (measured: 3e-7 to 1.2e-6, 3e-5 to 6e-5 absolute).
      const double scale = want.abs().max().item<double>();
      EXPECT_LT((got - want).abs().max().item<double>(), 1e-5 * scale) << k.channels << " channels";
    }
    anyWinograd = anyWinograd || onednn::usesWinograd(*packed);
  }
  if (!anyWinograd)
    GTEST_SKIP() << "this CPU has no oneDNN Winograd kernel (it needs AVX-512): checked the direct path only";
  // Strided, grouped, small or with a residual: the direct kernel.
  std::shared_ptr<onednn::PackedConvolution> packed;
  at::Tensor x = at::randn({1, 64, 14, 14}), w = at::randn({64, 64, 3, 3});
  ASSERT_TRUE(onednn::convolution(x, w, {}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1, {}, {}, false, packed).defined());
  EXPECT_FALSE(onednn::usesWinograd(*packed));
  ASSERT_TRUE(onednn::convolution(x.narrow(2, 0, 7).narrow(3, 0, 7), w, {}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, {},
                                  {}, false, packed)
                  .defined());
  EXPECT_FALSE(onednn::usesWinograd(*packed));
  ASSERT_TRUE(onednn::convolution(x, w, {}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, {true, Activation::Relu},
                                  at::randn({1, 64, 14, 14}), false, packed)
                  .defined());
  EXPECT_FALSE(onednn::usesWinograd(*packed));
  // Not where the cache forbids it (cleave run --no-winograd).
  onednn::ConvolutionCache directOnly;
  directOnly.allowWinograd = false;
  const at::Tensor wide = at::randn({1, 64, 28, 28}).contiguous(at::MemoryFormat::ChannelsLast);
  ASSERT_TRUE(onednn::convolution(wide, w, {}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, {}, {}, false,
                                  onednn::cacheEntryFor(directOnly, wide.sizes()), &directOnly)
                  .defined());
  EXPECT_FALSE(onednn::usesWinograd(*onednn::cacheEntryFor(directOnly, wide.sizes())));
  // 16 outputs (SSD300's 512-to-16 box head ran 3.5x slower as Winograd's).
  ASSERT_TRUE(onednn::convolution(x, w.narrow(0, 0, 16), {}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, {}, {}, false, packed)
                  .defined());
  EXPECT_FALSE(onednn::usesWinograd(*packed));
}

// Where oneDNN's channels-last kernel is not a native one (AVX2), a 2-D ungrouped convolution
// with a kernel larger than 1x1 and no residual runs in its blocked layout with reorders around
// it: channels-last in and out, the input only read, results equal the channels-last kernel's
// within rounding. 1x1, grouped and residual convolutions, and a cache that forbids it, stay
// channels-last.
TEST(OneDnn, BlockedDirectConvolutionsEqualChannelsLastOnes) {
  if (!onednn::available())
    GTEST_SKIP() << "built without oneDNN";
  using Activation = onednn::ConvPostOps::Activation;
  struct Case {
    std::int64_t channels, outChannels, kernel, stride, groups;
    bool residual, mayRunBlocked;
  };
  const Case cases[] = {{64, 64, 3, 1, 1, false, true},   {32, 48, 3, 2, 1, false, true},
                        {16, 32, 5, 1, 1, false, true},   {3, 16, 7, 2, 1, false, true}, // an image's stem
                        {64, 64, 1, 1, 1, false, false},
                        {64, 64, 3, 1, 4, false, false},  {64, 64, 3, 1, 1, true, false}};
  onednn::ConvolutionCache blockedAllowed, channelsLastOnly;
  blockedAllowed.allowWinograd = channelsLastOnly.allowWinograd = false; // the direct kernels only
  channelsLastOnly.allowBlockedDirect = false;
  at::manual_seed(31);
  bool anyBlocked = false;
  for (const Case& k : cases) {
    const at::Tensor x = at::randn({1, k.channels, 20, 18}).contiguous(at::MemoryFormat::ChannelsLast);
    const at::Tensor w = at::randn({k.outChannels, k.channels / k.groups, k.kernel, k.kernel}),
                     bias = at::randn({k.outChannels});
    const std::int64_t pad = k.kernel / 2, outSide = (20 + 2 * pad - k.kernel) / k.stride + 1,
                       outWidth = (18 + 2 * pad - k.kernel) / k.stride + 1;
    const at::Tensor residual = k.residual ? at::randn({1, k.outChannels, outSide, outWidth}) : at::Tensor();
    const at::Tensor xBefore = x.clone();
    const onednn::ConvPostOps post{k.residual, Activation::Relu};
    auto convolve = [&](onednn::ConvolutionCache& cache) {
      std::shared_ptr<onednn::PackedConvolution>& entry = onednn::cacheEntryFor(cache, x.sizes());
      entry.reset();
      at::Tensor out = onednn::convolution(x, w, bias, {k.stride, k.stride}, {pad, pad}, {pad, pad}, {1, 1},
                                           k.groups, post, residual, false, entry, &cache);
      return std::make_pair(out, entry ? onednn::runsBlocked(*entry) : false);
    };
    auto [got, blocked] = convolve(blockedAllowed);
    auto [want, wantBlocked] = convolve(channelsLastOnly);
    ASSERT_TRUE(got.defined() && want.defined());
    EXPECT_FALSE(wantBlocked);
    EXPECT_TRUE(!blocked || k.mayRunBlocked) << k.kernel << "x" << k.kernel << ", groups " << k.groups;
    anyBlocked = anyBlocked || blocked;
    EXPECT_TRUE(got.is_contiguous(at::MemoryFormat::ChannelsLast));
    EXPECT_TRUE(at::equal(x, xBefore));
    const double scale = want.abs().max().item<double>();
    EXPECT_LT((got - want).abs().max().item<double>(), 1e-5 * scale) << k.kernel << "x" << k.kernel;
  }
  if (!anyBlocked)
    GTEST_SKIP() << "this CPU's channels-last kernels are oneDNN's native ones (brgconv): nothing ran blocked";
}

// A convolution that runs blocked returns its output blocked when asked, and the next one that
// runs blocked reads it as it is. A convolution that does not (a 1x1, a residual) reorders blocked
// operands to channels-last first: every result equals, bit for bit, the one from channels-last
// operands, so a cut model (whose convolutions after a seam read channels-last values) computes
// what the whole one does. ATen refuses a blocked activation with an error (never reads blocked
// data as plain), and toDense gives its values back.
TEST(OneDnn, BlockedActivationsPassFromConvolutionToConvolution) {
  if (!onednn::available())
    GTEST_SKIP() << "built without oneDNN";
  using Activation = onednn::ConvPostOps::Activation;
  const auto lastChannels = at::MemoryFormat::ChannelsLast;
  at::manual_seed(41);
  const at::Tensor x = at::randn({1, 32, 14, 12}).contiguous(lastChannels);
  const at::Tensor w3 = at::randn({32, 32, 3, 3}), b3 = at::randn({32}), second3 = at::randn({32, 32, 3, 3}),
                   w1 = at::randn({32, 32, 1, 1});
  onednn::ConvolutionCache cache;
  cache.allowWinograd = false;
  // conv(in) [+ residual], then Relu: the output and whether it ran blocked.
  auto convolve = [&](const at::Tensor& in, const at::Tensor& w, const at::Tensor& residual, bool mayReturnBlocked) {
    const std::int64_t pad = w.size(2) / 2;
    std::shared_ptr<onednn::PackedConvolution>& entry = onednn::cacheEntryFor(cache, in.sizes());
    at::Tensor out = onednn::convolution(in, w, w.is_same(w3) ? b3 : at::Tensor(), {1, 1}, {pad, pad}, {pad, pad},
                                         {1, 1}, 1, {residual.defined(), Activation::Relu}, residual, false, entry,
                                         &cache, mayReturnBlocked);
    return std::make_pair(out, entry && onednn::runsBlocked(*entry));
  };
  const at::Tensor dense = convolve(x, w3, {}, false).first, blocked = convolve(x, w3, {}, true).first;
  ASSERT_TRUE(dense.defined() && blocked.defined());
  EXPECT_FALSE(onednn::isBlockedActivation(dense));
  EXPECT_TRUE(dense.is_contiguous(lastChannels));
  if (!onednn::isBlockedActivation(blocked))
    GTEST_SKIP() << "this CPU's channels-last kernels are oneDNN's native ones (brgconv): nothing ran blocked";
  EXPECT_EQ(blocked.sizes(), dense.sizes());
  EXPECT_TRUE(inPrivateLayout(blocked));
  EXPECT_TRUE(at::equal(denseFromPrivateLayout(blocked), dense)); // one primitive; the reorder only moves values
  EXPECT_THROW(at::relu(blocked), c10::Error);
  // Max pooling reads it in its own layout; a maximum is the same in any layout.
  const at::Tensor pooledDense =
      onednn::pool(dense, onednn::PoolKind::Max, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, false);
  for (const bool mayReturnBlocked : {true, false}) {
    const at::Tensor pooled =
        onednn::pool(blocked, onednn::PoolKind::Max, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, false, mayReturnBlocked);
    ASSERT_TRUE(pooled.defined());
    EXPECT_EQ(onednn::isBlockedActivation(pooled), mayReturnBlocked);
    EXPECT_TRUE(at::equal(denseFromPrivateLayout(pooled), pooledDense));
  }
  EXPECT_FALSE(onednn::pool(blocked, onednn::PoolKind::AverageWithoutPadding, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1},
                            false, true)
                   .defined()); // averages: channels-last only (the caller reorders)
  // The next 3x3 convolution reads the blocked value as it is.
  const at::Tensor want3 = convolve(dense, second3, {}, false).first;
  for (const bool mayReturnBlocked : {true, false}) {
    const auto [got, ranBlocked] = convolve(blocked, second3, {}, mayReturnBlocked);
    ASSERT_TRUE(got.defined());
    EXPECT_TRUE(ranBlocked);
    EXPECT_EQ(onednn::isBlockedActivation(got), mayReturnBlocked);
    EXPECT_TRUE(at::equal(denseFromPrivateLayout(got), want3)) << "output blocked " << mayReturnBlocked;
  }
  // A 1x1 convolution with a residual runs channels-last whatever its operands' layouts.
  const at::Tensor want1 = convolve(dense, w1, dense, false).first;
  for (const bool inputBlocked : {true, false})
    for (const bool residualBlocked : {true, false}) {
      const at::Tensor residual = residualBlocked ? blocked : dense;
      const auto [got, ranBlocked] = convolve(inputBlocked ? blocked : dense, w1, residual, true);
      ASSERT_TRUE(got.defined());
      EXPECT_FALSE(ranBlocked);
      EXPECT_FALSE(onednn::isBlockedActivation(got));
      EXPECT_TRUE(at::equal(got, want1)) << "input blocked " << inputBlocked << ", residual blocked " << residualBlocked;
      EXPECT_TRUE(at::equal(denseFromPrivateLayout(residual), dense)); // not the callee's to overwrite: untouched
    }
}

// Winograd's transformed weight costs at most 32 times the output's bytes beyond the plain
// weight's: a 512x512 layer at 19x19 (F(4x4, 3x3) on AVX-512: 28 MiB more for a 0.7 MiB output)
// stays on the direct kernel; at 38x38 it may take Winograd's.
TEST(OneDnn, WinogradOnlyWhereItsWeightCopyIsAffordable) {
  if (!onednn::available())
    GTEST_SKIP() << "built without oneDNN";
  at::manual_seed(6);
  const at::Tensor w = at::randn({512, 512, 3, 3});
  bool anyWinograd = false;
  for (std::int64_t side : {19, 38}) {
    const at::Tensor x = at::randn({1, 512, side, side}).contiguous(at::MemoryFormat::ChannelsLast);
    std::shared_ptr<onednn::PackedConvolution> packed;
    ASSERT_TRUE(onednn::convolution(x, w, {}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, {}, {}, false, packed).defined());
    const std::size_t plain = static_cast<std::size_t>(w.numel()) * sizeof(float);
    const std::size_t output = static_cast<std::size_t>(512 * side * side) * sizeof(float);
    const std::size_t copy = onednn::reorderedWeightBytes(*packed);
    if (onednn::usesWinograd(*packed)) {
      anyWinograd = true;
      EXPECT_LE(copy, plain + 32 * output) << side << "x" << side;
    }
  }
  if (!anyWinograd)
    GTEST_SKIP() << "this CPU has no oneDNN Winograd kernel for 512 channels";
}

// Convolution caches given one pool of reordered weights (an executor's nodes) share a copy per
// layout of one weight across caches; caches with pools of their own do not; the pool holds its
// copies weakly, so they are freed with the last packed convolution using them.
TEST(OneDnn, ReorderedWeightsAreSharedAcrossCachesOfOnePool) {
  if (!onednn::available())
    GTEST_SKIP() << "built without oneDNN";
  at::manual_seed(48);
  const at::Tensor w = at::randn({32, 16, 3, 3});
  const auto pool = std::make_shared<onednn::ReorderedWeights>();
  onednn::ConvolutionCache first, second, apart;
  first.weights = second.weights = pool;
  auto pack = [&](onednn::ConvolutionCache& cache, std::int64_t side) {
    const at::Tensor x = at::randn({1, 16, side, side}).contiguous(at::MemoryFormat::ChannelsLast);
    std::shared_ptr<onednn::PackedConvolution>& entry = onednn::cacheEntryFor(cache, x.sizes());
    at::Tensor y = onednn::convolution(x, w, {}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, {}, {}, false, entry, &cache);
    EXPECT_TRUE(y.defined());
    EXPECT_TRUE(at::allclose(y, at::conv2d(x.contiguous(), w, {}, 1, 1), 1e-4, 1e-4));
    return entry;
  };
  // 10x10 and 5x5 run the same direct kernel, on one weight layout.
  std::shared_ptr<onednn::PackedConvolution> a = pack(first, 10), b = pack(second, 5), c = pack(apart, 5);
  EXPECT_TRUE(onednn::shareReorderedWeight(*a, *b));
  EXPECT_FALSE(onednn::shareReorderedWeight(*b, *c));
  const auto& copies = pool->byWeight.at(w.unsafeGetTensorImpl());
  ASSERT_EQ(copies.size(), 1u);
  first.byShape.clear();
  second.byShape.clear();
  a.reset();
  EXPECT_FALSE(copies[0].expired()); // b still reads it
  b.reset();
  EXPECT_TRUE(copies[0].expired());
  // A weight made anew for every call (an op's result) leaves no key behind once its copies die
  // (the weights are kept, so no later one takes an earlier one's address and its key).
  std::vector<at::Tensor> madeAnew;
  for (int call = 0; call < 300; ++call) {
    const at::Tensor fresh = madeAnew.emplace_back(w.clone());
    const at::Tensor x = at::randn({1, 16, 5, 5}).contiguous(at::MemoryFormat::ChannelsLast);
    std::shared_ptr<onednn::PackedConvolution>& entry = onednn::cacheEntryFor(first, x.sizes());
    ASSERT_TRUE(onednn::convolution(x, fresh, {}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, {}, {}, false, entry, &first)
                    .defined());
  }
  EXPECT_LE(pool->byWeight.size(), 129u);
}

// A weight held only reordered: its stand-in carries the dims, not the data; convolutions through
// the pool equal ATen's; a Winograd copy (which does not convert back) keeps the plain tensor, the
// first direct-kernel copy lets it go; shapes wanted later, and plainWeight(), get it back from
// that copy bit for bit.
TEST(OneDnn, ConvolutionWeightsHeldOnlyReorderedEqualTheirPlainOnes) {
  if (!onednn::available())
    GTEST_SKIP() << "built without oneDNN";
  at::manual_seed(49);
  at::Tensor w = at::randn({32, 16, 3, 3});
  const at::Tensor original = w.clone();
  const auto pool = std::make_shared<onednn::ReorderedWeights>();
  onednn::ConvolutionCache cache;
  cache.weights = pool;
  const at::Tensor standIn = onednn::holdOnlyReordered(*pool, w);
  ASSERT_TRUE(standIn.defined());
  EXPECT_TRUE(standIn.is_meta());
  EXPECT_EQ(standIn.sizes(), w.sizes());
  EXPECT_EQ(w.use_count(), 2); // the test's and the pool's
  auto convolve = [&](std::int64_t side) {
    const at::Tensor x = at::randn({1, 16, side, side});
    std::shared_ptr<onednn::PackedConvolution>& entry = onednn::cacheEntryFor(cache, x.sizes());
    const at::Tensor y = onednn::convolution(x.contiguous(at::MemoryFormat::ChannelsLast), standIn, {}, {1, 1},
                                             {1, 1}, {1, 1}, {1, 1}, 1, {}, {}, false, entry, &cache);
    EXPECT_TRUE(y.defined());
    if (y.defined())
      EXPECT_TRUE(at::allclose(y, at::conv2d(x, original, {}, 1, 1), 1e-4, 1e-4)) << side;
    return entry;
  };
  const auto first = convolve(28);
  if (onednn::usesWinograd(*first)) { // Winograd's copy (where this CPU has it: AVX-512): the plain tensor stays
    EXPECT_EQ(onednn::releasedPlainWeights(*pool), 0u);
    EXPECT_EQ(w.use_count(), 2);
  }
  const auto direct = convolve(8); // the direct kernel's blocked copy converts back: the plain one goes
  ASSERT_FALSE(onednn::usesWinograd(*direct));
  EXPECT_EQ(onednn::releasedPlainWeights(*pool), 1u);
  EXPECT_EQ(w.use_count(), 1);
  EXPECT_TRUE(at::equal(onednn::plainWeight(*pool, standIn), original));
  cache.byShape.clear(); // every cached primitive gone: the kept copy still holds the weight
  convolve(20);
  convolve(6);
  EXPECT_TRUE(at::equal(onednn::plainWeight(*pool, standIn), original));
  EXPECT_FALSE(onednn::plainWeight(*pool, at::empty({32, 16, 3, 3}, at::kMeta)).defined()); // not the pool's
  EXPECT_FALSE(onednn::holdOnlyReordered(*pool, at::randn({4, 4})).defined()); // not a convolution weight
  // Grouped (depthwise: oneDNN's goihw dims) and 3-D weights convert back too.
  struct Case {
    std::vector<std::int64_t> weight, input;
    std::int64_t groups;
  };
  for (const Case& shape : {Case{{16, 1, 3, 3}, {1, 16, 9, 9}, 16}, Case{{8, 4, 3, 3, 3}, {1, 4, 5, 6, 6}, 1}}) {
    const auto own = std::make_shared<onednn::ReorderedWeights>();
    onednn::ConvolutionCache ownCache;
    ownCache.weights = own;
    const at::Tensor weight = at::randn(shape.weight), x = at::randn(shape.input);
    const at::Tensor heldIn = onednn::holdOnlyReordered(*own, weight.clone()); // the pool's is the only copy
    const std::size_t spatial = shape.weight.size() - 2;
    const std::vector<std::int64_t> ones(spatial, 1), zeros(spatial, 0);
    const at::MemoryFormat lastChannels =
        spatial == 3 ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::ChannelsLast;
    const at::Tensor y =
        onednn::convolution(x.contiguous(lastChannels), heldIn, {}, ones, zeros, zeros, ones, shape.groups, {}, {},
                            false, onednn::cacheEntryFor(ownCache, x.sizes()), &ownCache);
    ASSERT_TRUE(y.defined()) << spatial;
    EXPECT_TRUE(at::allclose(y, at::convolution(x, weight, {}, ones, zeros, ones, false, zeros, shape.groups), 1e-4,
                             1e-4));
    EXPECT_EQ(onednn::releasedPlainWeights(*own), 1u);
    EXPECT_TRUE(at::equal(onednn::plainWeight(*own, heldIn), weight));
  }
}

// A depthwise convolution oneDNN would run on its gemm fallback (ConvNeXt's 7x7 window over a 2x2
// image) is declined, so ATen's depthwise kernel runs it; the decision is kept per shape (the same
// cache entry, no primitive made again), and a depthwise shape oneDNN's own kernel takes runs.
TEST(OneDnn, DepthwiseConvolutionsOnGemmAreLeftToAten) {
  if (!onednn::available())
    GTEST_SKIP() << "built without oneDNN";
  at::manual_seed(31);
  const std::int64_t channels = 64;
  const at::Tensor w = at::randn({channels, 1, 7, 7}), bias = at::randn({channels});
  auto run = [&](const at::Tensor& x, std::shared_ptr<onednn::PackedConvolution>& packed) {
    return onednn::convolution(x.contiguous(at::MemoryFormat::ChannelsLast), w, bias, {1, 1}, {3, 3}, {3, 3}, {1, 1},
                               channels, {}, {}, false, packed);
  };
  std::shared_ptr<onednn::PackedConvolution> tiny, large;
  const at::Tensor small = at::randn({1, channels, 2, 2}), big = at::randn({1, channels, 16, 16});
  const at::Tensor first = run(small, tiny);
  const onednn::PackedConvolution* entry = tiny.get();
  ASSERT_NE(entry, nullptr);
  const at::Tensor second = run(small, tiny);
  EXPECT_EQ(tiny.get(), entry); // the decision (or the primitive) kept for the shape
  EXPECT_EQ(first.defined(), second.defined());
  if (first.defined()) // oneDNN had a depthwise kernel for it after all: it must be right
    EXPECT_TRUE(at::allclose(first, at::conv2d(small, w, bias, 1, 3, 1, channels), 1e-4, 1e-4));
  const at::Tensor got = run(big, large);
  ASSERT_TRUE(got.defined()); // jit_dw's shape: oneDNN runs it
  EXPECT_TRUE(at::allclose(got, at::conv2d(big, w, bias, 1, 3, 1, channels), 1e-4, 1e-4));
}

// A packed weight (oneDNN's own product layout) computes what the plain weight does at every row
// count, with and without bias and GELU; it unpacks to the same values; the second call reuses
// the primitive; operands it does not take it refuses.
TEST(OneDnn, PackedWeightProductsEqualAten) {
  if (!onednn::available())
    GTEST_SKIP() << "built without oneDNN";
  at::manual_seed(19);
  at::Tensor kn = at::randn({48, 40}), bias = at::randn({40});
  std::shared_ptr<const onednn::PackedWeight> weight = onednn::packWeight(kn.t().contiguous().t());
  ASSERT_TRUE(weight);
  EXPECT_TRUE(at::equal(onednn::unpackWeight(*weight), kn));
  EXPECT_EQ(onednn::packedWeightDims(*weight), (std::array<std::int64_t, 2>{48, 40}));
  for (std::int64_t rows : {1, 3, 5, 17, 130}) {
    at::Tensor x = at::randn({rows, 48});
    for (bool withBias : {false, true})
      for (ProductActivation activation : {ProductActivation::None, ProductActivation::Gelu}) {
        SCOPED_TRACE("rows " + std::to_string(rows) + (withBias ? ", bias" : "") +
                     (activation == ProductActivation::Gelu ? ", gelu" : ""));
        at::Tensor want = at::matmul(x, kn) + (withBias ? bias : at::zeros({40}));
        activateInPlace(want, activation);
        std::shared_ptr<onednn::PackedProduct> packed;
        at::Tensor got = onednn::linearPacked(x.view({1, rows, 48}), weight, withBias ? bias : at::Tensor(), activation,
                                              packed);
        ASSERT_TRUE(got.defined());
        EXPECT_EQ(got.sizes(), (std::vector<std::int64_t>{1, rows, 40}));
        EXPECT_TRUE(at::allclose(got.view({rows, 40}), want, 1e-4, 1e-4));
        const onednn::PackedProduct* first = packed.get();
        onednn::linearPacked(x, weight, withBias ? bias : at::Tensor(), activation, packed);
        EXPECT_EQ(packed.get(), first); // same form: the primitive is reused
      }
  }
  std::shared_ptr<onednn::PackedProduct> packed;
  EXPECT_FALSE(onednn::linearPacked(at::randn({2, 47}), weight, {}, ProductActivation::None, packed).defined()); // K mismatch
  EXPECT_FALSE(onednn::linearPacked(at::randn({0, 48}), weight, {}, ProductActivation::None, packed).defined()); // no rows
  EXPECT_FALSE(onednn::linearPacked(at::randn({2, 48}).to(at::kDouble), weight, {}, ProductActivation::None, packed).defined());
  EXPECT_FALSE(onednn::packWeight(kn.to(at::kDouble)));
}

// Runs `packed` (weights held packed) and `plain` (--no-packed-weights) twice on input x (the
// second run reuses the primitives): output y equals `want` and each other; then an observed run
// sees each named parameter with its stored values.
void expectPackedEqualsPlain(Executor& packed, Executor& plain, const at::Tensor& x, const at::Tensor& want,
                             const std::map<std::string, at::Tensor>& parameters) {
  for (int run = 0; run < 2; ++run) {
    Expected<TensorMap> a = packed.run({{"x", x}}), c = plain.run({{"x", x}});
    ASSERT_TRUE(a && c) << (a ? c.error().message() : a.error().message());
    EXPECT_TRUE(at::allclose(a->at("y"), want, 1e-4, 1e-4));
    EXPECT_TRUE(at::allclose(a->at("y"), c->at("y"), 1e-5, 1e-5));
  }
  std::map<std::string, at::Tensor> seen;
  Executor::Observer observe = [&](ir::ValueId value, const at::Tensor& t) {
    seen[std::string(packed.graph().valueName(value))] = t;
  };
  Expected<TensorMap> observed = packed.run({{"x", x}}, nullptr, &observe);
  ASSERT_TRUE(observed) << observed.error().message();
  EXPECT_TRUE(at::allclose(observed->at("y"), want, 1e-4, 1e-4));
  for (const auto& [name, values] : parameters) {
    ASSERT_TRUE(seen.count(name)) << name;
    EXPECT_TRUE(at::equal(seen.at(name), values)) << name;
  }
}

// torch.nn.Linear's Gemm (transB, a 1-D bias) holds its [N, K] weight packed where the wing packs
// products (AVX2's panels, AVX-512's blocked layout), and a MatMul whose fused Add is a residual
// (not a bias) reads its packed weight without unpacking it: results equal --no-packed-weights,
// and an observer sees the Gemm's weight as stored, [N, K].
TEST(Executor, LinearGemmWeightsArePackedAndResidualsAddedAfter) {
  if (!onednn::available())
    GTEST_SKIP() << "built without oneDNN";
  at::manual_seed(29);
  const at::Tensor w = at::randn({24, 16}), b = at::randn({24}), v = at::randn({24, 24});
  auto build = [&] {
    NodeChain chain({"x"});
    addFloatParameter(chain.builder, "w", w);
    addFloatParameter(chain.builder, "b", b);
    addFloatParameter(chain.builder, "v", v);
    chain.add(spec("Gemm", {"x", "w", "b"}, {integer("transB", 1)}, "gemm"), "h");
    chain.add(spec("Relu", {"h"}, {}, "relu"), "r");
    chain.add(spec("MatMul", {"r", "v"}, {}, "matmul"), "m");
    chain.add(spec("Add", {"m", "h"}, {}, "add"), "y"); // fused with its MatMul: a residual of the output's shape
    Expected<ir::Graph> graph = std::move(chain).finish({"y"});
    EXPECT_TRUE(graph) << (graph ? "" : graph.error().message());
    return std::make_shared<const ir::Graph>(std::move(*graph));
  };
  const at::Tensor x = at::randn({8, 16});
  const at::Tensor h = at::addmm(b, x, w.t()), want = at::matmul(at::relu(h), v) + h;
  ExecutorOptions plainOptions;
  plainOptions.optimizations.wing.set(cpu::kPackedWeights, false);
  auto packed = Executor::create(build());
  auto plain = Executor::create(build(), plainOptions);
  ASSERT_TRUE(packed && plain);
  const std::size_t packs = (onednn::packsProductWeight(16, 24) ? 1u : 0u) + (onednn::packsProductWeight(24, 24) ? 1u : 0u);
  EXPECT_EQ((*packed)->packedWeightCount(), packs);
  expectPackedEqualsPlain(**packed, **plain, x, want, {{"w", w}, {"v", v}});
}

// The executor holds a weight that only MatMuls read packed, as its only copy (its Parameter binds
// nothing): results equal --no-packed-weights, observed runs see the weight's values, an alias
// of it is the same packed weight, and a weight another op also reads stays a tensor.
TEST(Executor, ProductOnlyWeightsArePackedOnce) {
  if (!onednn::available())
    GTEST_SKIP() << "built without oneDNN";
  at::manual_seed(23);
  const at::Tensor w = at::randn({16, 24}), v = at::randn({24, 24}), b = at::randn({24});
  auto build = [&] {
    ir::GraphBuilder builder(ir::SourceFormat::Onnx);
    builder.modelInfo().opsetImports = {{"", 17}};
    builder.addInput("x", ir::ValueType::tensor(ir::DType::F32, {24, 16}));
    addFloatParameter(builder, "w", w);
    addFloatParameter(builder, "v", v); // read by two MatMuls and by an Add: not packed
    addFloatParameter(builder, "b", b);
    EXPECT_TRUE(builder.addParameterAlias("w_alias", "w", "w_identity"));
    auto node = [&](std::string op, std::vector<std::string> inputs, std::string out) {
      ir::NodeSpec spec;
      spec.opType = std::move(op);
      spec.name = out;
      spec.inputs = std::move(inputs);
      spec.outputs.push_back({std::move(out), ir::ValueType()});
      builder.addNode(spec);
    };
    node("MatMul", {"x", "w"}, "h");
    node("Add", {"h", "b"}, "hb");        // fused with its MatMul
    node("MatMul", {"x", "w_alias"}, "g"); // the alias: the same packed weight
    node("Add", {"hb", "g"}, "s");
    node("MatMul", {"s", "v"}, "t");
    node("Add", {"t", "v"}, "y"); // v's second reader
    builder.setOutputs({"y"});
    Expected<ir::Graph> graph = std::move(builder).finish();
    EXPECT_TRUE(graph) << (graph ? "" : graph.error().message());
    return std::make_shared<const ir::Graph>(std::move(*graph));
  };
  const at::Tensor x = at::randn({24, 16}); // 24 rows, so v [24, 24] adds elementwise
  const at::Tensor h = at::matmul(x, w), want = at::matmul(h + b + h, v) + v;
  ExecutorOptions plainOptions;
  plainOptions.optimizations.wing.set(cpu::kPackedWeights, false);
  auto packed = Executor::create(build());
  auto plain = Executor::create(build(), plainOptions);
  ASSERT_TRUE(packed && plain);
  // w (and its alias) where oneDNN packs products in a blocked layout on this CPU, else its rows;
  // never v, which an Add reads too.
  EXPECT_EQ((*packed)->packedWeightCount(), onednn::packsProductWeight(16, 24) ? 1u : 0u);
  EXPECT_EQ((*plain)->packedWeightCount(), 0u);
  // The observer sees the values, unpacked, under every name.
  expectPackedEqualsPlain(**packed, **plain, x, want, {{"w", w}, {"w_alias", w}, {"v", v}});
}

// The executor holds a weight that only convolutions read (w and its alias by Convs, u by a
// ConvTranspose) only reordered after its first run: results equal --no-packed-weights bit for
// bit, an observer sees the plain values, an empty batch (which oneDNN refuses) runs on ATen with
// the weight reordered back, and a weight read otherwise too (v, also a graph output) stays plain.
TEST(Executor, ConvolutionOnlyWeightsAreHeldOnlyReordered) {
  if (!onednn::available())
    GTEST_SKIP() << "built without oneDNN";
  at::manual_seed(50);
  const at::Tensor w = at::randn({8, 8, 3, 3}), v = at::randn({8, 8, 1, 1}), u = at::randn({8, 4, 2, 2});
  auto build = [&] {
    ir::GraphBuilder builder(ir::SourceFormat::Onnx);
    builder.modelInfo().opsetImports = {{"", 17}};
    builder.addInput("x", ir::ValueType::tensor(ir::DType::F32, {-1, 8, 6, 6}));
    addFloatParameter(builder, "w", w);
    addFloatParameter(builder, "v", v);
    addFloatParameter(builder, "u", u);
    EXPECT_TRUE(builder.addParameterAlias("w_alias", "w", "w_identity"));
    auto node = [&](std::string op, std::vector<std::string> inputs, std::string out,
                    std::vector<ir::Attribute> attributes = {}) {
      ir::NodeSpec spec;
      spec.opType = std::move(op);
      spec.name = out;
      spec.inputs = std::move(inputs);
      spec.attributes = std::move(attributes);
      spec.outputs.push_back({std::move(out), ir::ValueType()});
      builder.addNode(spec);
    };
    node("Conv", {"x", "w"}, "c1", {ints("pads", {1, 1, 1, 1})});
    node("Relu", {"c1"}, "r1"); // fused with c1
    node("Conv", {"r1", "w_alias"}, "c2", {ints("pads", {1, 1, 1, 1})});
    node("Conv", {"c2", "v"}, "y");
    node("ConvTranspose", {"c2", "u"}, "z", {ints("strides", {2, 2})});
    builder.setOutputs({"y", "z", "v"}); // v is read as an output too
    Expected<ir::Graph> graph = std::move(builder).finish();
    EXPECT_TRUE(graph) << (graph ? "" : graph.error().message());
    return std::make_shared<const ir::Graph>(std::move(*graph));
  };
  auto c2 = [&](const at::Tensor& x) { return at::conv2d(at::relu(at::conv2d(x, w, {}, 1, 1)), w, {}, 1, 1); };
  auto want = [&](const at::Tensor& x) { return at::conv2d(c2(x), v); };
  auto wantZ = [&](const at::Tensor& x) { return at::conv_transpose2d(c2(x), u, {}, 2); };
  ExecutorOptions plainOptions;
  plainOptions.optimizations.wing.set(cpu::kPackedWeights, false);
  auto held = Executor::create(build());
  auto plain = Executor::create(build(), plainOptions);
  ASSERT_TRUE(held && plain);
  EXPECT_EQ((*held)->reorderedOnlyWeightCount(), 0u); // plain until a copy is made
  const at::Tensor x = at::randn({2, 8, 6, 6});
  for (int run = 0; run < 2; ++run) {
    Expected<TensorMap> a = (*held)->run({{"x", x}}), c = (*plain)->run({{"x", x}});
    ASSERT_TRUE(a && c) << (a ? c.error().message() : a.error().message());
    EXPECT_TRUE(at::allclose(a->at("y"), want(x), 1e-4, 1e-4));
    EXPECT_TRUE(at::allclose(a->at("z"), wantZ(x), 1e-4, 1e-4));
    EXPECT_TRUE(at::equal(a->at("y"), c->at("y")));
    EXPECT_TRUE(at::equal(a->at("z"), c->at("z")));
    EXPECT_EQ((*held)->reorderedOnlyWeightCount(), 2u); // w (and its alias) and u; not v
  }
  EXPECT_EQ((*plain)->reorderedOnlyWeightCount(), 0u);
  std::map<std::string, at::Tensor> seen;
  Executor::Observer observe = [&](ir::ValueId value, const at::Tensor& t) {
    seen[std::string((*held)->graph().valueName(value))] = t;
  };
  Expected<TensorMap> observed = (*held)->run({{"x", x}}, nullptr, &observe);
  ASSERT_TRUE(observed) << observed.error().message();
  EXPECT_TRUE(at::equal(observed->at("y"), (*plain)->run({{"x", x}})->at("y")));
  ASSERT_TRUE(seen.count("w") && seen.count("w_alias") && seen.count("v"));
  EXPECT_TRUE(at::equal(seen.at("w"), w));
  EXPECT_TRUE(at::equal(seen.at("w_alias"), w));
  EXPECT_TRUE(at::equal(seen.at("v"), v));
  const at::Tensor none = at::randn({0, 8, 6, 6}); // oneDNN takes no empty batch: ATen, on w reordered back
  Expected<TensorMap> empty = (*held)->run({{"x", none}});
  ASSERT_TRUE(empty) << empty.error().message();
  EXPECT_EQ(empty->at("y").sizes(), want(none).sizes());
  EXPECT_EQ(empty->at("z").sizes(), wantZ(none).sizes());
}

// oneDNN's deconvolution against ATen's conv_transpose2d (cropped by the end pads as ONNX does):
// strides, asymmetric pads, output_padding, dilation, groups, with and without bias; the second
// run reuses the primitive. What it does not take it refuses: an output_padding larger than the
// end pad, float64, autograd.
TEST(OneDnn, TransposedConvolutionEqualsAten) {
  if (!onednn::available())
    GTEST_SKIP() << "built without oneDNN";
  struct Case {
    std::int64_t inChannels, outChannels, kernel, stride, dilation, groups;
    std::vector<std::int64_t> padBegin, padEnd, outputPadding;
    bool bias;
  };
  const Case cases[] = {
      {8, 4, 2, 2, 1, 1, {0, 0}, {0, 0}, {0, 0}, true},  // U-Net's 2x upsampling
      {8, 6, 4, 2, 1, 1, {1, 1}, {1, 1}, {0, 0}, false}, // DCGAN's
      {6, 4, 3, 2, 1, 1, {1, 1}, {1, 1}, {1, 1}, true},  // "same" upsampling: output_padding 1
      {6, 6, 3, 3, 2, 3, {2, 0}, {1, 2}, {0, 1}, true},  // asymmetric pads, dilation, groups
      {4, 4, 3, 1, 1, 4, {1, 1}, {1, 1}, {0, 0}, false}, // depthwise, stride 1
  };
  at::manual_seed(17);
  for (const Case& k : cases) {
    at::Tensor x = at::randn({2, k.inChannels, 7, 6});
    at::Tensor w = at::randn({k.inChannels, k.outChannels / k.groups, k.kernel, k.kernel});
    at::Tensor bias = k.bias ? at::randn({k.outChannels}) : at::Tensor();
    at::Tensor full = at::conv_transpose2d(x, w, bias, at::IntArrayRef{k.stride, k.stride}, at::IntArrayRef{0, 0},
                                           at::IntArrayRef(k.outputPadding), k.groups,
                                           at::IntArrayRef{k.dilation, k.dilation});
    at::Tensor want = full.slice(2, k.padBegin[0], full.size(2) - k.padEnd[0])
                          .slice(3, k.padBegin[1], full.size(3) - k.padEnd[1]);
    std::shared_ptr<onednn::PackedConvolution> packed;
    for (bool relu : {false, true}) { // the bias and Relu: one pass after the deconvolution
      const onednn::PackedConvolution* first = nullptr;
      for (int run = 0; run < 2; ++run) {
        at::Tensor got = onednn::transposedConvolution2d(x, w, bias, {k.stride, k.stride}, k.padBegin, k.padEnd,
                                                         {k.dilation, k.dilation}, k.outputPadding, k.groups, relu,
                                                         packed);
        ASSERT_TRUE(got.defined()) << "groups " << k.groups << " kernel " << k.kernel;
        if (run == 0)
          first = packed.get();
        EXPECT_EQ(packed.get(), first); // the second run reused the primitives and the weight
        EXPECT_EQ(got.sizes(), want.sizes());
        EXPECT_TRUE(got.is_contiguous(at::MemoryFormat::ChannelsLast));
        EXPECT_TRUE(at::allclose(got, relu ? at::relu(want) : want, 1e-4, 1e-4))
            << "groups " << k.groups << " kernel " << k.kernel << " relu " << relu;
      }
    }
  }
  std::shared_ptr<onednn::PackedConvolution> packed;
  at::Tensor x = at::randn({1, 4, 5, 5}), w = at::randn({4, 2, 3, 3});
  EXPECT_FALSE(onednn::transposedConvolution2d(x, w, {}, {2, 2}, {0, 0}, {0, 0}, {1, 1}, {1, 1}, 1, false, packed).defined());
  EXPECT_FALSE(onednn::transposedConvolution2d(x.to(at::kDouble), w.to(at::kDouble), {}, {2, 2}, {0, 0}, {0, 0}, {1, 1},
                                               {0, 0}, 1, false, packed).defined());
  EXPECT_FALSE(onednn::transposedConvolution2d(x, w.clone().requires_grad_(true), {}, {2, 2}, {0, 0}, {0, 0}, {1, 1},
                                               {0, 0}, 1, false, packed).defined());
}

// oneDNN's Softmax and LogSoftmax against ATen's along every axis, into a new tensor or over the
// input (`inPlace`); what it does not take (not contiguous, float64) it refuses.
TEST(OneDnn, SoftmaxEqualsAten) {
  if (!onednn::available())
    GTEST_SKIP() << "built without oneDNN";
  at::manual_seed(13);
  const at::Tensor x = at::randn({2, 3, 17, 5}) * 4;
  for (std::int64_t axis = 0; axis < x.dim(); ++axis)
    for (bool logarithm : {false, true}) {
      const at::Tensor want = logarithm ? at::log_softmax(x, axis) : at::softmax(x, axis);
      at::Tensor fresh = onednn::softmax(x, axis, logarithm, false);
      ASSERT_TRUE(fresh.defined());
      EXPECT_TRUE(at::allclose(fresh, want, 1e-5, 1e-5)) << "axis " << axis << " log " << logarithm;
      at::Tensor scratch = x.clone();
      at::Tensor over = onednn::softmax(scratch, axis, logarithm, true);
      ASSERT_TRUE(over.defined());
      EXPECT_EQ(over.data_ptr(), scratch.data_ptr());
      EXPECT_TRUE(at::allclose(over, want, 1e-5, 1e-5));
    }
  EXPECT_FALSE(onednn::softmax(x.transpose(1, 3), 1, false, false).defined());
  EXPECT_FALSE(onednn::softmax(x.to(at::kDouble), 1, false, false).defined());
}

// oneDNN's pooling against ATen's: max with pads, dilation and ceil rounding (the end padding it
// adds), average with and without the padding counted, a whole-plane window (GlobalAveragePool);
// channels-last stays channels-last; the same in 3-D. An average counting padding whose ceil
// rounding would count cells past the end padding is refused (ATen does not count them).
TEST(OneDnn, PoolingEqualsAten) {
  if (!onednn::available())
    GTEST_SKIP() << "built without oneDNN";
  using K = onednn::PoolKind;
  at::manual_seed(12);
  for (bool channelsLast : {false, true}) {
    at::Tensor x = at::randn({2, 5, 11, 10});
    if (channelsLast)
      x = x.contiguous(at::MemoryFormat::ChannelsLast);
    auto pool = [&](K kind, std::vector<std::int64_t> kernel, std::vector<std::int64_t> strides, std::int64_t pad,
                    std::vector<std::int64_t> dilations, bool ceil) {
      at::Tensor y = onednn::pool(x, kind, kernel, strides, {pad, pad}, {pad, pad}, dilations, ceil);
      EXPECT_TRUE(!y.defined() || y.is_contiguous(channelsLast ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous));
      return y;
    };
    at::Tensor max = pool(K::Max, {3, 3}, {2, 2}, 1, {1, 1}, false);
    ASSERT_TRUE(max.defined());
    EXPECT_TRUE(at::equal(max, at::max_pool2d(x, {3, 3}, {2, 2}, {1, 1})));
    at::Tensor ceiled = pool(K::Max, {3, 2}, {2, 3}, 1, {2, 1}, true);
    ASSERT_TRUE(ceiled.defined());
    EXPECT_TRUE(at::equal(ceiled, at::max_pool2d(x, {3, 2}, {2, 3}, {1, 1}, {2, 1}, true)));
    for (bool ceil : {false, true}) {
      at::Tensor without = pool(K::AverageWithoutPadding, {3, 3}, {2, 2}, 1, {1, 1}, ceil);
      ASSERT_TRUE(without.defined());
      EXPECT_TRUE(at::allclose(without, at::avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, ceil, false), 1e-6, 1e-6));
    }
    at::Tensor with = pool(K::AverageWithPadding, {3, 3}, {2, 2}, 1, {1, 1}, false);
    ASSERT_TRUE(with.defined());
    EXPECT_TRUE(at::allclose(with, at::avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}, false, true), 1e-6, 1e-6));
    // 10 columns, no pads, kernel 3, stride 2: ceil adds a last window reaching one cell past.
    EXPECT_FALSE(pool(K::AverageWithPadding, {3, 3}, {2, 2}, 0, {1, 1}, true).defined());
    at::Tensor global = pool(K::AverageWithoutPadding, {11, 10}, {1, 1}, 0, {1, 1}, false);
    ASSERT_TRUE(global.defined());
    EXPECT_TRUE(at::allclose(global, x.mean({2, 3}, true), 1e-6, 1e-6));
  }
  EXPECT_FALSE(onednn::pool(at::randn({1, 2, 4, 4}, at::kDouble), K::Max, {2, 2}, {2, 2}, {0, 0}, {0, 0}, {1, 1}, false)
                   .defined());
  // 3-D (video models' MaxPool3d / AvgPool3d), ChannelsLast3d in and out.
  at::Tensor x = at::randn({1, 6, 5, 9, 8}).contiguous(at::MemoryFormat::ChannelsLast3d);
  at::Tensor max = onednn::pool(x, K::Max, {3, 3, 3}, {1, 2, 2}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, true);
  ASSERT_TRUE(max.defined());
  EXPECT_TRUE(max.is_contiguous(at::MemoryFormat::ChannelsLast3d));
  EXPECT_TRUE(at::equal(max, at::max_pool3d(x, {3, 3, 3}, {1, 2, 2}, {1, 1, 1}, {1, 1, 1}, true)));
  for (bool includePad : {false, true}) {
    at::Tensor average = onednn::pool(x, includePad ? K::AverageWithPadding : K::AverageWithoutPadding, {2, 3, 3},
                                      {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, false);
    ASSERT_TRUE(average.defined());
    EXPECT_TRUE(at::allclose(average, at::avg_pool3d(x, {2, 3, 3}, {2, 2, 2}, {1, 1, 1}, false, includePad), 1e-6, 1e-6));
  }
  EXPECT_FALSE(onednn::pool(x, K::Max, {3, 3}, {1, 1}, {0, 0}, {0, 0}, {1, 1}, false).defined()); // ranks differ
}

} // namespace
} // namespace cleave::runtime
