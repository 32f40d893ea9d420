#include "runtime/cuda/cuda_wing.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include "runtime/engine/device_wing.h"
#include "runtime/engine/executor.h"

namespace cleave::runtime::cuda {
namespace {

// Every weight as the executor loaded it: on the device, dense, in its own layout.
class AsLoadedWeightPlan final : public WeightPlan {
public:
  bool loadsAsRows(ir::ParamId) const override { return false; }
  bool loadsIntoOwnMemory(ir::ParamId) const override { return false; }
  at::Tensor adopt(ir::ParamId, at::Tensor loaded) override { return loaded; }
  at::Tensor observable(ir::ParamId, const at::Tensor& bound) const override { return bound; }
  void prepareCache(KernelCache&, std::optional<ir::ParamId>) override {}
  std::size_t heldAloneCount() const override { return 0; }
  std::size_t reorderedOnlyCount() const override { return 0; }
};

c10::DeviceIndex indexOf(const at::Device& device) {
  return device.has_index() ? device.index() : c10::cuda::current_device();
}

class CudaWing final : public DeviceWing {
public:
  std::string_view name() const override { return "cuda"; }
  bool serves(const at::Device& device) const override { return device.is_cuda(); }
  std::unique_ptr<WeightPlan> planWeights(const ir::Graph&, const FusionPlan&, const ExecutorOptions&) const override {
    return std::make_unique<AsLoadedWeightPlan>();
  }
  bool keepsPrivateLayout(const ExecutorOptions&) const override { return false; }
  bool holdsPrivateLayout(const at::Tensor&) const override { return false; }
  at::Tensor dense(const at::Tensor& t) const override { return t; }

  void configure(const ExecutorOptions& options) const override {
    at::Context& context = at::globalContext();
    context.setAllowTF32CuBLAS(options.optimizations.tf32);
    context.setAllowTF32CuDNN(options.optimizations.tf32);
    context.setBenchmarkCuDNN(true);
  }
  std::int64_t peakAllocatedBytes(const at::Device& device) const override {
    // Entry 0 is StatType::AGGREGATE, both pools together (the enum moved namespace in 2.x).
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(indexOf(device));
    return stats.allocated_bytes[0].peak;
  }
  void resetPeakAllocatedBytes(const at::Device& device) const override {
    c10::cuda::CUDACachingAllocator::resetPeakStats(indexOf(device));
  }
  void synchronize(const at::Device& device) const override { c10::cuda::device_synchronize(); }
};

const CudaWing theCudaWing;
const bool installed = installWing(theCudaWing);

} // namespace

bool wingInstalled() { return installed; }

} // namespace cleave::runtime::cuda
