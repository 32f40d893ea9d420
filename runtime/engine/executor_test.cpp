// Unit tests of the ATen executor: ONNX semantics that are easy to get wrong (Reshape 0/-1,
// Slice negative steps and clamping, Gather negative indices, asymmetric Conv pads, Gemm flags,
// pre-13 Softmax), error messages, memory release, tensor files and random inputs; the blocked
// layout of convolution chains against ATen's dense ops; fused groups; the device-wing hooks.
// The CPU wing's own (oneDNN's primitives, its weight plan): runtime/cpu/onednn_test.cpp.
#include "runtime/engine/executor.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <array>
#include <cstdio>
#include <map>
#include <set>

#include "runtime/engine/device_wing.h"
#include "runtime/engine/fast_paths.h"
#include "runtime/engine/fusion.h"
#include "runtime/kernels/helpers.h"
#include "runtime/model/microbatch.h"
#include "runtime/engine/tensors.h"
#include "runtime/engine/torch_compat.h"
#include "runtime/engine/executor_test_support.h"
#include "testing/test_graphs.h"

namespace cleave::runtime {
namespace {
using cleave::testing::TestGraph;
using namespace test_support;

// Whether the CPU wing calls oneDNN directly (a build with libdnnl: the wing's target defines
// CLEAVE_HAVE_DNNL); the kernels then compute convolutions, products, pooling and softmax there,
// else its convolutions and max pooling run in ATen's blocked layout.
#ifdef CLEAVE_HAVE_DNNL
constexpr bool kOneDnnDirect = true;
#else
constexpr bool kOneDnnDirect = false;
#endif

// The CPU wing installs itself (runtime/cpu/cpu_wing.cpp) and serves the CPU only; the engine's
// layout hooks leave a dense tensor as it is; it offers fast paths (oneDNN's, or ATen's blocked
// convolutions without libdnnl), and no device without a wing has any.
TEST(DeviceWing, TheCpuWingServesTheCpuAndNoOtherDevice) {
  const DeviceWing* wing = wingServing(at::Device(at::kCPU));
  ASSERT_NE(wing, nullptr);
  EXPECT_EQ(wing->name(), "cpu");
  EXPECT_EQ(wingServing(at::Device(at::kCUDA, 0)), nullptr);
  ExecutorOptions inference, training;
  training.trainable = true;
  training.optimizations.blockedLayout = false;
  EXPECT_TRUE(wing->keepsPrivateLayout(inference));
  EXPECT_FALSE(wing->keepsPrivateLayout(training));
  const at::Tensor dense = at::ones({2, 3});
  EXPECT_FALSE(inPrivateLayout(dense));
  EXPECT_TRUE(denseFromPrivateLayout(dense).is_same(dense));
  EXPECT_NE(wing->fastPaths(), nullptr);
  EXPECT_EQ(fastPathsFor(at::kCPU), wing->fastPaths());
  EXPECT_EQ(fastPathsFor(at::Device(at::kCUDA, 0)), nullptr);
}

TEST(Executor, ReshapeCopiesZeroDimsAndInfersMinusOne) {
  at::Tensor x = at::arange(24, at::TensorOptions().dtype(at::kFloat)).reshape({2, 3, 4});
  at::Tensor y = runOne(spec("Reshape", {"a", "b"}), {{"a", x}, {"b", longs({0, -1})}});
  EXPECT_EQ(y.sizes().vec(), (std::vector<std::int64_t>{2, 12}));
  at::Tensor z = runOne(spec("Reshape", {"a", "b"}, {integer("allowzero", 1)}),
                        {{"a", at::zeros({0, 3})}, {"b", longs({3, 0})}});
  EXPECT_EQ(z.sizes().vec(), (std::vector<std::int64_t>{3, 0}));
}

TEST(Executor, SliceWithNegativeStepsAndClampedBounds) {
  at::Tensor x = at::arange(10, at::TensorOptions().dtype(at::kFloat));
  // starts -1, ends -1000 (clamped to before the start), step -3: 9, 6, 3, 0.
  at::Tensor y = runOne(spec("Slice", {"a", "s", "e", "ax", "st"}),
                        {{"a", x}, {"s", longs({-1})}, {"e", longs({-1000})}, {"ax", longs({0})}, {"st", longs({-3})}});
  EXPECT_TRUE(at::equal(y, at::tensor({9.f, 6.f, 3.f, 0.f})));
  // ends past the size clamp; step 2.
  at::Tensor z = runOne(spec("Slice", {"a", "s", "e", "ax", "st"}),
                        {{"a", x}, {"s", longs({1})}, {"e", longs({INT64_MAX})}, {"ax", longs({0})}, {"st", longs({4})}});
  EXPECT_TRUE(at::equal(z, at::tensor({1.f, 5.f, 9.f})));
}

// ONNX orders TopK's equal values by index, lower first (at::topk leaves them in any order): among
// selected ties, with a tie at the k-th place left out, for smallest, and without ties.
TEST(Executor, TopKOrdersTiesByIndex) {
  auto topIndices = [](const at::Tensor& x, std::int64_t k, std::int64_t largest) {
    ir::NodeSpec node = spec("TopK", {"a", "k"}, {integer("largest", largest)});
    node.outputs = {{"values", ir::ValueType()}, {"y", ir::ValueType()}};
    return runOne(node, {{"a", x}, {"k", longs({k})}});
  };
  EXPECT_TRUE(at::equal(topIndices(at::zeros({1, 1000}), 10, 1), at::arange(10, at::kLong).unsqueeze(0)));
  at::Tensor rows = at::tensor({3.0f, 1.0f, 3.0f, 2.0f, 3.0f, 0.0f, 0.0f, 5.0f, 0.0f, 1.0f}).view({2, 5});
  EXPECT_TRUE(at::equal(topIndices(rows, 3, 1), longs({0, 2, 4, 2, 4, 0}).view({2, 3})));
  EXPECT_TRUE(at::equal(topIndices(rows, 2, 0), longs({1, 3, 0, 1}).view({2, 2})));
  at::Tensor sevens = at::arange(3000, at::kLong).remainder(7).to(at::kFloat);
  EXPECT_TRUE(at::equal(topIndices(sevens, 5, 1), longs({6, 13, 20, 27, 34})));
  EXPECT_TRUE(at::equal(topIndices(at::tensor({0.5f, 2.0f, -1.0f, 4.0f}), 2, 1), longs({3, 1})));
  // Many ties, along every axis, against a stable sort of the whole axis.
  at::manual_seed(43);
  const at::Tensor few = at::randint(0, 5, {6, 40, 7}).to(at::kFloat);
  for (std::int64_t axis = 0; axis < 3; ++axis)
    for (std::int64_t largest = 0; largest < 2; ++largest)
      for (std::int64_t k : {1L, 3L, few.size(axis)}) {
        ir::NodeSpec node = spec("TopK", {"a", "k"}, {integer("largest", largest), integer("axis", axis)});
        node.outputs = {{"values", ir::ValueType()}, {"y", ir::ValueType()}};
        auto [sorted, order] = at::sort(few, /*stable=*/true, axis, /*descending=*/largest != 0);
        EXPECT_TRUE(at::equal(runOne(node, {{"a", few}, {"k", longs({k})}}), order.narrow(axis, 0, k)))
            << "axis " << axis << " largest " << largest << " k " << k;
      }
}

// Einsums that are batched matrix products run as one (either operand's letters in either order,
// the output transposed or not) and equal at::einsum; any other equation is left to at::einsum.
TEST(Executor, EinsumsThatAreBatchedProductsRunAsThem) {
  at::manual_seed(29);
  const at::Tensor q = at::randn({2, 3, 5, 4}), k = at::randn({2, 3, 6, 4}), scores = at::randn({2, 3, 5, 6});
  const std::vector<std::tuple<std::string, at::Tensor, at::Tensor>> products = {
      {"bhid,bhjd->bhij", q, k},
      {"bhij,bhjd->bhid", scores, k},
      {"bhdi,bhjd->bhij", q.transpose(-1, -2), k},
      {"bhid,bhjd->bhji", q, k},
      {"BHID, BHJD -> BHIJ", q, k},
      {"ik,kj->ij", scores[0][0], k[0][0]}};
  for (const auto& [equation, a, b] : products) {
    const at::Tensor got = einsumAsBatchedMatmul(equation, a, b);
    ASSERT_TRUE(got.defined()) << equation;
    EXPECT_TRUE(at::allclose(got, at::einsum(equation, {a, b}), 1e-5, 1e-5)) << equation;
    EXPECT_TRUE(at::allclose(runOne(spec("Einsum", {"a", "b"}, {text("equation", equation)}), {{"a", a}, {"b", b}}),
                             at::einsum(equation, {a, b}), 1e-5, 1e-5))
        << equation;
  }
  for (const std::string equation : {"...id,...jd->...ij", "bhid,bhjd->bhi", "bhid,bhid->bhid", "bhid,bhjd->hbij"})
    EXPECT_FALSE(einsumAsBatchedMatmul(equation, q, equation == "bhid,bhid->bhid" ? q : k).defined()) << equation;
  EXPECT_FALSE(einsumAsBatchedMatmul("bhid,bhjd->bhij", q, k.narrow(0, 0, 1)).defined()); // batch dims broadcast
}

// GELU of a channels-last tensor (a convolution's output) runs ATen's contiguous kernel on the
// view in memory order: it keeps the input's strides, and the exact GELU equals that kernel's
// result on the contiguous tensor bit for bit (the tanh form within the rounding of its vector
// loop's tail, which falls on other elements).
TEST(Executor, GeluRunsInMemoryOrder) {
  at::manual_seed(31);
  for (const at::Tensor& x : {at::randn({2, 16, 9, 7}).contiguous(at::MemoryFormat::ChannelsLast),
                              at::randn({1, 8, 3, 5, 4}).contiguous(at::MemoryFormat::ChannelsLast3d),
                              at::randn({4, 6}).t()}) {
    for (const char* approximate : {"none", "tanh"}) {
      const at::Tensor y = geluInMemoryOrder(x, approximate);
      EXPECT_EQ(y.strides(), x.strides());
      const at::Tensor want = at::gelu(x.contiguous(), approximate);
      if (std::string(approximate) == "none")
        EXPECT_TRUE(at::equal(y.contiguous(), want));
      else
        EXPECT_TRUE(at::allclose(y.contiguous(), want, 1e-6, 1e-7));
    }
  }
}

// The channels-last global average equals ATen's mean over the spatial dims, over more than one
// chunk of rows with a partial last one, for 2-D and 3-D maps and two batch entries; the result
// does not depend on the thread count; other layouts are left to the caller.
TEST(Executor, GlobalAverageOfChannelsLastEqualsTheMean) {
  at::manual_seed(37);
  const int threads = at::get_num_threads();
  for (const at::Tensor& x : {at::randn({2, 40, 23, 29}).contiguous(at::MemoryFormat::ChannelsLast),
                              at::randn({1, 19, 3, 7, 5}).contiguous(at::MemoryFormat::ChannelsLast3d),
                              at::randn({1, 7, 1, 1})}) {
    const at::Tensor y = globalAverageChannelsLast(x);
    ASSERT_TRUE(y.defined());
    std::vector<std::int64_t> spatial;
    for (std::int64_t d = 2; d < x.dim(); ++d)
      spatial.push_back(d);
    EXPECT_TRUE(at::allclose(y, x.mean(spatial, true), 1e-5, 1e-6));
    at::set_num_threads(1);
    EXPECT_TRUE(at::equal(globalAverageChannelsLast(x), y));
    at::set_num_threads(threads);
    EXPECT_TRUE(at::allclose(runOne(spec("GlobalAveragePool", {"x"}, {}, "y"), {{"x", x}}), y, 0, 0));
  }
  EXPECT_FALSE(globalAverageChannelsLast(at::randn({1, 4, 5, 6})).defined());
  EXPECT_FALSE(globalAverageChannelsLast(at::randn({1, 4, 5, 6}, at::kDouble).contiguous(at::MemoryFormat::ChannelsLast)).defined());
}

// Linear Resize of float32 images and volumes runs as ATen's upsampling, and so does nearest
// enlarging by powers of two with asymmetric, floor coordinates; doubles take the reference path
// (taps gathered in double). Both must agree for every coordinate mode the fast path takes, up and
// down, from scales or sizes, and where it must decline (pytorch_half_pixel to a length of 1,
// align_corners with a fractional length, nearest by 3 or by a scale the sizes do not equal).
TEST(Executor, ResizeOnAtenEqualsTheReferencePath) {
  at::manual_seed(41);
  struct Case {
    at::Tensor x;
    const char* transform;
    std::vector<double> scales;      // per dimension, or empty
    std::vector<std::int64_t> sizes; // per dimension, or empty
    const char* mode = "linear";
  };
  const std::vector<Case> cases = {
      {at::randn({1, 5, 7, 9}).contiguous(at::MemoryFormat::ChannelsLast), "half_pixel", {1, 1, 8, 8}, {}},
      {at::randn({2, 3, 13, 6}), "pytorch_half_pixel", {}, {2, 3, 40, 5}},
      {at::randn({1, 4, 6, 6}), "align_corners", {1, 1, 2, 3}, {}},
      {at::randn({1, 4, 5, 5}), "align_corners", {1, 1, 0.6, 0.6}, {}},  // length 3.0 vs 3
      {at::randn({1, 4, 4, 5}), "align_corners", {1, 1, 0.7, 1.3}, {}},  // fractional: declines
      {at::randn({1, 2, 9, 9}), "pytorch_half_pixel", {}, {1, 2, 1, 4}}, // length 1: declines
      {at::randn({1, 3, 11}), "half_pixel", {1, 1, 0.5}, {}},
      {at::randn({1, 3, 4, 5, 6}).contiguous(at::MemoryFormat::ChannelsLast3d), "half_pixel", {}, {1, 3, 8, 3, 12}},
      {at::randn({1, 6, 5, 7}).contiguous(at::MemoryFormat::ChannelsLast), "asymmetric", {}, {1, 6, 10, 28}, "nearest"},
      {at::randn({2, 3, 4, 5}), "asymmetric", {1, 1, 2, 1}, {}, "nearest"},
      {at::randn({1, 2, 9}), "asymmetric", {1, 1, 8}, {}, "nearest"},
      {at::randn({1, 2, 3, 4, 5}), "asymmetric", {}, {1, 2, 6, 4, 20}, "nearest"},
      {at::randn({1, 3, 5, 5}), "asymmetric", {}, {1, 3, 15, 10}, "nearest"},   // by 3: declines
      {at::randn({1, 3, 10, 10}), "asymmetric", {1, 1, 2.05, 2}, {}, "nearest"}, // 20 rows, scale 2.05: declines
      {at::randn({0, 3, 4, 4}), "half_pixel", {}, {0, 3, 8, 8}},               // empty: declines
      {at::randn({1, 3, 4, 4}), "asymmetric", {}, {1, 3, 0, 8}, "nearest"},   // to nothing: declines
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.mode) + " " + c.transform + " " + std::to_string(c.x.dim()) + "-D");
    std::vector<std::string> inputs = {"x", "", c.scales.empty() ? "" : "scales"};
    TensorMap given;
    if (c.scales.empty()) {
      inputs.push_back("sizes");
      given["sizes"] = longs(c.sizes);
    } else {
      given["scales"] = at::tensor(std::vector<float>(c.scales.begin(), c.scales.end()));
    }
    ir::NodeSpec node = spec("Resize", inputs, {text("mode", c.mode), text("coordinate_transformation_mode", c.transform),
                                                text("nearest_mode", "floor")});
    given["x"] = c.x;
    const at::Tensor fast = runOne(node, given);
    given["x"] = c.x.to(at::kDouble);
    const at::Tensor reference = runOne(node, given);
    ASSERT_TRUE(fast.defined() && reference.defined());
    EXPECT_EQ(fast.scalar_type(), at::kFloat);
    EXPECT_EQ(fast.sizes(), reference.sizes());
    EXPECT_TRUE(at::allclose(fast, reference.to(at::kFloat), 1e-5, 1e-6));
  }
}

