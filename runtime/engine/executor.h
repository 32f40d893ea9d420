// runtime/engine/executor.h - runs an ONNX graph of cleave's IR on ATen.
//
// create() resolves a kernel for every op node (an op without one is an error naming the op, the
// node and the opset) and loads the parameters onto the device once. run() walks the nodes in
// their (topological) order; each value is freed as soon as its last user ran, unless it is a
// graph output or a parameter. Outputs come back by name. A value a kernel made in a device wing's
// private layout (the CPU wing's: oneDNN's blocked one) stays so while every reader takes that
// layout (kernel.h, Layouts), and is made dense once otherwise; graph outputs and observed values
// are always dense. Unobserved runs run fused node groups (fusion.h: MatMul+Add bias, GELU) as one
// kernel each. How weights are held is the device wing's (device_wing.h, WeightPlan). On a device
// with its own memory, shape arithmetic runs on the host and values cross only where a reader
// needs them on the other side, once per value and run (value_placement.h). Under mixed precision
// (Optimizations::precision) a run is one torch.autocast scope on the device, and floating graph
// outputs come back in their declared types.
// Complexity: O(V + E) bookkeeping per run besides the kernels.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <optional>
#include <span>

#include "base/expected.h"
#include "ir/graph.h"
#include "runtime/engine/device_wing.h"
#include "runtime/engine/optimizations.h"
#include "runtime/engine/fusion.h"
#include "runtime/engine/kernel.h"
#include "runtime/engine/recompute.h"
#include "runtime/engine/run_stats.h"
#include "runtime/engine/small_op_memo.h"
#include "runtime/engine/tensors.h"
#include "runtime/engine/value_placement.h"

namespace cleave::runtime {

struct ExecutorOptions {
  at::Device device = at::kCPU;
  Optimizations optimizations;
  // When set (e.g. bfloat16): floating parameters and inputs are cast to it, and floating outputs
  // cast back to float32: a lower-precision device, for exercising disagreement paths.
  std::optional<at::ScalarType> floatType;
  // Training: floating parameters that are not buffers are autograd leaves (requires_grad), one
  // tensor per storage (an ONNX alias of a parameter is the same tensor); fusion, the blocked
  // layout and oneDNN's direct products are off, so every op records its backward.
  bool trainable = false;
  // Values placed by host and device memory (value_placement.h): always where the device is not
  // the CPU; tests turn it on for the CPU, where each crossing is a no-op counted all the same.
  bool separateHostMemory = false;

  // Whether floats compute in the types the model declares: no floatType and no mixed precision
  // (optimizations.precision), which the wings' float32 layouts and fast paths need.
  bool floatsAsDeclared() const { return !floatType && optimizations.precision == Precision::Fp32; }
};

enum class OutputLayout : std::uint8_t { Dense, AsComputed };

class Executor {
public:
  ~Executor();
  // Fails: Unsupported (an op without a kernel, named with node and opset; a dtype ATen lacks),
  // ParseError/IoError (parameter data).
  static Expected<std::unique_ptr<Executor>> create(std::shared_ptr<const ir::Graph> graph,
                                                    const ExecutorOptions& options = {});

  // Called with every value as it is made (graph inputs, parameters, op outputs), before it may
  // be freed.
  using Observer = std::function<void(ir::ValueId, const at::Tensor&)>;

  // `inputs` by graph-input name (extra names are ignored). Fails: InvalidArgument (a missing
  // input), Unsupported/InvalidArgument (a kernel refused its operands: message names the node).
  // `outputLayout` AsComputed lets graph outputs come back in the wing's private layout, for a
  // caller that feeds them to another executor on the same device (a cut model, between submodels).
  Expected<TensorMap> run(const TensorMap& inputs, RunStats* stats = nullptr, const Observer* observe = nullptr,
                          OutputLayout outputLayout = OutputLayout::Dense);

  const ir::Graph& graph() const { return *graph_; }
  // Where values live, when host and device memory are apart (ExecutorOptions::separateHostMemory).
  const ValuePlacement* placement() const { return placement_ ? &*placement_ : nullptr; }
  const IdVector<ir::NodeId, KernelEntry>& kernels() const { return kernels_; }
  at::Device device() const { return options_.device; }
  // With ExecutorOptions::trainable: each trained tensor once, under its storage owner's name, in
  // parameter order; the optimizer updates them in place and later runs read the new values.
  std::vector<std::pair<std::string, at::Tensor>> trainableParameters() const;
  // With ExecutorOptions::trainable: whether later runs that record autograd's graph hold only the
  // inputs of the segments planSelectiveRecompute finds and run them again in the backward
  // (recompute.h; cleave train --recompute selective). The executor must outlive those graphs.
  void setSelectiveRecompute(bool on);
  // With ExecutorOptions::trainable: the running statistics its training forwards update in place
  // (running_statistics.h), under their names, in parameter order.
  std::vector<std::pair<std::string, at::Tensor>> updatedStatistics() const;
  std::int64_t opset() const { return opset_; }
  // How many parameters (by storage) it holds only packed (the CPU wing's kPackedWeights).
  std::size_t packedWeightCount() const;
  // How many convolution weights (by storage) it holds only reordered now: their plain tensor let
  // go after the first run made a copy that converts back (the CPU wing's kPackedWeights).
  std::size_t reorderedOnlyWeightCount() const;

private:
  friend class KernelContext; // builds subgraph executors through subgraph()
  Executor() = default;
  Executor& subgraph(ir::NodeId node, std::string_view attribute);
  // Whether a kernel may update `operand`, the value `value`, in place as a running statistic
  // (KernelContext::mayUpdateStatistic).
  bool updatesStatisticInPlace(ir::ValueId value, const at::Tensor& operand) const;
  Status resolveKernels();
  Status loadParameters();
  Expected<at::Tensor> parameterTensor(ir::ParamId param, Side side);
  at::Device deviceOf(Side side) const { return side == Side::Host ? at::Device(at::kCPU) : options_.device; }

