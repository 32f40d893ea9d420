#include "runtime/cpu/cpu_wing.h"

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <vector>

#include "runtime/cpu/cpu_switches.h"
#include "runtime/engine/executor.h"
#include "runtime/engine/fusion.h"
#include "runtime/engine/parameter_readers.h"
#include "runtime/engine/torch_compat.h"
#include "runtime/model/host_backend.h"

namespace cleave::runtime::cpu {
namespace {
using ir::NodeId;

// A [K, N] float32 parameter (both dims above 1) that only MatMuls read, as their right operand:
// stored as [N, K] rows, the layout onednn::linear computes with, so it reads the weight in place
// instead of keeping a reordered copy beside it (ViT's weights were held twice). Decided before
// the parameters load, so each is written so once (a copy made afterwards would leave the first
// one's freed memory resident).
std::vector<bool> productOnlyWeights(const ir::Graph& g) {
  std::vector<bool> storeAsRows = parametersReadOnlyBy(g, [&](NodeId user, ir::ValueId value) {
    auto operands = g.inputs(user);
    return g.opType(user) == "MatMul" && g.opDomain(user).empty() && operands.size() == 2 && operands[1] == value &&
           operands[0] != value;
  });
  for (std::uint32_t p = 0; p < g.numParameters(); ++p) {
    const ir::Parameter& parameter = g.parameter(ir::ParamId{p});
    storeAsRows[p] = storeAsRows[p] && parameter.dtype == ir::DType::F32 && parameter.dims.size() == 2 &&
                     parameter.dims[0] > 1 && parameter.dims[1] > 1;
  }
  return storeAsRows;
}

// Whether a Gemm computes torch.nn.Linear's form on its weight (operand 1): Y = A B^T + C with
// unit scales, A untransposed and C absent or a 1-D parameter, the only Gemm the kernel runs as
// linear() and so the only one that can read a weight the wing alone holds.
bool gemmIsLinear(const ir::Graph& g, NodeId gemm) {
  auto intAttr = [&](std::string_view name, std::int64_t fallback) {
    const ir::Attribute* a = g.findAttribute(gemm, name);
    return a ? a->intValue : fallback;
  };
  auto floatAttr = [&](std::string_view name) {
    const ir::Attribute* a = g.findAttribute(gemm, name);
    return a ? a->floatValue : 1.0;
  };
  auto operands = g.inputs(gemm);
  if (intAttr("transA", 0) != 0 || intAttr("transB", 0) != 1 || floatAttr("alpha") != 1.0 || floatAttr("beta") != 1.0)
    return false;
  if (operands.size() < 3 || operands[2] == ir::kNoValue)
    return true;
  const NodeId biasProducer = g.producer(operands[2]);
  return g.kind(biasProducer) == ir::NodeKind::Parameter &&
         g.parameter(g.parameters(biasProducer)[0]).dims.size() == 1;
}

// A float32 [N, K] parameter (both dims above 1) that only linear-form Gemms read, as their weight:
// held packed as a product weight is, its [K, N] view packed.
std::vector<bool> linearGemmOnlyWeights(const ir::Graph& g) {
  std::vector<bool> only = parametersReadOnlyBy(g, [&](NodeId user, ir::ValueId value) {
    auto operands = g.inputs(user);
    return g.opType(user) == "Gemm" && g.opDomain(user).empty() && operands.size() >= 2 && operands[1] == value &&
           operands[0] != value && (operands.size() < 3 || operands[2] != value) && gemmIsLinear(g, user);
  });
  for (std::uint32_t p = 0; p < g.numParameters(); ++p) {
    const ir::Parameter& parameter = g.parameter(ir::ParamId{p});
    only[p] = only[p] && parameter.dtype == ir::DType::F32 && parameter.dims.size() == 2 && parameter.dims[0] > 1 &&
              parameter.dims[1] > 1;
  }
  return only;
}

// A float32 parameter that only convolutions read, as their weight, where they run on oneDNN
// (Conv of rank 4 or 5, ConvTranspose of rank 4), and not through a fused normalization (whose
// kernel reads it to fold the normalization in).
std::vector<bool> convolutionOnlyWeights(const ir::Graph& g, const FusionPlan& fusion) {
  std::vector<bool> convolutionOnly = parametersReadOnlyBy(g, [&](NodeId user, ir::ValueId value) {
    auto operands = g.inputs(user);
    const std::string_view op = g.opType(user);
    const std::size_t rank = g.parameter(g.parameters(g.producer(value))[0]).dims.size();
    const bool onOneDnn = (op == "Conv" && (rank == 4 || rank == 5)) || (op == "ConvTranspose" && rank == 4);
    return onOneDnn && g.opDomain(user).empty() && operands.size() >= 2 && operands[1] == value &&
           std::count(operands.begin(), operands.end(), value) == 1 && !foldsNormalizationInto(fusion, user);
  });
  for (std::uint32_t p = 0; p < g.numParameters(); ++p)
    convolutionOnly[p] = convolutionOnly[p] && g.parameter(ir::ParamId{p}).dtype == ir::DType::F32;
  return convolutionOnly;
}

class CpuWeightPlan final : public WeightPlan {
public:
  CpuWeightPlan(const ir::Graph& g, const FusionPlan& fusion, const ExecutorOptions& options)
      : packedWeights_(options.optimizations.wing.isOn(kPackedWeights)),
        winograd_(options.optimizations.wing.isOn(kWinograd)),
        blockedConvolutions_(options.optimizations.wing.isOn(kBlockedConvolutions)), packed_(g.numParameters()) {
    // oneDNN holds weights in its own layouts for inference on the CPU in float32 only. Under mixed
    // precision a product's weight is only stored as rows: ATen's half-type products read [N, K]
    // rows faster than [K, N] columns (bfloat16 on AVX2: 0.66 against 1.11 ms at 128x64x192).
    const bool mixedPrecision = !options.floatType && options.optimizations.precision != Precision::Fp32;
    if (!options.trainable && options.device.is_cpu() && mixedPrecision) {
      rows_ = productOnlyWeights(g);
      packs_ = convolutionOnly_ = transposed_ = std::vector<bool>(g.numParameters(), false);
      return;
    }
    if (!onednn::available() || options.trainable || !options.device.is_cpu() || !options.floatsAsDeclared()) {
      rows_.assign(g.numParameters(), false);
      packs_ = convolutionOnly_ = transposed_ = rows_;
      return;
    }
    rows_ = productOnlyWeights(g);
    packs_.assign(g.numParameters(), false);
    transposed_ = linearGemmOnlyWeights(g);
    for (std::uint32_t p = 0; p < g.numParameters(); ++p) {
      const std::vector<std::int64_t>& dims = g.parameter(ir::ParamId{p}).dims;
      // Packed only where the wing's layout for it is blocked (oneDNN's, or its own panels on AVX2);
      // else stored as rows (onednn.h). A Gemm's [N, K] weight is packed as its [K, N] view.
      if (transposed_[p])
        packs_[p] = packedWeights_ && onednn::packsProductWeight(dims[1], dims[0]);
      else
        packs_[p] = rows_[p] && packedWeights_ && onednn::packsProductWeight(dims[0], dims[1]);
      transposed_[p] = transposed_[p] && packs_[p];
      rows_[p] = rows_[p] && !packs_[p];
    }
    convolutionOnly_ = packedWeights_ ? convolutionOnlyWeights(g, fusion)
                                                    : std::vector<bool>(g.numParameters(), false);
  }