// NonMaxSuppression compares only nearby kept boxes, except where that would not be exact: a
// negative IoU threshold (IoU 0 passes it: the best box suppresses every other) and corners that
// are not finite (compared with every kept box, never bucketed).
TEST(Executor, NonMaxSuppressionOutsideTheBucketedCase) {
  ir::NodeSpec nms = spec("NonMaxSuppression", {"boxes", "scores", "max", "iou"});
  const at::Tensor boxes = at::tensor({0.0f, 0.0f, 1.0f, 1.0f, 0.0f, 5.0f, 1.0f, 6.0f, 0.0f, 0.1f, 1.0f, 1.1f,
                                       0.0f, 9.0f, 1.0f, 10.0f}).view({1, 4, 4});
  const at::Tensor scores = at::tensor({0.9f, 0.8f, 0.7f, 0.6f}).view({1, 1, 4});
  auto selectedBoxes = [&](const at::Tensor& b, float iou) {
    at::Tensor rows = runOne(nms, {{"boxes", b}, {"scores", scores}, {"max", longs({10})}, {"iou", at::tensor({iou})}});
    return rows.select(1, 2);
  };
  EXPECT_TRUE(at::equal(selectedBoxes(boxes, 0.5f), longs({0, 1, 3}))); // box 2 overlaps box 0
  EXPECT_TRUE(at::equal(selectedBoxes(boxes, -0.5f), longs({0})));
  at::Tensor withNan = boxes.clone();
  withNan[0][1][1] = std::numeric_limits<float>::quiet_NaN(); // NaN's IoU with anything is 0
  EXPECT_TRUE(at::equal(selectedBoxes(withNan, 0.5f), longs({0, 1, 3})));
}

TEST(Executor, GatherTakesNegativeIndicesAndKeepsTheirShape) {
  at::Tensor x = at::arange(12, at::TensorOptions().dtype(at::kFloat)).reshape({3, 4});
  at::Tensor y = runOne(spec("Gather", {"a", "i"}, {integer("axis", 1)}), {{"a", x}, {"i", longs({-1, 0}).reshape({2, 1})}});
  EXPECT_EQ(y.sizes().vec(), (std::vector<std::int64_t>{3, 2, 1}));
  EXPECT_EQ(y[0][0][0].item<float>(), 3.f);
  EXPECT_EQ(y[2][1][0].item<float>(), 8.f);
  at::Tensor scalar = runOne(spec("Gather", {"a", "i"}), {{"a", x}, {"i", at::scalar_tensor(-1, at::kLong)}});
  EXPECT_TRUE(at::equal(scalar, x[2]));
}

TEST(Executor, ConvWithAsymmetricPadsEqualsConvOfThePaddedInput) {
  at::manual_seed(0);
  at::Tensor x = at::randn({1, 2, 5, 5}), w = at::randn({3, 2, 3, 3}), b = at::randn({3});
  at::Tensor y = runOne(spec("Conv", {"a", "b", "c"}, {ints("pads", {0, 1, 2, 0}), ints("strides", {2, 1})}),
                        {{"a", x}, {"b", w}, {"c", b}});
  at::Tensor expected = at::conv2d(at::constant_pad_nd(x, {1, 0, 0, 2}), w, b, {2, 1});
  EXPECT_TRUE(at::allclose(y, expected, 1e-5, 1e-6));
  // SAME_UPPER keeps the spatial size at stride 1.
  at::Tensor same = runOne(spec("Conv", {"a", "b"}, {text("auto_pad", "SAME_UPPER")}), {{"a", x}, {"b", w}});
  EXPECT_EQ(same.sizes().vec(), (std::vector<std::int64_t>{1, 3, 5, 5}));
  // An empty batch (no blocked layout for it) still has its shape.
  at::Tensor empty = runOne(spec("Conv", {"a", "b"}), {{"a", at::zeros({0, 2, 5, 5})}, {"b", w}});
  EXPECT_EQ(empty.sizes().vec(), (std::vector<std::int64_t>{0, 3, 3, 3}));
}

TEST(Executor, GemmHonoursTransposesAlphaAndBeta) {
  at::manual_seed(1);
  at::Tensor a = at::randn({4, 3}), b = at::randn({5, 4}), c = at::randn({5});
  at::Tensor y = runOne(spec("Gemm", {"a", "b", "c"}, {integer("transA", 1), integer("transB", 1), real("alpha", 0.5),
                                                       real("beta", 2.0)}),
                        {{"a", a}, {"b", b}, {"c", c}});
  EXPECT_TRUE(at::allclose(y, 0.5 * at::mm(a.t(), b.t()) + 2.0 * c, 1e-5, 1e-6));
}

TEST(Executor, SoftmaxBeforeOpset13CoercesTo2D) {
  at::manual_seed(2);
  at::Tensor x = at::randn({2, 3, 4});
  at::Tensor old = runOne(spec("Softmax", {"a"}), {{"a", x}}, 11); // axis 1: rows of 12
  EXPECT_TRUE(at::allclose(old, at::softmax(x.reshape({2, 12}), 1).reshape({2, 3, 4})));
  at::Tensor now = runOne(spec("Softmax", {"a"}), {{"a", x}}, 13); // axis -1
  EXPECT_TRUE(at::allclose(now, at::softmax(x, -1)));
}

