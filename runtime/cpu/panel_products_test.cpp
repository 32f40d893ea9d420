// Unit tests of cleave's own AVX2 product (panel_products.h) against ATen's: every tile height
// (1-6 rows and remainders), panel edges (N not a multiple of 16), K blocks with remainders, bias,
// weights stored either way, the work split into parts, and the activations computed in registers.
#include "runtime/cpu/panel_products.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace cleave::runtime::cpu {
namespace {

TEST(PanelProducts, PackedProductsEqualAtenAtEveryEdge) {
  if (!panels::runsHere())
    GTEST_SKIP() << "this CPU lacks AVX2 and FMA, or has AVX-512 (oneDNN's kernels run products there)";
  at::manual_seed(5);
  for (std::int64_t m : {1, 2, 3, 4, 5, 6, 7, 13, 97, 200})
    for (std::int64_t n : {1, 15, 16, 17, 130})
      for (std::int64_t k : {1, 5, 384, 801}) {
        const at::Tensor x = at::randn({m, k}), kn = at::randn({k, n}), bias = at::randn({n});
        for (bool transposed : {false, true}) { // the weight stored as [K, N] rows or as [N, K] rows
          const at::Tensor stored = transposed ? kn.t().contiguous().t() : kn;
          std::vector<float> packed(static_cast<std::size_t>(panels::packedFloats(k, n)));
          panels::pack(stored.data_ptr<float>(), stored.stride(0), stored.stride(1), k, n, packed.data());
          at::Tensor back = at::empty({k, n});
          panels::unpack(packed.data(), k, n, back.data_ptr<float>());
          ASSERT_TRUE(at::equal(back, kn));
          for (bool withBias : {false, true}) {
            at::Tensor out = at::full({m, n}, std::numeric_limits<float>::quiet_NaN());
            const panels::Product product{x.data_ptr<float>(), m, k, n, k, packed.data(),
                                          withBias ? bias.data_ptr<float>() : nullptr, out.data_ptr<float>()};
            const int parts = 1 + static_cast<int>((m + n) % 3); // 1 to 3 parts, split by panels or rows
            for (int part = 0; part < parts; ++part)
              panels::multiply(product, part, parts);
            SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k) +
                         (transposed ? " [N, K]" : " [K, N]") + (withBias ? " bias" : "") + " parts " +
                         std::to_string(parts));
            const at::Tensor want = withBias ? at::addmm(bias, x, kn) : at::mm(x, kn);
            // Every element written (the NaNs gone), each as ATen computes it.
            EXPECT_TRUE(at::allclose(out, want, 1e-4, 1e-4 * std::sqrt(static_cast<double>(k))));
          }
        }
      }
}

// ReLU and both GELUs in the kernel against ATen's over a range that crosses every branch of the
// polynomials (erf's sign, exp's saturation), with the last panel partial and K in two blocks.
TEST(PanelProducts, ActivationsEqualAtens) {
  if (!panels::runsHere())
    GTEST_SKIP() << "this CPU lacks AVX2 and FMA, or has AVX-512 (oneDNN's kernels run products there)";
  at::manual_seed(9);
  const std::int64_t m = 13, k = 500, n = 37;
  const at::Tensor x = at::randn({m, k}), kn = at::randn({k, n}) * 0.2, bias = at::linspace(-12, 12, n);
  std::vector<float> packed(static_cast<std::size_t>(panels::packedFloats(k, n)));
  panels::pack(kn.data_ptr<float>(), kn.stride(0), kn.stride(1), k, n, packed.data());
  const at::Tensor linear = at::addmm(bias, x, kn);
  const std::pair<panels::Activation, at::Tensor> cases[] = {{panels::Activation::Relu, at::relu(linear)},
                                                             {panels::Activation::Gelu, at::gelu(linear)},
                                                             {panels::Activation::GeluTanh, at::gelu(linear, "tanh")}};
  for (const auto& [activation, want] : cases) {
    at::Tensor out = at::empty({m, n});
    panels::Product product{x.data_ptr<float>(), m, k, n, k, packed.data(), bias.data_ptr<float>(),
                            out.data_ptr<float>(), activation};
    panels::multiply(product, 0, 1);
    SCOPED_TRACE(static_cast<int>(activation));
    EXPECT_TRUE(at::allclose(out, want, 1e-5, 1e-4));
  }
}

TEST(PanelProducts, SmallProductsStayInOnePart) {
  const panels::Product tiny{nullptr, 1, 64, 64, 64, nullptr, nullptr, nullptr};
  EXPECT_EQ(panels::partsFor(tiny, 8), 1);
  const panels::Product large{nullptr, 197, 768, 3072, 768, nullptr, nullptr, nullptr};
  EXPECT_EQ(panels::partsFor(large, 2), 8); // four a thread, taken in turn
  EXPECT_EQ(panels::partsFor(large, 1), 1);
  EXPECT_EQ(panels::partsFor(large, 0), 1);
}

} // namespace
} // namespace cleave::runtime::cpu
