// runtime/engine/device_wing.h - the hooks by which a device wing takes part in execution, so that
// the engine (executor, kernel context, fusion, values) never names a device library. The model is
// ONNX Runtime's execution provider, cut to what cleave's engine asks of one:
//   - PrePack: a WeightPlan decides, before an executor loads its parameters, how each weight is
//     held (stored transposed, packed in the wing's own layout, or held only reordered) and what
//     every node's kernel cache starts with;
//   - a preferred layout: a wing may keep values in a private layout (oneDNN's blocked one) while
//     every reader takes it; the engine asks the wing whether a tensor is in it and for its dense
//     form at a boundary (graph outputs, observers, a module boundary, a send to another rank);
//   - per-node state: a kernel cache carries a DeviceKernelState that only its wing reads;
//   - the device's process-wide numerics, set before an executor is made (the CUDA wing: TF32,
//     cuDNN's autotuning), and its allocator's peak, for --profile;
//   - recording: a wing may record the device work of one call and replay it (CUDA graphs), so
//     that a run of static shapes costs one launch instead of one per kernel;
//   - fast paths: the products, convolutions, pooling and softmax a wing computes in its own way
//     for the shared kernels (fast_paths.h), ONNX Runtime's per-provider kernels one level down;
//   - backend names: the names (`--backend aten-cuda:1`) a wing answers to, the device each one
//     means, and whether that device is usable in this process: the registry backends come from
//     (runtime/model/backend.h), so that the model layer names no device.
// Wings install themselves once, before main (a static registration in the wing's own source);
// adding one (CUDA) touches no engine file. The CPU wing is runtime/cpu/cpu_wing.h.
// Complexity: every lookup scans the installed wings (at most a handful); no hook allocates.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/expected.h"
#include "ir/graph.h"