// Dropout in training mode drops as torch.nn.functional.dropout does: each element kept with
// probability 1 - ratio, the kept ones scaled by 1 / (1 - ratio), from ATen's default generator
// (the same seed, the same mask); out of training mode, or at ratio 0, it is the identity.
TEST(Executor, DropoutInTrainingModeDropsAsTorchDoes) {
  at::Tensor x = at::randn({64, 64});
  EXPECT_TRUE(at::equal(runOne(spec("Dropout", {"a"}), {{"a", x}}), x)); // inference: identity
  EXPECT_TRUE(at::equal(runOne(spec("Dropout", {"a", "r", "t"}), {{"a", x}, {"r", at::full({}, 0.5)},
                                                                   {"t", at::full({}, false)}}), x));
  EXPECT_TRUE(at::equal(runOne(spec("Dropout", {"a", "r", "t"}), {{"a", x}, {"r", at::full({}, 0.0)},
                                                                   {"t", at::full({}, true)}}), x));
  auto dropped = [&](std::uint64_t seed) {
    at::manual_seed(seed);
    return runOne(spec("Dropout", {"a", "r", "t"}), {{"a", x}, {"r", at::full({}, 0.25)}, {"t", at::full({}, true)}});
  };
  at::Tensor y = dropped(7);
  at::Tensor kept = y != 0;
  const double keptShare = kept.to(at::kDouble).mean().item<double>();
  EXPECT_NEAR(keptShare, 0.75, 0.03); // 4096 draws: 5 standard deviations
  EXPECT_TRUE(at::allclose(y.masked_select(kept), (x / 0.75).masked_select(kept)));
  EXPECT_TRUE(at::equal(dropped(7), y));
  EXPECT_FALSE(at::equal(dropped(8), y));
}

TEST(Executor, NamesTheOpNodeAndOpsetItCannotRun) {
  ir::GraphBuilder builder(ir::SourceFormat::Onnx);
  builder.modelInfo().opsetImports = {{"", 15}};
  builder.addInput("a", ir::ValueType());
  builder.addNode(spec("Frobnicate", {"a"}, {}, "weird"));
  builder.setOutputs({"y"});
  Expected<ir::Graph> graph = std::move(builder).finish();
  ASSERT_TRUE(graph);
  Expected<std::unique_ptr<Executor>> executor = Executor::create(std::make_shared<const ir::Graph>(std::move(*graph)));
  ASSERT_FALSE(executor);
  EXPECT_EQ(executor.error().code(), ErrorCode::Unsupported);
  EXPECT_NE(executor.error().message().find("Frobnicate (node 'weird', opset 15)"), std::string::npos)
      << executor.error().message();
}

TEST(Executor, FreesEachValueAfterItsLastUser) {
  TestGraph t;
  t.input("x", {256, 1024});
  std::string previous = "x";
  for (int i = 0; i < 12; ++i) {
    t.op("Relu", "r" + std::to_string(i), {previous}, {256, 1024});
    previous = "r" + std::to_string(i);
  }
  ir::Graph g = t.output({previous}).build();
  Expected<std::unique_ptr<Executor>> executor = Executor::create(std::make_shared<const ir::Graph>(std::move(g)));
  ASSERT_TRUE(executor);
  RunStats stats;
  Expected<TensorMap> out = (*executor)->run({{"x", at::randn({256, 1024})}}, &stats);
  ASSERT_TRUE(out) << out.error().message();
  std::int64_t one = 256 * 1024 * 4;
  EXPECT_LE(stats.peakActivationBytes, 2 * one); // a chain holds at most two values at once
  EXPECT_GE(stats.peakActivationBytes, one);
}



// conv -> relu -> conv -> add (residual) -> maxpool -> global average pool, equal to ATen's dense
// ops: with oneDNN called directly the convolutions write channels-last ATen tensors (no opaque
// blocked values at all); without it they run in ATen's blocked layout, and outputs and observed
// values come back dense unless the caller takes blocked outputs.
TEST(Executor, BlockedConvolutionChainEqualsDenseAten) {
  auto pads = ints("pads", {1, 1, 1, 1});
  NodeChain chain({"x", "w1", "b1", "w2"});
  chain.add(spec("Conv", {"x", "w1", "b1"}, {pads}, "c1"), "c1");
  chain.add(spec("Relu", {"c1"}, {}, "r1"), "r1");
  chain.add(spec("Conv", {"r1", "w2"}, {pads}, "c2"), "c2");
  chain.add(spec("Add", {"c2", "r1"}, {}, "s"), "s");
  chain.add(spec("MaxPool", {"s"}, {ints("kernel_shape", {2, 2}), ints("strides", {2, 2})}, "m"), "m");
  chain.add(spec("GlobalAveragePool", {"m"}, {}, "g"), "g");
  Expected<ir::Graph> graph = std::move(chain).finish({"g", "s"});
  ASSERT_TRUE(graph) << graph.error().message();
  Expected<std::unique_ptr<Executor>> executor = Executor::create(std::make_shared<const ir::Graph>(std::move(*graph)));
  ASSERT_TRUE(executor) << executor.error().message();
  at::manual_seed(4);
  TensorMap inputs{{"x", at::randn({1, 8, 12, 12})}, {"w1", at::randn({8, 8, 3, 3})}, {"b1", at::randn({8})},
                   {"w2", at::randn({8, 8, 3, 3})}};
  auto expected = [&](const TensorMap& in) {
    at::Tensor r1 = at::relu(at::conv2d(in.at("x"), in.at("w1"), in.at("b1"), 1, 1));
    at::Tensor s = at::conv2d(r1, in.at("w2"), {}, 1, 1) + r1;
    return std::make_pair(at::max_pool2d(s, {2, 2}, {2, 2}).mean({2, 3}, true), s);
  };
  bool observedBlocked = false;
  Executor::Observer observe = [&](ir::ValueId, const at::Tensor& value) { observedBlocked |= value.is_mkldnn(); };
  for (int run = 0; run < 2; ++run) { // the second run reuses the reordered weights
    Expected<TensorMap> out = (*executor)->run(inputs, nullptr, &observe);
    ASSERT_TRUE(out) << out.error().message();
    auto [pooled, sum] = expected(inputs);
    EXPECT_FALSE(out->at("g").is_mkldnn());
    EXPECT_TRUE(at::allclose(out->at("g"), pooled, 1e-4, 1e-4));
    EXPECT_TRUE(at::allclose(out->at("s"), sum, 1e-4, 1e-4));
  }
  EXPECT_FALSE(observedBlocked);
  inputs["w2"] = at::randn({8, 8, 3, 3}); // a new weight tensor: reordered afresh
  Expected<TensorMap> blocked = (*executor)->run(inputs, nullptr, nullptr, OutputLayout::AsComputed);
  ASSERT_TRUE(blocked) << blocked.error().message();
  auto [pooled, sum] = expected(inputs);
  if (kOneDnnDirect) {
    EXPECT_FALSE(blocked->at("s").is_mkldnn());
    EXPECT_TRUE(blocked->at("s").is_contiguous(at::MemoryFormat::ChannelsLast));
  } else if (at::hasMKLDNN()) { // the residual Conv+Add's output stays in ATen's blocked layout
    EXPECT_TRUE(blocked->at("s").is_mkldnn());
    EXPECT_TRUE(inPrivateLayout(blocked->at("s")));
  }
  EXPECT_TRUE(at::allclose(denseFromPrivateLayout(blocked->at("g")), pooled, 1e-4, 1e-4));
  EXPECT_TRUE(at::allclose(denseFromPrivateLayout(blocked->at("s")), sum, 1e-4, 1e-4));
}

// 1-D convolutions run on oneDNN as 2-D ones over a single row (the output's channels innermost,
// as a 2-D convolution's are channels-last): strides, asymmetric pads, dilation, groups, a fused
// Relu and a fused residual Add all equal ATen's conv1d, on two runs (the second reuses the
// primitives through the cached 4-D view of each weight).
TEST(Executor, OneDimensionalConvolutionsRunAsRowsOfTwoDimensionalOnes) {
  NodeChain chain({"x", "w1", "b1", "w2", "w3"});
  chain.add(spec("Conv", {"x", "w1", "b1"}, {ints("pads", {1, 3}), ints("strides", {2})}, "c1"), "c1");
  chain.add(spec("Relu", {"c1"}, {}, "r1"), "r1");
  chain.add(spec("Conv", {"r1", "w2"}, {ints("pads", {2, 2}), ints("dilations", {2}), integer("group", 2)}, "c2"), "c2");
  chain.add(spec("Add", {"c2", "r1"}, {}, "a"), "s");
  chain.add(spec("Conv", {"s", "w3"}, {}, "c3"), "y");
  Expected<ir::Graph> graph = std::move(chain).finish({"y", "s"});
  ASSERT_TRUE(graph) << graph.error().message();
  Expected<std::unique_ptr<Executor>> executor = Executor::create(std::make_shared<const ir::Graph>(std::move(*graph)));
  ASSERT_TRUE(executor) << executor.error().message();
  at::manual_seed(53);
  TensorMap inputs{{"x", at::randn({2, 6, 30})}, {"w1", at::randn({8, 6, 5})}, {"b1", at::randn({8})},
                   {"w2", at::randn({8, 4, 3})}, {"w3", at::randn({5, 8, 1})}};
  const at::Tensor r1 = at::relu(at::conv1d(at::constant_pad_nd(inputs.at("x"), {1, 3}), inputs.at("w1"),
                                            inputs.at("b1"), 2));
  const at::Tensor sum = at::conv1d(r1, inputs.at("w2"), {}, 1, 2, 2, 2) + r1;
  const at::Tensor y = at::conv1d(sum, inputs.at("w3"));
  for (int run = 0; run < 2; ++run) {
    Expected<TensorMap> out = (*executor)->run(inputs);
    ASSERT_TRUE(out) << out.error().message();
    EXPECT_TRUE(at::allclose(out->at("s"), sum, 1e-4, 1e-4));
    EXPECT_TRUE(at::allclose(out->at("y"), y, 1e-4, 1e-4));
    if (kOneDnnDirect)
      EXPECT_EQ(out->at("y").stride(1), 1); // oneDNN's channels-innermost output, not ATen's
  }
}

