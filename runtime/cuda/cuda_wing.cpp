#include "runtime/cuda/cuda_wing.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "runtime/cuda/cuda_switches.h"
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

// A captured CUDA graph; replays on the device's current stream.
class CudaGraphRecording final : public DeviceRecording {
public:
  void replay() override { graph.replay(); }
  at::cuda::CUDAGraph graph;
};

// The second call of `work` captured into `recording.graph` on the current (side) stream. A step
// the capture refuses fails the call (the executor names a crossing value itself) and invalidates
// the capture; ending it then throws too, and leaves the device's last error set, which is cleared
// so that the next kernel launch does not report it.
Status capture(CudaGraphRecording& recording, const std::function<Status()>& work) {
  recording.graph.capture_begin();
  Status status = callWhileRecording(work);
  std::string endFailure;
  try {
    recording.graph.capture_end();
  } catch (const c10::Error& e) {
    if (status)
      endFailure = e.what_without_backtrace();
  }
  if (!status || !endFailure.empty())
    (void)cudaGetLastError();
  if (!status)
    return status;
  if (!endFailure.empty())
    return Error(ErrorCode::Unsupported) << "the device refused to record a run: "
                                         << endFailure.substr(0, endFailure.find('\n'));
  return {};
}

class CudaWing final : public DeviceWing {
  static constexpr std::string_view kBase = "aten-cuda"; // aten-cuda is device 0, aten-cuda:N device N

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
    context.setAllowTF32CuBLAS(options.optimizations.wing.isOn(kTf32));
    context.setAllowTF32CuDNN(options.optimizations.wing.isOn(kTf32));
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

  std::vector<std::string> backendNames() const override { return {"aten-cuda[:N]"}; }
  std::string_view indexedBackendBase() const override { return kBase; }
  int deviceCount() const override { return static_cast<int>(c10::cuda::device_count()); }
  std::optional<Expected<BackendDevice>> backendDevice(std::string_view name) const override {
    if (!inNameFamily(name, kBase))
      return std::nullopt;
    const std::optional<int> index = deviceIndexInName(name, kBase);
    if (!index)
      return Expected<BackendDevice>(deviceIndexError(name, kBase));
    return Expected<BackendDevice>(BackendDevice{at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(*index)), {}});
  }
  Status usable(const at::Device&) const override {
    if (!at::hasCUDA())
      return Error(ErrorCode::Unsupported) << "no CUDA device is usable here (no GPU, or no NVIDIA driver)";
    return {};
  }

  const FastPaths* fastPaths() const override { return cudaFastPaths(); }
  bool records() const override { return true; }
  Expected<std::unique_ptr<DeviceRecording>> record(const at::Device& device,
                                                    const std::function<Status()>& work) const override {
    const c10::DeviceIndex index = indexOf(device);
    c10::cuda::CUDAGuard deviceGuard(index);
    auto recording = std::make_unique<CudaGraphRecording>();
    c10::cuda::device_synchronize(); // what the caller queued on other streams has landed
    {
      // Warm-up and capture on one side stream: a capture cannot run on the legacy default stream,
      // and cuBLAS keeps a workspace per stream, which the warm-up allocates outside the capture.
      c10::cuda::CUDAStreamGuard streamGuard(c10::cuda::getStreamFromPool(false, index));
      CLEAVE_CHECK(work());
      c10::cuda::getCurrentCUDAStream(index).synchronize();
      CLEAVE_CHECK(capture(*recording, work));
    }
    c10::cuda::device_synchronize();
    return std::unique_ptr<DeviceRecording>(std::move(recording));
  }
};

const CudaWing theCudaWing;
[[maybe_unused]] const bool installed = installWing(theCudaWing); // as the library loads

} // namespace

} // namespace cleave::runtime::cuda