  bool loadsAsRows(ir::ParamId owner) const override { return rows_[index(owner)]; }
  // A weight held only reordered later has memory of its own, unmapped when it goes.
  bool loadsIntoOwnMemory(ir::ParamId owner) const override { return convolutionOnly_[index(owner)]; }

  at::Tensor adopt(ir::ParamId owner, at::Tensor loaded) override {
    if (packs_[index(owner)]) { // the packed copy is the only one (the loaded tensor is freed here)
      packed_[index(owner)] = onednn::packWeight(transposed_[index(owner)] ? loaded.t() : loaded);
      if (packed_[index(owner)])
        return at::Tensor();
    }
    if (convolutionOnly_[index(owner)]) // its stand-in; the tensor lives on in the pool until a copy converts back
      if (at::Tensor standIn = onednn::holdOnlyReordered(*pool_, loaded); standIn.defined())
        return standIn;
    return loaded;
  }

  at::Tensor observable(ir::ParamId owner, const at::Tensor& bound) const override {
    if (!bound.defined() && packed_[index(owner)]) {
      at::Tensor kn = onednn::unpackWeight(*packed_[index(owner)]);
      return transposed_[index(owner)] ? kn.t().contiguous() : kn;
    }
    if (bound.defined() && bound.is_meta())
      return onednn::plainWeight(*pool_, bound);
    return bound;
  }

  void prepareCache(KernelCache& cache, std::optional<ir::ParamId> weightOwner) override {
    auto state = std::make_shared<CpuKernelState>();
    state->convolutions.weights = pool_;
    state->convolutions.allowWinograd = winograd_;
    state->convolutions.allowBlockedDirect = blockedConvolutions_;
    if (weightOwner)
      state->packedWeight = packed_[index(*weightOwner)];
    cache.deviceState = std::move(state);
  }