// A fused Conv+Add accumulates onto its residual in place only when the residual is the op's to
// overwrite (KernelContext::mayOverwrite): not when a later node still reads it, not when it is
// the caller's input tensor. Every case computes what ATen's dense ops do, and the input is left
// as it was.
TEST(Executor, ResidualsAreOverwrittenOnlyWhenNothingElseReadsThem) {
  auto pads = ints("pads", {1, 1, 1, 1});
  NodeChain chain({"x", "w1", "w2", "w3"});
  // A ResNet block twice: Conv+Relu, Conv+Relu, then Conv+Add of the block's input.
  chain.add(spec("Conv", {"x", "w1"}, {pads}, "c1"), "c1");
  chain.add(spec("Relu", {"c1"}, {}, "r1"), "r1"); // dies at the first block's Add: overwritten
  chain.add(spec("Conv", {"r1", "w2"}, {pads}, "c2"), "c2");
  chain.add(spec("Relu", {"c2"}, {}, "r2"), "r2");
  chain.add(spec("Conv", {"r2", "w3"}, {pads}, "c3"), "c3");
  chain.add(spec("Add", {"c3", "r1"}, {}, "a1"), "s1"); // s1 is read after the second block: kept
  chain.add(spec("Conv", {"s1", "w2"}, {pads}, "c4"), "c4");
  chain.add(spec("Relu", {"c4"}, {}, "r4"), "r4");
  chain.add(spec("Conv", {"r4", "w3"}, {pads}, "c5"), "c5");
  chain.add(spec("Add", {"c5", "s1"}, {}, "a2"), "s2");
  chain.add(spec("Mul", {"s2", "s1"}, {}, "m"), "m");
  chain.add(spec("Conv", {"r2", "w1"}, {pads}, "c6"), "c6");
  chain.add(spec("Add", {"c6", "x"}, {}, "a3"), "s3"); // the caller's x: never written
  Expected<ir::Graph> graph = std::move(chain).finish({"m", "s3"});
  ASSERT_TRUE(graph) << graph.error().message();
  ASSERT_EQ(planFusions(*graph).groups.size(), 6u); // three Conv+Relu, three Conv+Add
  Expected<std::unique_ptr<Executor>> executor = Executor::create(std::make_shared<const ir::Graph>(std::move(*graph)));
  ASSERT_TRUE(executor) << executor.error().message();
  at::manual_seed(5);
  at::Tensor x = at::randn({1, 8, 10, 10}), xBefore = x.clone();
  auto weight = [] { return at::randn({8, 8, 3, 3}) / 8.0; }; // values stay near 1 along the chain
  TensorMap inputs{{"x", x}, {"w1", weight()}, {"w2", weight()}, {"w3", weight()}};
  auto conv = [&](const at::Tensor& v, const char* w) { return at::conv2d(v, inputs.at(w), {}, 1, 1); };
  at::Tensor r1 = at::relu(conv(x, "w1")), r2 = at::relu(conv(r1, "w2"));
  at::Tensor s1 = conv(r2, "w3") + r1;
  at::Tensor s2 = conv(at::relu(conv(s1, "w2")), "w3") + s1;
  at::Tensor s3 = conv(r2, "w1") + x;
  for (int run = 0; run < 2; ++run) {
    Expected<TensorMap> out = (*executor)->run(inputs);
    ASSERT_TRUE(out) << out.error().message();
    EXPECT_TRUE(at::allclose(out->at("m"), s2 * s1, 1e-4, 1e-4));
    EXPECT_TRUE(at::allclose(out->at("s3"), s3, 1e-4, 1e-4));
    EXPECT_TRUE(at::equal(x, xBefore));
  }
}
















// A Constant node's `value` attribute holding `proto`.
ir::Attribute constantValue(const onnx::TensorProto& proto) {
  ir::Attribute a;
  a.name = "value";
  a.kind = ir::AttrKind::Tensor;
  a.text = proto.SerializeAsString();
  return a;
}

ir::Attribute scalarTensor(float value) {
  onnx::TensorProto proto;
  proto.set_data_type(onnx::TensorProto::FLOAT);
  proto.add_float_data(value);
  return constantValue(proto);
}

// x -> MatMul(x, w) + b -> GELU as torch exports it (Div by sqrt 2, Erf, Add 1, Mul x, Mul 0.5).
// `alsoOutput`, when set, is another value the graph outputs: an inner value of the GELU ("e")
// forbids fusing it; the product's biased output ("h") forbids fusing the GELU into the product.
ir::Graph linearGelu(const char* alsoOutput = nullptr) {
  NodeChain chain({"x", "w", "b"});
  chain.add(spec("Constant", {}, {scalarTensor(1.41421356f)}, "sqrt2"), "sqrt2");
  chain.add(spec("Constant", {}, {scalarTensor(1.0f)}, "one"), "one");
  chain.add(spec("Constant", {}, {scalarTensor(0.5f)}, "half"), "half");
  chain.add(spec("MatMul", {"x", "w"}, {}, "mm"), "mm");
  chain.add(spec("Add", {"b", "mm"}, {}, "biased"), "h");
  chain.add(spec("Div", {"h", "sqrt2"}, {}, "div"), "d");
  chain.add(spec("Erf", {"d"}, {}, "erf"), "e");
  chain.add(spec("Add", {"e", "one"}, {}, "plus"), "p");
  chain.add(spec("Mul", {"h", "p"}, {}, "times"), "t");
  chain.add(spec("Mul", {"t", "half"}, {}, "scale"), "y");
  Expected<ir::Graph> graph =
      std::move(chain).finish(alsoOutput ? std::vector<std::string>{"y", alsoOutput} : std::vector<std::string>{"y"});
  EXPECT_TRUE(graph) << (graph ? "" : graph.error().message());
  return std::move(*graph);
}

// A graph run twice on one executor: fused (ops profiled), and observed, which makes every value
// and so runs the nodes one by one. `seen` names the values the observer saw.
struct FusedAndObserved {
  std::unique_ptr<Executor> executor;
  RunStats stats;
  TensorMap fused, observed;
  std::set<std::string> seen;
};
FusedAndObserved runFusedAndObserved(ir::Graph graph, const TensorMap& inputs) {
  FusedAndObserved result;
  Expected<std::unique_ptr<Executor>> executor = Executor::create(std::make_shared<const ir::Graph>(std::move(graph)));
  EXPECT_TRUE(executor) << (executor ? "" : executor.error().message());
  if (!executor)
    return result;
  result.executor = std::move(*executor);
  result.stats.profileOps = true;
  Expected<TensorMap> fused = result.executor->run(inputs, &result.stats);
  EXPECT_TRUE(fused) << (fused ? "" : fused.error().message());
  Executor::Observer observe = [&](ir::ValueId value, const at::Tensor&) {
    result.seen.insert(std::string(result.executor->graph().valueName(value)));
  };
  Expected<TensorMap> observed = result.executor->run(inputs, nullptr, &observe);
  EXPECT_TRUE(observed) << (observed ? "" : observed.error().message());
  if (fused && observed) {
    result.fused = std::move(*fused);
    result.observed = std::move(*observed);
  }
  return result;
}

// x -> MatMul(x, w) + b -> GELU's tanh form as exported (GPT-2's: Pow 3, Mul 0.044715, Add x, Mul
// sqrt(2/pi), Tanh, Add 1, and x * 0.5 times that, or x times that, times 0.5), or -> Relu: one
// product with the activation as its post-op, equal to the nodes (observed) and to ATen's.
// Mixed precision is torch.autocast over the whole run: the product (fused with its bias here)
// computes in the half type exactly as ATen's own call under autocast does, oneDNN's float32 path
// stays out, the weight stays float32, and the output comes back in its declared float32.
TEST(Executor, MixedPrecisionRunsUnderAutocastAndReturnsDeclaredTypes) {
  at::manual_seed(83);
  const at::Tensor x = at::randn({4, 16}), w = at::randn({16, 8}), b = at::randn({8});
  for (const auto& [precision, half] : {std::pair{Precision::Bf16, at::kBFloat16}, std::pair{Precision::Fp16, at::kHalf}}) {
    SCOPED_TRACE(c10::toString(half));
    NodeChain chain({"x"});
    addFloatParameter(chain.builder, "w", w);
    addFloatParameter(chain.builder, "b", b);
    chain.add(spec("MatMul", {"x", "w"}, {}, "mm"), "mm");
    chain.add(spec("Add", {"mm", "b"}, {}, "biased"), "h");
    chain.add(spec("Softmax", {"h"}, {integer("axis", -1)}, "softmax"), "y");
    Expected<ir::Graph> graph = std::move(chain).finish({"y", "h"});
    ASSERT_TRUE(graph) << graph.error().message();
    ExecutorOptions options;
    options.optimizations.precision = precision;
    auto executor = Executor::create(std::make_shared<const ir::Graph>(std::move(*graph)), options);
    ASSERT_TRUE(executor) << executor.error().message();
    Expected<TensorMap> out = (*executor)->run({{"x", x}});
    ASSERT_TRUE(out) << out.error().message();
    const at::Tensor want = at::linear(x.to(half), w.t().to(half), b.to(half));
    EXPECT_EQ(out->at("h").scalar_type(), at::kFloat);
    EXPECT_EQ(out->at("y").scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(out->at("h"), want.to(at::kFloat)));
    EXPECT_GT((out->at("h") - (at::matmul(x, w) + b)).abs().max().item<float>(), 0.0f); // not float32's
    EXPECT_FALSE(activeAutocast(at::kCPU)); // the scope ended with the run
  }
}

TEST(Fusion, ProductsTakeTanhGeluAndReluAsPostOps) {
  at::manual_seed(81);
  const TensorMap inputs{{"x", at::randn({3, 5, 8})}, {"w", at::randn({8, 6})}, {"b", at::randn({6})}};
  const at::Tensor h = at::matmul(inputs.at("x"), inputs.at("w")) + inputs.at("b");
  for (int form = 0; form < 3; ++form) {
    SCOPED_TRACE(form);
    NodeChain chain({"x", "w", "b"});
    for (const auto& [name, value] : {std::pair{"three", 3.0f}, std::pair{"c", 0.044715f},
                                      std::pair{"root", std::sqrt(2.0f / 3.14159265f)}, std::pair{"one", 1.0f},
                                      std::pair{"half", 0.5f}})
      chain.add(spec("Constant", {}, {scalarTensor(value)}, name), name);
    chain.add(spec("MatMul", {"x", "w"}, {}, "mm"), "mm");
    chain.add(spec("Add", {"mm", "b"}, {}, "biased"), "h");
    if (form == 2) {
      chain.add(spec("Relu", {"h"}, {}, "relu"), "y");
    } else {
      if (form == 0)
        chain.add(spec("Mul", {"h", "half"}, {}, "halved"), "hh");
      chain.add(spec("Pow", {"h", "three"}, {}, "cube"), "p3");
      chain.add(spec("Mul", {"p3", "c"}, {}, "cubed"), "m1");
      chain.add(spec("Add", {"h", "m1"}, {}, "inner"), "a");
      chain.add(spec("Mul", {"a", "root"}, {}, "scaled"), "m2");
      chain.add(spec("Tanh", {"m2"}, {}, "tanh"), "t");
      chain.add(spec("Add", {"t", "one"}, {}, "plus"), "a1");
      if (form == 0) {
        chain.add(spec("Mul", {"hh", "a1"}, {}, "times"), "y");
      } else {
        chain.add(spec("Mul", {"h", "a1"}, {}, "times"), "m3");
        chain.add(spec("Mul", {"m3", "half"}, {}, "halve"), "y");
      }
    }
    Expected<ir::Graph> graph = std::move(chain).finish({"y"});
    ASSERT_TRUE(graph) << graph.error().message();
    const FusionPlan plan = planFusions(*graph);
    ASSERT_EQ(plan.groups.size(), 1u);
    EXPECT_EQ(plan.groups[0].kind, form == 2 ? FusedGroup::Kind::MatMulBiasRelu : FusedGroup::Kind::MatMulBiasGeluTanh);
    EXPECT_EQ(plan.groups[0].nodes.size(), form == 2 ? 3u : 10u);
    FusedAndObserved runs = runFusedAndObserved(std::move(*graph), inputs);
    ASSERT_TRUE(runs.fused.count("y") && runs.observed.count("y"));
    const at::Tensor expected = form == 2 ? at::relu(h) : at::gelu(h, "tanh");
    EXPECT_TRUE(at::allclose(runs.fused.at("y"), expected, 1e-5, 1e-5));
    EXPECT_TRUE(at::allclose(runs.observed.at("y"), expected, 1e-5, 1e-5));
    EXPECT_EQ(runs.stats.secondsByOp.count(form == 2 ? "MatMul+Add+Relu" : "MatMul+Add+Gelu(tanh)"), 1u);
  }
}