  // One run's values in flight: by value id, the uses still to come, live and peak bytes.
  struct RunState;
  // The steps of run(), one node kind each.
  Status bindInput(ir::NodeId node, const TensorMap& inputs, RunState& state) const;
  void bindParameter(ir::NodeId node, RunState& state) const;
  TensorMap collectOutputs(ir::NodeId node, RunState& state) const;
  at::Tensor inDeclaredFloatType(ir::ValueId value, at::Tensor tensor) const;
  Status runOp(ir::NodeId node, RunState& state);
  // Selective recomputation: the segment starting at `node` in a run recording autograd's graph
  // (null: none, or off); running it so that its outputs carry one replaying node; one run of
  // its nodes on their own value table (the forward's and the backward's).
  const RecomputeSegment* recomputedSegmentAt(ir::NodeId node, const RunState& state) const;
  Status runRecomputed(const RecomputeSegment& segment, RunState& state);
  Expected<std::vector<at::Tensor>> replaySegment(const RecomputeSegment& segment,
                                                  const std::vector<at::Tensor>& inputs);
  void shareWeightCaches();
  Layouts readerLayouts(ir::NodeId reader) const;
  Expected<std::vector<at::Tensor>> computeOrRecall(ir::NodeId node, const FusedGroup* group, const KernelEntry& kernel,
                                                    std::vector<at::Tensor> operands, bool outputMayStayPrivate,
                                                    RunStats* stats);
  Expected<std::vector<at::Tensor>> callKernel(ir::NodeId node, const FusedGroup* group, const KernelEntry& kernel,
                                               std::vector<at::Tensor> operands, bool outputMayStayPrivate,
                                               RunStats* stats);
  Status storeResults(ir::NodeId node, std::vector<at::Tensor> results, RunState& state) const;
  // Operand `value` as a reader on `read` takes it: the value itself, or its copy on the other
  // side (made once per run; once per executor for a parameter's or constant's).
  at::Tensor crossedOperand(ir::ValueId value, ReadSide read, RunState& state);
  void releaseDeadValues(std::span<const ir::NodeId> readers, ir::NodeId producer, RunState& state) const;
  bool handsOver(ir::ValueId value, std::span<const ir::NodeId> members, std::span<const ir::ValueId> operands,
                 const RunState& state) const;

  std::shared_ptr<const ir::Graph> graph_;
  ExecutorOptions options_;
  RunStats* runningStats_ = nullptr; // the run in progress's (KernelContext::runStats)
  // Per storage owner: held in mixed precision's half type (productWeightsOnly); empty otherwise.
  std::vector<bool> halfWeights_;
  std::int64_t opset_ = 0;
  IdVector<ir::NodeId, KernelEntry> kernels_;
  IdVector<ir::NodeId, at::Tensor> parameters_; // Parameter nodes' tensors
  // Per storage-owning parameter, once loaded: the tensor its Parameter nodes bind (undefined
  // where the device wing alone holds it: its readers' caches do), and whether it was loaded.
  std::vector<at::Tensor> storageTensors_;
  std::vector<bool> storageLoaded_;
  std::vector<Side> storageSide_;
  std::vector<ir::ParamId> updatedStatistics_; // trainable: updatedRunningStatistics(), else none
  // Host and device memory apart: each node's and value's side; per value made by a parameter or
  // constant, its copy on the other side and the tensor it was copied from.
  std::optional<ValuePlacement> placement_;
  std::vector<at::Tensor> invariantCopies_, invariantSources_;
  // The device wing's say over how weights are held (device_wing.h); null where no wing serves
  // the device (every weight then held as loaded).
  std::unique_ptr<WeightPlan> weightPlan_;
  IdVector<ir::NodeId, KernelCache> caches_;    // per op node: what its kernel keeps (packed weights)
  IdVector<ir::NodeId, ir::NodeId> cacheSlot_;  // per node: whose cache it uses (shareWeightCaches)
  std::vector<std::uint32_t> uses_;              // per value: operand uses (+1 for graph outputs)
  FusionPlan fusion_;                            // node groups run as one kernel (unobserved runs)
  SmallOpMemo memo_;                             // shape arithmetic's results from the last run
  // Per value: whether it may stay in a private layout (kernel.h, Layouts): every reader is a kernel
  // taking it, or the graph's output (then only when the run's outputs may stay so). All No where
  // the wing keeps no private layout (DeviceWing::keepsPrivateLayout: off the CPU, in another float
  // type, or with Optimizations::blockedLayout off).
  enum class PrivateLayoutReaders : std::uint8_t { No, Yes, IfOutputsMay };
  std::vector<PrivateLayoutReaders> privateLayoutReaders_;
  std::map<std::pair<std::uint32_t, std::string>, std::unique_ptr<Executor>> subgraphs_;
  std::optional<RecomputePlan> recompute_; // set: selective recomputation on
};

// The opset of the default domain a graph imports (0 when none).
std::int64_t defaultOpset(const ir::Graph& graph);

} // namespace cleave::runtime