  std::size_t heldAloneCount() const override {
    return static_cast<std::size_t>(
        std::count_if(packed_.begin(), packed_.end(), [](const auto& packed) { return packed != nullptr; }));
  }
  std::size_t reorderedOnlyCount() const override { return onednn::releasedPlainWeights(*pool_); }

private:
  bool packedWeights_, winograd_, blockedConvolutions_; // cpu_switches.h
  std::vector<bool> rows_, packs_, convolutionOnly_; // per storage owner
  std::vector<bool> transposed_; // packed from a linear-form Gemm's [N, K] weight (its [K, N] view)
  std::vector<std::shared_ptr<const onednn::PackedWeight>> packed_;
  // Every convolution's reordered weights (prepareCache), and the weights held only so.
  std::shared_ptr<onednn::ReorderedWeights> pool_ = std::make_shared<onednn::ReorderedWeights>();
};

// What the CPU "records": the call itself, kept and made again on each replay. Its recording is
// a check, not a speed-up: aten-cpu-as-gpu (host and device memory apart) records as a GPU would,
// so a step a CUDA graph would refuse is found without one (callWhileRecording).
class RerunRecording final : public DeviceRecording {
public:
  explicit RerunRecording(std::function<Status()> work) : work_(std::move(work)) {}
  void replay() override {
    if (Status status = work_(); !status) // it ran as recorded once: a failure now is the caller's bug
      throw std::runtime_error("a replay on the CPU failed: " + status.error().message());
  }

private:
  std::function<Status()> work_;
};

class CpuWing final : public DeviceWing {
public:
  std::string_view name() const override { return "cpu"; }
  bool serves(const at::Device& device) const override { return device.is_cpu(); }
  std::unique_ptr<WeightPlan> planWeights(const ir::Graph& graph, const FusionPlan& fusion,
                                          const ExecutorOptions& options) const override {
    return std::make_unique<CpuWeightPlan>(graph, fusion, options);
  }
  // Blocked values are oneDNN's CPU float32 layouts: none in another float type.
  bool keepsPrivateLayout(const ExecutorOptions& options) const override {
    return options.optimizations.blockedLayout && options.device.is_cpu() && options.floatsAsDeclared();
  }
  bool holdsPrivateLayout(const at::Tensor& t) const override { return t.is_mkldnn() || onednn::isBlockedActivation(t); }
  at::Tensor dense(const at::Tensor& t) const override {
    return t.is_mkldnn() ? t.to_dense() : onednn::denseFromBlocked(t);
  }
  std::size_t heldWeightBytes() const override { return onednn::heldWeightBytes(); }
  const FastPaths* fastPaths() const override {
    if (activeAutocast(at::kCPU)) // mixed precision: oneDNN's paths here compute in float32 only
      return nullptr;
    const FastPaths* own = oneDnnFastPaths();
    return own ? own : atenBlockedFastPaths();
  }
  // A warm-up call (first-run copies of constants and parameters), then the recorded call under
  // the recording's rule; replays run it again.
  bool records() const override { return true; }
  Expected<std::unique_ptr<DeviceRecording>> record(const at::Device&,
                                                    const std::function<Status()>& work) const override {
    CLEAVE_CHECK(work());
    CLEAVE_CHECK(callWhileRecording(work));
    return std::unique_ptr<DeviceRecording>(new RerunRecording(work));
  }
  std::vector<std::string> backendNames() const override { return {kHostBackend, "aten-cpu-bf16", "aten-cpu-as-gpu"}; }
  // aten-cpu-bf16: a low-precision device whose disagreements exercise verify, preview and minimize.
  // aten-cpu-as-gpu: the CPU with host and device memory kept apart, as a GPU keeps them: every
  // copy a GPU run would make between them is made (a no-op) and counted by the value it moves
  // (run --profile), so a model's steady-state crossings are found without a GPU.
  std::optional<Expected<BackendDevice>> backendDevice(std::string_view name) const override {
    if (name == kHostBackend)
      return Expected<BackendDevice>(BackendDevice{at::kCPU, std::nullopt});
    if (name == "aten-cpu-bf16")
      return Expected<BackendDevice>(BackendDevice{at::kCPU, at::kBFloat16});
    if (name == "aten-cpu-as-gpu")
      return Expected<BackendDevice>(BackendDevice{at::kCPU, std::nullopt, true});
    return std::nullopt;
  }
};

const CpuWing theCpuWing;
// Installed before main. This file is linked wherever kernels are: they reach kernelState().
[[maybe_unused]] const bool installed = installWing(theCpuWing);

} // namespace

CpuKernelState* kernelState(const KernelContext& c) {
  return c.cache() ? dynamic_cast<CpuKernelState*>(c.cache()->deviceState.get()) : nullptr;
}

} // namespace cleave::runtime::cpu