TEST(Fusion, LinearAndGeluRunAsGroupsAndMatchTheirNodes) {
  ir::Graph fusible = linearGelu();
  FusionPlan plan = planFusions(fusible);
  ASSERT_EQ(plan.groups.size(), 1u); // the product with GELU as its post-op
  EXPECT_EQ(plan.groups[0].kind, FusedGroup::Kind::MatMulBiasGelu);
  EXPECT_EQ(plan.groups[0].nodes.size(), 7u);
  FusionPlan erfOut = planFusions(linearGelu("e")); // the Erf output is read outside: product alone
  ASSERT_EQ(erfOut.groups.size(), 1u);
  EXPECT_EQ(erfOut.groups[0].kind, FusedGroup::Kind::MatMulBias);
  ir::Graph biasedOut = linearGelu("h"); // the product's output is read outside: two groups
  FusionPlan split = planFusions(biasedOut);
  ASSERT_EQ(split.groups.size(), 2u);
  EXPECT_EQ(split.groups[0].kind, FusedGroup::Kind::MatMulBias);
  EXPECT_EQ(split.groups[1].kind, FusedGroup::Kind::Gelu);

  at::manual_seed(5);
  TensorMap inputs{{"x", at::randn({2, 3, 8})}, {"w", at::randn({8, 16})}, {"b", at::randn({16})}};
  at::Tensor h = at::matmul(inputs.at("x"), inputs.at("w")) + inputs.at("b");
  at::Tensor expected = h * 0.5 * (1 + at::erf(h / std::sqrt(2.0)));
  FusedAndObserved runs = runFusedAndObserved(std::move(fusible), inputs);
  ASSERT_TRUE(runs.fused.count("y") && runs.observed.count("y"));
  EXPECT_TRUE(at::allclose(runs.fused.at("y"), expected, 1e-5, 1e-5));
  EXPECT_EQ(runs.stats.secondsByOp.count("MatMul+Add+Gelu"), 1u);
  EXPECT_EQ(runs.stats.secondsByOp.count("Erf"), 0u);
  FusedAndObserved twoGroups = runFusedAndObserved(std::move(biasedOut), inputs);
  ASSERT_TRUE(twoGroups.fused.count("y") && twoGroups.fused.count("h"));
  EXPECT_TRUE(at::allclose(twoGroups.fused.at("y"), expected, 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(twoGroups.fused.at("h"), h, 1e-5, 1e-5));
  EXPECT_EQ(twoGroups.stats.secondsByOp.count("MatMul+Add"), 1u);
  // The observed run, node by node: same result.
  EXPECT_TRUE(runs.seen.count("e") && runs.seen.count("mm"));
  EXPECT_TRUE(at::allclose(runs.observed.at("y"), runs.fused.at("y"), 1e-5, 1e-6));
}

// LayerNorm as PyTorch exports it before opset 17 (means over the last axis, Pow 2, eps, then
// gamma and beta): one group computing at::layer_norm; an inner value read outside forbids it.
ir::Graph decomposedLayerNorm(bool alsoOutput, std::int64_t axis) {
  NodeChain chain({"x", "gamma", "beta"});
  chain.add(spec("Constant", {}, {scalarTensor(2.0f)}, "two"), "two");
  chain.add(spec("Constant", {}, {scalarTensor(1e-5f)}, "eps"), "eps");
  chain.add(spec("ReduceMean", {"x"}, {ints("axes", {axis})}, "mean"), "m");
  chain.add(spec("Sub", {"x", "m"}, {}, "sub"), "d");
  chain.add(spec("Pow", {"d", "two"}, {}, "pow"), "p");
  chain.add(spec("ReduceMean", {"p"}, {ints("axes", {axis})}, "var"), "v");
  chain.add(spec("Add", {"v", "eps"}, {}, "addeps"), "a");
  chain.add(spec("Sqrt", {"a"}, {}, "sqrt"), "s");
  chain.add(spec("Div", {"d", "s"}, {}, "div"), "n");
  chain.add(spec("Mul", {"n", "gamma"}, {}, "scale"), "g");
  chain.add(spec("Add", {"g", "beta"}, {}, "shift"), "y");
  Expected<ir::Graph> graph =
      std::move(chain).finish(alsoOutput ? std::vector<std::string>{"y", "v"} : std::vector<std::string>{"y"});
  EXPECT_TRUE(graph) << (graph ? "" : graph.error().message());
  return std::move(*graph);
}

TEST(Fusion, DecomposedLayerNormRunsAsOneLayerNorm) {
  ir::Graph fusible = decomposedLayerNorm(false, -1);
  FusionPlan plan = planFusions(fusible);
  ASSERT_EQ(plan.groups.size(), 1u);
  EXPECT_EQ(plan.groups[0].kind, FusedGroup::Kind::LayerNorm);
  EXPECT_EQ(plan.groups[0].nodes.size(), 9u);
  EXPECT_TRUE(planFusions(decomposedLayerNorm(true, -1)).groups.empty()); // the variance is an output
  EXPECT_TRUE(planFusions(decomposedLayerNorm(false, 0)).groups.empty()); // not the last axis (rank unknown)

  at::manual_seed(7);
  TensorMap inputs{{"x", at::randn({2, 5, 16})}, {"gamma", at::randn({16})}, {"beta", at::randn({16})}};
  at::Tensor expected = at::layer_norm(inputs.at("x"), {16}, inputs.at("gamma"), inputs.at("beta"), 1e-5);
  FusedAndObserved runs = runFusedAndObserved(std::move(fusible), inputs);
  ASSERT_TRUE(runs.fused.count("y") && runs.observed.count("y"));
  EXPECT_TRUE(at::allclose(runs.fused.at("y"), expected, 1e-5, 1e-5));
  EXPECT_EQ(runs.stats.secondsByOp.count("ReduceMean"), 0u);
  EXPECT_TRUE(runs.seen.count("v")); // the observed run made the variance: node by node
  EXPECT_TRUE(at::allclose(runs.observed.at("y"), runs.fused.at("y"), 1e-5, 1e-5));
  // A gamma that is not [N] (a broadcast [1, 16]) is applied after the normalization.
  inputs["gamma"] = inputs.at("gamma").reshape({1, 16});
  Expected<TensorMap> broadcast = runs.executor->run(inputs);
  ASSERT_TRUE(broadcast) << broadcast.error().message();
  EXPECT_TRUE(at::allclose(broadcast->at("y"), expected, 1e-5, 1e-5));
}

// Conv -> SiLU (Sigmoid, Mul) -> Conv -> HardSigmoid(alpha, beta): two fused groups whose
// post-ops (swish; linear then clip, with the HardSigmoid node's attributes) match ATen.
TEST(Fusion, ConvolutionsWithSiluAndHardSigmoidRunFused) {
  NodeChain chain({"x", "w1", "b1", "w2"});
  chain.add(spec("Conv", {"x", "w1", "b1"}, {ints("pads", {1, 1, 1, 1})}, "c1"), "c1");
  chain.add(spec("Sigmoid", {"c1"}, {}, "sig"), "s");
  chain.add(spec("Mul", {"s", "c1"}, {}, "silu"), "h");
  chain.add(spec("Conv", {"h", "w2"}, {}, "c2"), "c2");
  chain.add(spec("HardSigmoid", {"c2"}, {real("alpha", 0.3), real("beta", 0.4)}, "hard"), "y");
  Expected<ir::Graph> graph = std::move(chain).finish({"y"});
  ASSERT_TRUE(graph) << graph.error().message();
  FusionPlan plan = planFusions(*graph);
  ASSERT_EQ(plan.groups.size(), 2u);
  EXPECT_EQ(plan.groups[0].kind, FusedGroup::Kind::ConvSilu);
  EXPECT_EQ(plan.groups[0].nodes.size(), 3u);
  EXPECT_EQ(plan.groups[1].kind, FusedGroup::Kind::ConvHardSigmoid);
  Expected<std::unique_ptr<Executor>> executor = Executor::create(std::make_shared<const ir::Graph>(std::move(*graph)));
  ASSERT_TRUE(executor) << executor.error().message();
  at::manual_seed(6);
  TensorMap inputs{{"x", at::randn({1, 4, 9, 9})}, {"w1", at::randn({8, 4, 3, 3})}, {"b1", at::randn({8})},
                   {"w2", at::randn({6, 8, 1, 1})}};
  at::Tensor c1 = at::conv2d(inputs.at("x"), inputs.at("w1"), inputs.at("b1"), 1, 1);
  at::Tensor c2 = at::conv2d(c1 * at::sigmoid(c1), inputs.at("w2"));
  at::Tensor expected = at::clamp(c2 * 0.3 + 0.4, 0.0, 1.0);
  RunStats stats;
  stats.profileOps = true;
  Expected<TensorMap> out = (*executor)->run(inputs, &stats);
  ASSERT_TRUE(out) << out.error().message();
  EXPECT_TRUE(at::allclose(out->at("y"), expected, 1e-4, 1e-5));
  if (kOneDnnDirect) {
    EXPECT_EQ(stats.secondsByOp.count("Conv+Sigmoid+Mul"), 1u);
    EXPECT_EQ(stats.secondsByOp.count("Conv+HardSigmoid"), 1u);
  }
}

// HardSwish as exported before opset 14 (Conv -> HardSigmoid(1/6, 0.5) -> Mul(conv, that)) runs
// as one Conv+HardSwish; a HardSigmoid with other constants beside a Mul is left alone.
TEST(Fusion, DecomposedHardSwishRunsAsTheConvolutionsPostOp) {
  NodeChain chain({"x", "w1", "w2"});
  chain.add(spec("Conv", {"x", "w1"}, {ints("pads", {1, 1, 1, 1})}, "c1"), "c1");
  chain.add(spec("HardSigmoid", {"c1"}, {real("alpha", 1.0f / 6.0f), real("beta", 0.5)}, "gate1"), "g1");
  chain.add(spec("Mul", {"c1", "g1"}, {}, "swish"), "h");
  chain.add(spec("Conv", {"h", "w2"}, {}, "c2"), "c2");
  chain.add(spec("HardSigmoid", {"c2"}, {real("alpha", 0.2)}, "gate2"), "g2");
  chain.add(spec("Mul", {"g2", "c2"}, {}, "gated"), "y");
  Expected<ir::Graph> graph = std::move(chain).finish({"y"});
  ASSERT_TRUE(graph) << graph.error().message();
  FusionPlan plan = planFusions(*graph);
  ASSERT_EQ(plan.groups.size(), 1u);
  EXPECT_EQ(plan.groups[0].kind, FusedGroup::Kind::ConvHardSwish);
  EXPECT_EQ(plan.groups[0].nodes.size(), 3u);
  at::manual_seed(59);
  TensorMap inputs{{"x", at::randn({1, 4, 9, 9})}, {"w1", at::randn({8, 4, 3, 3})}, {"w2", at::randn({6, 8, 1, 1})}};
  const at::Tensor c1 = at::conv2d(inputs.at("x"), inputs.at("w1"), {}, 1, 1);
  const at::Tensor c2 = at::conv2d(c1 * at::clamp(c1 / 6.0 + 0.5, 0.0, 1.0), inputs.at("w2"));
  const at::Tensor expected = at::clamp(c2 * 0.2 + 0.5, 0.0, 1.0) * c2;
  FusedAndObserved runs = runFusedAndObserved(std::move(*graph), inputs);
  ASSERT_TRUE(runs.fused.count("y"));
  EXPECT_TRUE(at::allclose(runs.fused.at("y"), expected, 1e-4, 1e-5));
  EXPECT_TRUE(at::allclose(runs.observed.at("y"), expected, 1e-4, 1e-5));
  if (kOneDnnDirect)
    EXPECT_EQ(runs.stats.secondsByOp.count("Conv+HardSwish"), 1u);
}

// Conv -> BatchNormalization -> Relu, then ConvTranspose (groups 2, bias) -> BatchNormalization
// -> Relu, then ConvTranspose -> BatchNormalization read twice: three groups, each normalization
// folded into its convolution's weight and bias, equal to ATen's nodes one by one; a trainable
// executor (autograd) runs the nodes themselves and their gradients are ATen's. Normalizations
// whose statistics are inputs, or in training mode, are not folded.
ir::Graph convolutionsWithBatchNorms(bool statisticsAreInputs, std::int64_t trainingMode,
                                     const std::map<std::string, at::Tensor>& parameters) {
  ir::GraphBuilder builder(ir::SourceFormat::Onnx);
  builder.modelInfo().opsetImports = {{"", 17}};
  builder.addInput("x", ir::ValueType::tensor(ir::DType::F32, {2, 3, 6, 5}));
  for (const auto& [name, t] : parameters) {
    const bool statistic = name.find("mean") != std::string::npos || name.find("var") != std::string::npos;
    if (statistic && statisticsAreInputs) {
      builder.addInput(name, ir::ValueType::tensor(ir::DType::F32, t.sizes().vec()));
    } else {
      addFloatParameter(builder, name, t);
      if (statistic)
        builder.markFixed(name, ir::Fixed::RunningStatistic); // as the ONNX reader marks them
    }
  }
  auto node = [&](std::string op, std::vector<std::string> inputs, std::string out, std::vector<ir::Attribute> attrs) {
    ir::NodeSpec spec;
    spec.opType = std::move(op);
    spec.name = out;
    spec.inputs = std::move(inputs);
    spec.outputs.push_back({std::move(out), ir::ValueType()});
    spec.attributes = std::move(attrs);
    builder.addNode(spec);
  };
  auto norm = [&](const std::string& in, const std::string& p, const std::string& out) {
    node("BatchNormalization", {in, p + "_scale", p + "_shift", p + "_mean", p + "_var"}, out,
         {real("epsilon", 1e-3), integer("training_mode", trainingMode)});
  };
  node("Conv", {"x", "w1"}, "c1", {ints("pads", {1, 1, 1, 1})});
  norm("c1", "n1", "b1");
  node("Relu", {"b1"}, "r1", {});
  node("ConvTranspose", {"r1", "w2", "bias2"}, "c2", {ints("strides", {2, 2}), ints("pads", {1, 1, 1, 1}), integer("group", 2)});
  norm("c2", "n2", "b2");
  node("Relu", {"b2"}, "r2", {});
  node("ConvTranspose", {"r2", "w3"}, "c3", {ints("strides", {1, 1})});
  norm("c3", "n3", "b3");
  node("Relu", {"b3"}, "r3", {});
  node("Add", {"r3", "b3"}, "y", {});
  builder.setOutputs({"y"});
  Expected<ir::Graph> graph = std::move(builder).finish();
  EXPECT_TRUE(graph) << (graph ? "" : graph.error().message());
  return std::move(*graph);
}

TEST(Fusion, BatchNormalizationsFoldIntoTheirConvolutions) {
  at::manual_seed(29);
  std::map<std::string, at::Tensor> p{{"w1", at::randn({4, 3, 3, 3})}, {"w2", at::randn({4, 3, 4, 4})},
                                      {"bias2", at::randn({6})}, {"w3", at::randn({6, 2, 1, 1})}};
  for (auto [name, channels] : {std::pair<std::string, std::int64_t>{"n1", 4}, {"n2", 6}, {"n3", 2}}) {
    p[name + "_scale"] = at::randn({channels});
    p[name + "_shift"] = at::randn({channels});
    p[name + "_mean"] = at::randn({channels});
    p[name + "_var"] = at::rand({channels}) + 0.5;
  }
  using K = FusedGroup::Kind;
  FusionPlan plan = planFusions(convolutionsWithBatchNorms(false, 0, p));
  ASSERT_EQ(plan.groups.size(), 3u);
  EXPECT_EQ(plan.groups[0].kind, K::ConvBatchNormRelu);
  EXPECT_EQ(plan.groups[1].kind, K::ConvTransposeBatchNormRelu);
  EXPECT_EQ(plan.groups[2].kind, K::ConvTransposeBatchNorm); // its output has two readers
  EXPECT_EQ(plan.groups[2].nodes.size(), 2u);
  for (const FusedGroup& group : planFusions(convolutionsWithBatchNorms(true, 0, p)).groups)
    EXPECT_NE(group.kind, K::ConvBatchNormRelu); // statistics that are inputs are not fixed: Conv+Relu at most
  EXPECT_TRUE(planFusions(convolutionsWithBatchNorms(false, 1, p)).groups.empty()); // training mode

  const at::Tensor x = at::randn({2, 3, 6, 5});
  auto expected = [&](const std::map<std::string, at::Tensor>& q) {
    auto norm = [&](const at::Tensor& t, const std::string& n) {
      return at::batch_norm(t, q.at(n + "_scale"), q.at(n + "_shift"), q.at(n + "_mean"), q.at(n + "_var"), false, 0.0,
                            1e-3, false);
    };
    at::Tensor r1 = at::relu(norm(at::conv2d(x, q.at("w1"), {}, 1, 1), "n1"));
    at::Tensor r2 = at::relu(norm(at::conv_transpose2d(r1, q.at("w2"), q.at("bias2"), 2, 1, 0, 2), "n2"));
    at::Tensor b3 = norm(at::conv_transpose2d(r2, q.at("w3")), "n3");
    return at::relu(b3) + b3;
  };
  const at::Tensor want = expected(p);
  auto fused = Executor::create(std::make_shared<const ir::Graph>(convolutionsWithBatchNorms(false, 0, p)));
  ExecutorOptions alone;
  alone.optimizations.fusion = false;
  auto unfused = Executor::create(std::make_shared<const ir::Graph>(convolutionsWithBatchNorms(false, 0, p)), alone);
  ASSERT_TRUE(fused && unfused);
  for (int run = 0; run < 2; ++run) { // the second run reuses the folded weights
    RunStats stats;
    stats.profileOps = true;
    Expected<TensorMap> a = (*fused)->run({{"x", x}}, &stats), b = (*unfused)->run({{"x", x}});
    ASSERT_TRUE(a && b) << (a ? b.error().message() : a.error().message());
    EXPECT_TRUE(at::allclose(a->at("y"), want, 1e-4, 1e-4));
    EXPECT_TRUE(at::allclose(a->at("y"), b->at("y"), 1e-4, 1e-4));
    EXPECT_EQ(stats.secondsByOp.count("Conv+BatchNormalization+Relu"), 1u);
    EXPECT_EQ(stats.secondsByOp.count("ConvTranspose+BatchNormalization+Relu"), 1u);
    EXPECT_EQ(stats.secondsByOp.count("ConvTranspose+BatchNormalization"), 1u);
    EXPECT_EQ(stats.secondsByOp.count("BatchNormalization"), 0u);
  }

  // Trainable: the fused groups run their nodes, so autograd sees the normalization's own
  // parameters; the gradients equal ATen's.
  ExecutorOptions training;
  training.trainable = true;
  auto trainable = Executor::create(std::make_shared<const ir::Graph>(convolutionsWithBatchNorms(false, 0, p)), training);
  ASSERT_TRUE(trainable);
  Expected<TensorMap> out = (*trainable)->run({{"x", x}});
  ASSERT_TRUE(out) << out.error().message();
  out->at("y").sum().backward();
  std::map<std::string, at::Tensor> leaves;
  for (const auto& [name, t] : p)
    leaves[name] = t.clone().requires_grad_(name.find("mean") == std::string::npos && name.find("var") == std::string::npos);
  expected(leaves).sum().backward();
  std::size_t compared = 0;
  for (const auto& [name, t] : (*trainable)->trainableParameters()) {
    ASSERT_TRUE(t.grad().defined()) << name;
    EXPECT_TRUE(at::allclose(t.grad(), leaves.at(name).grad(), 1e-3, 1e-3)) << name;
    ++compared;
  }
  EXPECT_EQ(compared, 10u); // three weights, a bias, three scales and three shifts
}

// A BatchNormalization not after a convolution (DenseNet's pre-activation), then Relu, runs as
// one group; alone it runs as x * m + s per channel. Both equal ATen's, keep a channels-last input's
// layout, and reuse the per-channel terms on the second run.
TEST(Fusion, BatchNormalizationThenReluRunsAsOnePass) {
  at::manual_seed(37);
  NodeChain chain({"x"});
  const std::int64_t channels = 6;
  const std::vector<std::string> terms{"scale", "shift", "mean", "var"};
  const std::map<std::string, at::Tensor> p{{"scale", at::randn({channels})}, {"shift", at::randn({channels})},
                                            {"mean", at::randn({channels})}, {"var", at::rand({channels}) + 0.5}};
  for (const std::string& name : terms)
    addFloatParameter(chain.builder, name, p.at(name));
  chain.add(spec("BatchNormalization", {"x", "scale", "shift", "mean", "var"}, {real("epsilon", 1e-3)}, "norm"), "b");
  chain.add(spec("Relu", {"b"}, {}, "relu"), "y");
  chain.add(spec("BatchNormalization", {"x", "scale", "shift", "mean", "var"}, {real("epsilon", 1e-3)}, "alone"), "z");
  Expected<ir::Graph> graph = std::move(chain).finish({"y", "z"});
  ASSERT_TRUE(graph) << graph.error().message();
  const FusionPlan plan = planFusions(*graph);
  ASSERT_EQ(plan.groups.size(), 1u);
  EXPECT_EQ(plan.groups[0].kind, FusedGroup::Kind::BatchNormRelu);
  auto executor = Executor::create(std::make_shared<const ir::Graph>(std::move(*graph)));
  ASSERT_TRUE(executor);
  const at::Tensor x = at::randn({2, channels, 5, 7}).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor normalized = at::batch_norm(x.contiguous(), p.at("scale"), p.at("shift"), p.at("mean"), p.at("var"),
                                               false, 0.0, 1e-3, false);
  for (int run = 0; run < 2; ++run) {
    RunStats stats;
    stats.profileOps = true;
    Expected<TensorMap> out = (*executor)->run({{"x", x}}, &stats);
    ASSERT_TRUE(out) << out.error().message();
    EXPECT_TRUE(at::allclose(out->at("y"), at::relu(normalized), 1e-5, 1e-5));
    EXPECT_TRUE(at::allclose(out->at("z"), normalized, 1e-5, 1e-5));
    EXPECT_TRUE(out->at("y").is_contiguous(at::MemoryFormat::ChannelsLast));
    EXPECT_EQ(stats.secondsByOp.count("BatchNormalization+Relu"), 1u);
  }
}

// DenseNet's layer input: Concat -> BatchNormalization -> Relu runs as one group that never makes
// the concatenation, for channels-last and contiguous pieces alike; it equals ATen's cat, batch_norm
// and relu, and keeps the pieces' layout. A Concat whose output is also read elsewhere is not fused.
TEST(Fusion, ConcatThenBatchNormalizationThenReluRunsAsOnePass) {
  at::manual_seed(41);
  const std::vector<std::int64_t> widths{16, 3, 17}; // 36 channels: vector widths and remainders
  const std::int64_t channels = 36;
  const std::map<std::string, at::Tensor> p{{"scale", at::randn({channels})}, {"shift", at::randn({channels})},
                                            {"mean", at::randn({channels})}, {"var", at::rand({channels}) + 0.5}};
  auto graphFor = [&](bool concatAlsoOutput) {
    NodeChain chain({"a", "b", "c"});
    for (const auto& [name, value] : p)
      addFloatParameter(chain.builder, name, value);
    chain.add(spec("Concat", {"a", "b", "c"}, {integer("axis", 1)}, "cat"), "joined");
    chain.add(spec("BatchNormalization", {"joined", "scale", "shift", "mean", "var"}, {real("epsilon", 1e-3)}, "norm"), "n");
    chain.add(spec("Relu", {"n"}, {}, "relu"), "y");
    std::vector<std::string> outputs{"y"};
    if (concatAlsoOutput)
      outputs.push_back("joined");
    return std::move(chain).finish(outputs);
  };
  Expected<ir::Graph> graph = graphFor(false), shared = graphFor(true);
  ASSERT_TRUE(graph && shared);
  const FusionPlan plan = planFusions(*graph);
  ASSERT_EQ(plan.groups.size(), 1u);
  EXPECT_EQ(plan.groups[0].kind, FusedGroup::Kind::ConcatBatchNormRelu);
  EXPECT_EQ(plan.groups[0].operands.size(), 7u); // the normalization's four parameters, then the pieces
  for (const FusedGroup& group : planFusions(*shared).groups)
    EXPECT_NE(group.kind, FusedGroup::Kind::ConcatBatchNormRelu);
  auto executor = Executor::create(std::make_shared<const ir::Graph>(std::move(*graph)));
  ASSERT_TRUE(executor);
  auto reference = [&](const std::vector<at::Tensor>& pieces) {
    return at::relu(at::batch_norm(at::cat(pieces, 1).contiguous(), p.at("scale"), p.at("shift"), p.at("mean"),
                                   p.at("var"), false, 0.0, 1e-3, false));
  };
  for (int layout = 0; layout < 3; ++layout) { // channels-last, contiguous, mixed (the nodes one by one)
    std::vector<at::Tensor> pieces;
    for (std::size_t i = 0; i < widths.size(); ++i) {
      at::Tensor piece = at::randn({2, widths[i], 5, 7});
      const bool channelsLast = layout == 0 || (layout == 2 && i == 1);
      pieces.push_back(channelsLast ? piece.contiguous(at::MemoryFormat::ChannelsLast) : piece);
    }
    pieces[0][1][4][2][3] = std::numeric_limits<float>::quiet_NaN(); // Relu keeps NaN, as ATen's does
    RunStats stats;
    stats.profileOps = true;
    Expected<TensorMap> out = (*executor)->run({{"a", pieces[0]}, {"b", pieces[1]}, {"c", pieces[2]}}, &stats);
    ASSERT_TRUE(out) << out.error().message();
    const at::Tensor& y = out->at("y");
    EXPECT_TRUE(at::allclose(y, reference(pieces), 1e-5, 1e-5, /*equal_nan=*/true)) << layout;
    EXPECT_TRUE(std::isnan(y[1][4][2][3].item<float>())) << layout;
    if (layout == 0)
      EXPECT_TRUE(y.is_contiguous(at::MemoryFormat::ChannelsLast));
    EXPECT_EQ(stats.secondsByOp.count("Concat+BatchNormalization+Relu"), 1u);
    EXPECT_EQ(stats.secondsByOp.count("Concat"), 0u);
  }
}

// The one-pass kernel itself: any rank from 2 (channels-last for every rank: [N, spatial..., C] in
// memory), with and without the Relu; pieces it cannot read in one pass give an undefined result.
TEST(Kernels, ChannelsLastDenseInterleavesAnImagesPlanes) {
  for (const std::vector<std::int64_t>& sizes :
       std::vector<std::vector<std::int64_t>>{{1, 1, 5, 7}, {2, 2, 3, 4}, {1, 3, 224, 224}, {3, 3, 17, 1}, {2, 4, 9, 11},
                                              {1, 3, 4, 5, 6}, {1, 5, 6, 7}}) {
    const at::Tensor x = at::randn(sizes);
    const at::MemoryFormat channelsLast = x.dim() == 5 ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::ChannelsLast;
    const at::Tensor got = channelsLastDense(x);
    EXPECT_TRUE(got.is_contiguous(channelsLast)) << c10::IntArrayRef(sizes);
    EXPECT_TRUE(at::equal(got, x)) << c10::IntArrayRef(sizes);
    EXPECT_TRUE(channelsLastDense(got).is_same(got)); // already channels-last: itself
  }
  const at::Tensor doubles = at::randn({1, 3, 4, 5}, at::kDouble); // other dtypes: ATen's copy, same values
  EXPECT_TRUE(at::equal(channelsLastDense(doubles), doubles));
  EXPECT_TRUE(channelsLastDense(doubles).is_contiguous(at::MemoryFormat::ChannelsLast));
}

TEST(Kernels, ScaleShiftOfAConcatenationEqualsTheNodesOneByOne) {
  at::manual_seed(43);
  for (const std::vector<std::int64_t>& spatial : std::vector<std::vector<std::int64_t>>{{}, {9}, {4, 5}, {2, 3, 4}}) {
    std::vector<at::Tensor> planes, lastChannel;
    for (std::int64_t width : {5, 32, 1}) {
      std::vector<std::int64_t> stored{3};
      stored.insert(stored.end(), spatial.begin(), spatial.end());
      stored.push_back(width);
      std::vector<std::int64_t> order{0, static_cast<std::int64_t>(stored.size()) - 1};
      for (std::size_t d = 1; d + 1 < stored.size(); ++d)
        order.push_back(static_cast<std::int64_t>(d));
      lastChannel.push_back(at::randn(stored).permute(order)); // [N, C, spatial...] over channels-last memory
      planes.push_back(lastChannel.back().contiguous());
    }
    const at::Tensor m = at::randn({38}), s = at::randn({38});
    std::vector<std::int64_t> perChannel(spatial.size() + 2, 1);
    perChannel[1] = 38;
    const at::Tensor want = at::cat(planes, 1) * m.view(perChannel) + s.view(perChannel);
    for (bool relu : {false, true})
      for (const auto* pieces : {&planes, &lastChannel}) {
        at::Tensor y = scaleShiftConcatenation(*pieces, m, s, relu);
        ASSERT_TRUE(y.defined()) << spatial.size();
        EXPECT_TRUE(at::allclose(y, relu ? at::relu(want) : want, 1e-5, 1e-5)) << spatial.size() << relu;
        if (pieces == &planes)
          EXPECT_TRUE(y.is_contiguous()); // the pieces' layout
        else
          EXPECT_EQ(y.stride(1), 1); // channels innermost
      }
    if (!spatial.empty())
      EXPECT_FALSE(scaleShiftConcatenation({planes[0], lastChannel[1]}, m.narrow(0, 0, 37), s.narrow(0, 0, 37), true).defined());
  }
  EXPECT_FALSE(scaleShiftConcatenation({at::ones({2, 3}, at::kDouble)}, at::ones({3}), at::ones({3}), true).defined());
  EXPECT_FALSE(scaleShiftConcatenation({at::ones({2, 3})}, at::ones({4}), at::ones({4}), true).defined());
}

// A Constant node's int64 vector (a reshape target, gather indices).
ir::Attribute int64Tensor(const std::vector<std::int64_t>& values, bool scalar = false) {
  onnx::TensorProto proto;
  proto.set_data_type(onnx::TensorProto::INT64);
  if (!scalar)
    proto.add_dims(static_cast<std::int64_t>(values.size()));
  for (std::int64_t v : values)
    proto.add_int64_data(v);
  return constantValue(proto);
}

// ShuffleNet's channel shuffle after the Concat of its branches: Concat -> Reshape [N, g, C/g, H, W]
// -> Transpose(0, 2, 1, 3, 4) -> Reshape [N, C, H, W] runs as one group from the pieces, for
// channels-last pieces, channel slices of a channels-last tensor, contiguous pieces, and pieces
// that do not line up with the groups (the nodes' semantics on ATen). All equal ATen's.
TEST(Fusion, ChannelShuffleRunsAsOneGroup) {
  at::manual_seed(47);
  auto graphFor = [](std::int64_t groups, std::int64_t channels, bool withConcat) {
    NodeChain chain({"a", "b"});
    chain.add(spec("Constant", {}, {int64Tensor({0, groups, channels / groups, 4, 5})}, "split"), "split");
    chain.add(spec("Constant", {}, {int64Tensor({0, -1, 4, 5})}, "merged"), "merged");
    if (withConcat)
      chain.add(spec("Concat", {"a", "b"}, {integer("axis", 1)}, "cat"), "x");
    chain.add(spec("Reshape", {withConcat ? "x" : "a", "split"}, {}, "reshape"), "r");
    chain.add(spec("Transpose", {"r"}, {ints("perm", {0, 2, 1, 3, 4})}, "transpose"), "t");
    chain.add(spec("Reshape", {"t", "merged"}, {}, "back"), "y");
    return std::move(chain).finish({"y"});
  };
  auto reference = [](const at::Tensor& x, std::int64_t groups) {
    return x.reshape({x.size(0), groups, x.size(1) / groups, 4, 5}).transpose(1, 2).reshape(x.sizes());
  };
  const at::Tensor whole = at::randn({2, 12, 4, 5}).contiguous(at::MemoryFormat::ChannelsLast);
  struct Case {
    const char* name;
    at::Tensor a, b;
    std::int64_t groups;
  };
  const std::vector<Case> cases{
      {"channels-last", at::randn({2, 6, 4, 5}).contiguous(at::MemoryFormat::ChannelsLast),
       at::randn({2, 6, 4, 5}).contiguous(at::MemoryFormat::ChannelsLast), 2},
      {"channel slices", whole.narrow(1, 0, 6), whole.narrow(1, 6, 6), 2},
      {"contiguous", at::randn({2, 6, 4, 5}), at::randn({2, 6, 4, 5}), 3},
      {"groups across pieces", at::randn({2, 4, 4, 5}).contiguous(at::MemoryFormat::ChannelsLast),
       at::randn({2, 8, 4, 5}).contiguous(at::MemoryFormat::ChannelsLast), 3}};
  for (const Case& test : cases) {
    Expected<ir::Graph> graph = graphFor(test.groups, 12, true);
    ASSERT_TRUE(graph) << graph.error().message();
    const FusionPlan plan = planFusions(*graph);
    ASSERT_EQ(plan.groups.size(), 1u);
    EXPECT_EQ(plan.groups[0].kind, FusedGroup::Kind::ConcatChannelShuffle);
    auto executor = Executor::create(std::make_shared<const ir::Graph>(std::move(*graph)));
    ASSERT_TRUE(executor);
    RunStats stats;
    stats.profileOps = true;
    Expected<TensorMap> out = (*executor)->run({{"a", test.a}, {"b", test.b}}, &stats);
    ASSERT_TRUE(out) << test.name << ": " << out.error().message();
    EXPECT_TRUE(at::equal(out->at("y"), reference(at::cat({test.a, test.b}, 1), test.groups))) << test.name;
    EXPECT_EQ(stats.secondsByOp.count("Concat+Reshape+Transpose+Reshape"), 1u) << test.name;
    EXPECT_EQ(stats.secondsByOp.count("Concat"), 0u) << test.name;
  }
  // Without a Concat: the shuffle of one tensor.
  Expected<ir::Graph> alone = graphFor(4, 12, false);
  ASSERT_TRUE(alone);
  EXPECT_EQ(planFusions(*alone).groups.at(0).kind, FusedGroup::Kind::ChannelShuffle);
  auto executor = Executor::create(std::make_shared<const ir::Graph>(std::move(*alone)));
  ASSERT_TRUE(executor);
  Expected<TensorMap> out = (*executor)->run({{"a", whole}, {"b", whole}});
  ASSERT_TRUE(out) << out.error().message();
  EXPECT_TRUE(at::equal(out->at("y"), reference(whole, 4)));
  EXPECT_TRUE(out->at("y").is_contiguous(at::MemoryFormat::ChannelsLast));
}

// Rows of channels: channels-last for any rank and channel slices of it have a row stride; other
// layouts have none.
TEST(Kernels, ChannelRowStrideOfLayouts) {
  const at::Tensor last = at::zeros({2, 12, 4, 5}).contiguous(at::MemoryFormat::ChannelsLast);
  EXPECT_EQ(channelRowStride(last), 12);
  EXPECT_EQ(channelRowStride(last.narrow(1, 6, 6)), 12);
  EXPECT_EQ(channelRowStride(at::zeros({2, 12, 4, 5})), 0);
  EXPECT_EQ(channelRowStride(at::zeros({3, 7})), 7);
  EXPECT_EQ(channelRowStride(at::zeros({1, 7, 1, 1})), 7);
  EXPECT_EQ(channelRowStride(at::zeros({2, 5, 3}).permute({0, 2, 1})), 3); // [2, 3, 5] over [2, 5, 3]: rows of 3
  EXPECT_EQ(channelRowStride(last.narrow(2, 0, 2)), 0);                   // rows of the batch no longer nest
  EXPECT_EQ(channelRowStride(at::zeros({5})), 0);
}

// Shape arithmetic (Shape -> Gather -> Mul -> Concat -> Reshape) is computed on the first run and
// reused while the operands repeat; a new input shape computes it again, and --no-shape-memo
// computes it every run. Results are the same either way.
TEST(Executor, ShapeArithmeticIsReusedWhileItsOperandsRepeat) {
  NodeChain chain({"x"});
  chain.add(spec("Shape", {"x"}, {}, "shape"), "s");
  chain.add(spec("Constant", {}, {int64Tensor({1}, true)}, "one"), "one");
  chain.add(spec("Gather", {"s", "one"}, {integer("axis", 0)}, "gather"), "rows");
  chain.add(spec("Constant", {}, {int64Tensor({2})}, "two"), "two");
  chain.add(spec("Constant", {}, {int64Tensor({0})}, "zero"), "zero");
  chain.add(spec("Unsqueeze", {"rows", "zero"}, {}, "unsqueeze"), "rows1");
  chain.add(spec("Mul", {"rows1", "two"}, {}, "mul"), "doubled");
  chain.add(spec("Constant", {}, {int64Tensor({-1})}, "minus"), "minus");
  chain.add(spec("Concat", {"minus", "doubled"}, {integer("axis", 0)}, "target"), "target");
  chain.add(spec("Reshape", {"x", "target"}, {}, "reshape"), "y");
  Expected<ir::Graph> graph = std::move(chain).finish({"y"});
  ASSERT_TRUE(graph) << graph.error().message();
  auto shared = std::make_shared<const ir::Graph>(std::move(*graph));
  ExecutorOptions everyRun;
  everyRun.optimizations.rememberShapeArithmetic = false;
  auto remembering = Executor::create(shared), computing = Executor::create(shared, everyRun);
  ASSERT_TRUE(remembering && computing);
  for (const auto& [shape, run] : std::vector<std::pair<std::vector<std::int64_t>, int>>{
           {{4, 6}, 0}, {{4, 6}, 1}, {{4, 6}, 2}, {{6, 10}, 0}, {{6, 10}, 1}}) {
    const at::Tensor x = at::arange(shape[0] * shape[1], at::kFloat).reshape(shape);
    RunStats stats, everyStats;
    stats.profileOps = everyStats.profileOps = true;
    Expected<TensorMap> y = (*remembering)->run({{"x", x}}, &stats), z = (*computing)->run({{"x", x}}, &everyStats);
    ASSERT_TRUE(y && z) << (y ? z.error().message() : y.error().message());
    EXPECT_TRUE(at::equal(y->at("y"), x.reshape({-1, 2 * shape[1]})));
    EXPECT_TRUE(at::equal(z->at("y"), y->at("y")));
    // The first run of a shape computes the arithmetic; later runs of it reuse it.
    EXPECT_EQ(stats.secondsByOp.count("Gather"), run == 0 ? 1u : 0u) << shape[1] << " run " << run;
    EXPECT_EQ(stats.secondsByOp.count("Concat"), run == 0 ? 1u : 0u) << shape[1] << " run " << run;
    EXPECT_EQ(everyStats.secondsByOp.count("Gather"), 1u);
  }
}

TEST(Tensors, FilesRoundTripAndRandomInputsAreSeededPerName) {
  TensorMap tensors{{"f", at::tensor({1.5f, -2.f})},
                    {"i", longs({1, 1LL << 60})},
                    {"b", at::tensor({1, 0}).to(at::kBool)}};
  std::string path = ::testing::TempDir() + "/tensors.json";
  ASSERT_TRUE(writeTensorFile(tensors, path));
  Expected<TensorMap> back = readTensorFile(path);
  ASSERT_TRUE(back) << back.error().message();
  for (const auto& [name, tensor] : tensors) {
    EXPECT_EQ(back->at(name).scalar_type(), tensor.scalar_type()) << name;
    EXPECT_TRUE(at::equal(back->at(name), tensor)) << name;
  }
  std::remove(path.c_str());

  TestGraph t;
  t.input("x", {2, 3}).input("z", {4}).op("Relu", "r", {"x"}, {2, 3});
  ir::Graph g = t.output({"r"}).build();
  Expected<TensorMap> first = randomInputs(g, 5), again = randomInputs(g, 5), other = randomInputs(g, 6);
  ASSERT_TRUE(first && again && other);
  EXPECT_TRUE(at::equal(first->at("x"), again->at("x")));
  EXPECT_FALSE(at::equal(first->at("x"), other->at("x")));
  TestGraph u;
  u.input("x", {2, 3}).op("Relu", "r", {"x"}, {2, 3});
  ir::Graph h = u.output({"r"}).build();
  Expected<TensorMap> alone = randomInputs(h, 5); // same name, same seed: same tensor
  ASSERT_TRUE(alone);
  EXPECT_TRUE(at::equal(first->at("x"), alone->at("x")));
}

TEST(Microbatches, SplitThenMergeIsExact) {
  for (std::int64_t rows : {128, 256, 512}) {
    TensorMap inputs{{"x", at::randn({rows, 7})}, {"ids", at::randint(0, 100, {rows}, at::kLong)},
                     {"scale", at::scalar_tensor(2.5)}};
    Expected<std::vector<TensorMap>> chunks = splitMicrobatches(inputs, 2);
    ASSERT_TRUE(chunks);
    ASSERT_EQ(chunks->size(), 2u);
    EXPECT_EQ(chunks->at(0).at("x").size(0), rows / 2);
    EXPECT_TRUE(at::equal(chunks->at(1).at("scale"), inputs.at("scale"))); // no batch dim: whole
    TensorMap merged = mergeMicrobatches(*chunks);
    EXPECT_TRUE(at::equal(merged.at("x"), inputs.at("x")));
    EXPECT_TRUE(at::equal(merged.at("ids"), inputs.at("ids")));
  }
  EXPECT_EQ(splitMicrobatches({{"x", at::zeros({10, 2})}}, 4)->size(), 4u); // 3 + 3 + 3 + 1 rows
  EXPECT_FALSE(splitMicrobatches({{"x", at::zeros({3, 2})}}, 4));
  EXPECT_FALSE(splitMicrobatches({{"x", at::zeros({4, 2})}, {"y", at::zeros({5})}}, 2));
}

} // namespace
} // namespace cleave::runtime
