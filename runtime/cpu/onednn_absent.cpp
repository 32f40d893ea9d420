// runtime/cpu/onednn_absent.cpp - onednn.h in a build without oneDNN: nothing is available, and
// every call answers "not here" (an undefined tensor), so callers run ATen.
#include "runtime/cpu/onednn.h"

namespace cleave::runtime::onednn {

bool available() { return false; }

struct PackedProduct {};
struct PackedWeight {};

at::Tensor linear(const at::Tensor&, const at::Tensor&, bool, const at::Tensor&, ProductActivation,
                  std::shared_ptr<PackedProduct>&) {
  return {};
}

std::shared_ptr<PackedWeight> packWeight(const at::Tensor&) { return nullptr; }
at::Tensor unpackWeight(const PackedWeight&) { return {}; }
std::array<std::int64_t, 2> packedWeightDims(const PackedWeight&) { return {0, 0}; }
at::Tensor linearPacked(const at::Tensor&, const std::shared_ptr<const PackedWeight>&, const at::Tensor&,
                        ProductActivation, std::shared_ptr<PackedProduct>&) {
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

} // namespace cleave::runtime::onednn