namespace cleave::runtime {

struct ExecutorOptions;
class FastPaths;
struct FusionPlan;
struct KernelCache;

// What a backend name means to the wing that answers to it.
struct BackendDevice {
  at::Device device = at::kCPU;
  std::optional<at::ScalarType> floatType; // computes in this float type (aten-cpu-bf16); none: as the model says
  // Host and device memory kept apart on a device that shares them (aten-cpu-as-gpu): values are
  // placed and copies counted as on a GPU (ExecutorOptions::separateHostMemory).
  bool separateHostMemory = false;
};

// What a wing keeps in a node's kernel cache (reordered weights, primitives); only it reads it.
struct DeviceKernelState {
  virtual ~DeviceKernelState() = default;
};

// How one executor holds its weights, decided once per executor before any parameter loads.
// Parameters are named by their storage owner (ir::Graph::storageOf).
class WeightPlan {
public:
  virtual ~WeightPlan() = default;
  // Whether the loader stores the parameter as the rows of its transpose (a [K, N] weight held as
  // [N, K] rows, read through a transposed view): same values, other strides.
  virtual bool loadsAsRows(ir::ParamId owner) const = 0;
  // Whether the loader gives it memory of its own (the wing may release it later).
  virtual bool loadsIntoOwnMemory(ir::ParamId owner) const = 0;
  // The loaded tensor handed to the wing: what the executor binds for it from now on. `loaded`
  // itself; a stand-in the wing's kernels recognize; or undefined when the wing alone holds it
  // (its readers' caches get it in prepareCache).
  virtual at::Tensor adopt(ir::ParamId owner, at::Tensor loaded) = 0;
  // The dense tensor an observer sees for a parameter bound as `bound` (which adopt returned).
  virtual at::Tensor observable(ir::ParamId owner, const at::Tensor& bound) const = 0;
  // Readies one kernel cache (each shared cache once): `weightOwner` is the stored weight the
  // node's product or convolution reads through it, or none.
  virtual void prepareCache(KernelCache& cache, std::optional<ir::ParamId> weightOwner) = 0;
  // How many parameters the wing alone holds (adopt returned undefined).
  virtual std::size_t heldAloneCount() const = 0;
  // How many weights it now holds only in reordered copies, their plain tensor let go.
  virtual std::size_t reorderedOnlyCount() const = 0;
};

// The device work one call queued, recorded: replay() queues it again on the same memory (the
// buffers the call read and wrote), so callers write new inputs into the buffers it read and find
// the results in those it wrote. Destroying it releases the memory the recording holds.
class DeviceRecording {
public:
  virtual ~DeviceRecording() = default;
  virtual void replay() = 0;
};

class DeviceWing {
public:
  virtual ~DeviceWing() = default;
  virtual std::string_view name() const = 0;
  // Whether this wing runs executors on `device` (the CPU wing: every CPU device).
  virtual bool serves(const at::Device& device) const = 0;
  // The weight plan of an executor of `graph` under `options` (never null for a wing that serves
  // the executor's device; it may hold every weight as loaded).
  virtual std::unique_ptr<WeightPlan> planWeights(const ir::Graph& graph, const FusionPlan& fusion,
                                                  const ExecutorOptions& options) const = 0;
  // Whether an executor under `options` may keep values in this wing's private layout.
  virtual bool keepsPrivateLayout(const ExecutorOptions& options) const = 0;
  // Whether `t` is in this wing's private layout, and its dense form (one conversion, which the
  // wing may remember; callers must not write the result).
  virtual bool holdsPrivateLayout(const at::Tensor& t) const = 0;
  virtual at::Tensor dense(const at::Tensor& t) const = 0;
  // Sets what the device computes with for an executor about to be made under `options`
  // (process-wide settings: the last executor made decides). None by default.
  virtual void configure(const ExecutorOptions& options) const {}
  // The most bytes the device's allocator held since the last reset, or -1 where the wing does
  // not count them (the CPU's are host_memory.h's).
  virtual std::int64_t peakAllocatedBytes(const at::Device& device) const { return -1; }
  virtual void resetPeakAllocatedBytes(const at::Device& device) const {}
  // Waits until every kernel queued on `device` has finished (a CUDA device runs them after the
  // call that queued them returns): what a timing must do before it reads the clock.
  virtual void synchronize(const at::Device& device) const {}
  // Records the device work of `work` on `device`: calls it once to warm up (autotuning, workspaces
  // and first-run caches happen there, outside the recording), then again while recording; the
  // second call's kernels are queued only as the recording, not run. Work done on the host runs
  // at recording time only, so a caller records only work whose host side does not change between
  // calls. Fails: Unsupported where the wing does not record (the default), or where the device
  // refused a step of the second call (a host-device synchronization, as reading a device value
  // on the host), naming it; what `work` fails with.
  virtual Expected<std::unique_ptr<DeviceRecording>> record(const at::Device& device,
                                                            const std::function<Status()>& work) const;
  // Whether record can succeed at all on this wing's devices.
  virtual bool records() const { return false; }
  // The bytes of weight copies the wing holds in its own layouts now (the CPU wing's reordered and
  // packed oneDNN weights), beside the tensors the executors hold: what --profile reports apart.
  virtual std::size_t heldWeightBytes() const { return 0; }
  // The computations this wing offers the shared kernels (fast_paths.h), or null: none (the kernels
  // then compute on ATen alone).
  virtual const FastPaths* fastPaths() const { return nullptr; }
  // The backend names this wing answers to, as usage lists them ("aten-cuda[:N]").
  virtual std::vector<std::string> backendNames() const { return {}; }
  // What backend `name` means on this wing: none when it is not one of its names; InvalidArgument
  // when it is one that names no device of it ("aten-cuda:x").
  virtual std::optional<Expected<BackendDevice>> backendDevice(std::string_view name) const { return std::nullopt; }
  // Whether executors can run on `device` in this process. Fails: Unsupported naming why not (the
  // CUDA wing: no GPU, or no driver).
  virtual Status usable(const at::Device& device) const { return {}; }
  // The base of this wing's indexed backend names (`base`, `base:N`: "aten-cuda"), or empty, and
  // how many such devices this process sees: what the distributed layer maps a rank onto.
  virtual std::string_view indexedBackendBase() const { return {}; }
  virtual int deviceCount() const { return 0; }
};

// Installs a wing (its lifetime is the program's); returns true, for a static registration.
bool installWing(const DeviceWing& wing);
// The wing serving `device`, or null (the executor then holds every weight as loaded).
const DeviceWing* wingServing(const at::Device& device);
// Whether any wing holds `t` in its private layout; and `t` made dense by that wing (else `t`,
// undefined included): what a kernel that reads only dense operands calls.
bool inPrivateLayout(const at::Tensor& t);
at::Tensor denseFromPrivateLayout(const at::Tensor& t);
// The peak allocated bytes of `device` by the wing serving it (-1: none counts them), and its reset.
std::int64_t devicePeakAllocatedBytes(const at::Device& device);
void resetDevicePeakAllocatedBytes(const at::Device& device);
void synchronizeDevice(const at::Device& device);
// DeviceWing::heldWeightBytes summed over the installed wings.
std::size_t wingHeldWeightBytes();
// What backend `name` means on the installed wing that answers to it; none when none does.
std::optional<Expected<BackendDevice>> backendDeviceNamed(std::string_view name);
// Every installed wing's backend names, in installation order.
std::vector<std::string> installedBackendNames();
// DeviceWing::usable by the wing serving `device` (Unsupported where none serves it).
Status deviceUsable(const at::Device& device);
// The device a wing's indexed backend name means, as every wing names its devices: `base` alone
// is device 0, `base:N` device N (decimal, below 256); none for any other name. O(length).
std::optional<int> deviceIndexInName(std::string_view name, std::string_view base);
// Whether `name` is of `base`'s family (`base`, or `base:` and anything), so that a name
// deviceIndexInName refuses is a bad index, not another backend.
bool inNameFamily(std::string_view name, std::string_view base);
// The devices behind an indexed backend name's base ("aten-cuda"): how many this process sees, by
// the wing whose base it is; none when no installed wing has that base.
std::optional<int> devicesNamedBy(std::string_view base);
// InvalidArgument for a name of `base`'s family that names no device ("aten-cuda:x").
Error deviceIndexError(std::string_view name, std::string_view base);

// While one lives, this thread is making the recorded call of DeviceWing::record: an executor
// then refuses to copy a value between host and device memory (it throws, naming the value and
// its producer), since a recording cannot hold the copy. A CUDA graph would refuse it too, in
// words that name no node; aten-cpu-as-gpu checks the same rule on the CPU.
class RecordingScope {
public:
  RecordingScope();
  RecordingScope(const RecordingScope&) = delete;
  RecordingScope& operator=(const RecordingScope&) = delete;
  ~RecordingScope();

private:
  bool previous_;
};
bool insideRecording();
// `work` called as a recorded call, inside a RecordingScope: Unsupported ("the device refused to
// record a run: ...") where it failed or threw, with its message.
Status callWhileRecording(const std::function<Status()>& work);

// DeviceWing::record by the wing serving `device` (Unsupported where none serves it).
Expected<std::unique_ptr<DeviceRecording>> recordDeviceWork(const at::Device& device,
                                                            const std::function<Status()>& work);

} // namespace cleave::runtime
