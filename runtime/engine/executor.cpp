#include "runtime/engine/executor.h"

#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <stdexcept>
#include <utility>

#include "io/onnx.h"
#include "runtime/engine/fusion.h"
#include "runtime/engine/parameter_readers.h"
#include "runtime/engine/forward_replay.h"
#include "runtime/engine/running_statistics.h"
#include "runtime/engine/torch_compat.h"
#include "base/strings.h"

namespace cleave::runtime {
using ir::NodeId;

Executor::~Executor() = default;

std::int64_t defaultOpset(const ir::Graph& graph) {
  for (const auto& [domain, version] : graph.modelInfo().opsetImports)
    if (domain.empty() || domain == "ai.onnx")
      return version;
  return 0;
}

Expected<std::unique_ptr<Executor>> Executor::create(std::shared_ptr<const ir::Graph> graph,
                                                     const ExecutorOptions& options) {
  configureThreads();
  std::unique_ptr<Executor> executor(new Executor());
  const ir::Graph& g = *graph;
  if (g.modelInfo().format == ir::SourceFormat::Fx)
    return Error(ErrorCode::Unsupported) << "the runtime executes ONNX graphs; FX graphs carry torch targets, not ops";
  executor->graph_ = std::move(graph);
  executor->options_ = options;
  if (options.trainable) {
    executor->options_.optimizations = Optimizations{.fusion = false, .blockedLayout = false};
    executor->updatedStatistics_ = updatedRunningStatistics(g);
  }
  executor->opset_ = defaultOpset(g);
  executor->kernels_ = IdVector<NodeId, KernelEntry>(g.numNodes());
  executor->parameters_ = IdVector<NodeId, at::Tensor>(g.numNodes());
  executor->caches_ = IdVector<NodeId, KernelCache>(g.numNodes());
  executor->fusion_ = planFusions(g, executor->options_.optimizations.fusedAttention);
  const DeviceWing* wing = wingServing(options.device);
  if (wing)
    wing->configure(executor->options_);
  if (wing)
    executor->weightPlan_ = wing->planWeights(g, executor->fusion_, executor->options_);
  if (!options.trainable && !options.floatType && options.optimizations.precision != Precision::Fp32)
    executor->halfWeights_ = productWeightsOnly(g, executor->fusion_);
  CLEAVE_CHECK(executor->resolveKernels());
  if (options.separateHostMemory || !options.device.is_cpu()) {
    executor->placement_ = placeValues(g, executor->kernels_);
    executor->invariantCopies_.resize(g.numValues());
    executor->invariantSources_.resize(g.numValues());
  }
  CLEAVE_CHECK(executor->loadParameters());
  executor->uses_.assign(g.numValues(), 0);
  for (std::uint32_t n = 0; n < g.numNodes(); ++n)
    for (ir::ValueId value : g.inputs(NodeId{n}))
      if (value != ir::kNoValue)
        ++executor->uses_[index(value)];
  if (executor->options_.optimizations.rememberShapeArithmetic)
    executor->memo_ = SmallOpMemo(g);
  executor->shareWeightCaches();
  executor->privateLayoutReaders_.assign(g.numValues(), PrivateLayoutReaders::No);
  for (std::uint32_t v = 0; v < g.numValues(); ++v) {
    auto users = g.users(ir::ValueId{v});
    bool takers = !users.empty(), output = false;
    for (NodeId user : users) {
      output = output || g.kind(user) == ir::NodeKind::Output;
      takers = takers && (g.kind(user) == ir::NodeKind::Output ||
                          (g.kind(user) == ir::NodeKind::Op && executor->readerLayouts(user) == Layouts::DenseOrPrivate));
    }
    if (wing && wing->keepsPrivateLayout(executor->options_))
      executor->privateLayoutReaders_[v] = !takers ? PrivateLayoutReaders::No : output ? PrivateLayoutReaders::IfOutputsMay : PrivateLayoutReaders::Yes;
  }
  return executor;
}

Status Executor::resolveKernels() {
  const ir::Graph& g = *graph_;
  const KernelTable& table = kernelTable();
  for (std::uint32_t n = 0; n < g.numNodes(); ++n) {
    NodeId node{n};
    if (g.kind(node) == ir::NodeKind::Op) {
      const KernelEntry* kernel = table.find(g.opDomain(node), g.opType(node));
      if (!kernel)
        return Error(ErrorCode::Unsupported) << "no kernel for op " << g.target(node) << " (node '" << g.name(node)
                                             << "', opset " << opset_ << ")";
      kernels_[node] = *kernel;
    } else if (g.kind(node) == ir::NodeKind::ModuleCall || g.kind(node) == ir::NodeKind::MethodCall) {
      return Error(ErrorCode::Unsupported) << "node '" << g.name(node) << "' is a module or method call";
    }
  }
  return {};
}

// Each Parameter node's tensor, on the side the placement gives it (the device without one). An
// alias of a parameter another side loaded first lives where that one does.
Status Executor::loadParameters() {
  const ir::Graph& g = *graph_;
  for (std::uint32_t n = 0; n < g.numNodes(); ++n) {
    NodeId node{n};
    if (g.kind(node) != ir::NodeKind::Parameter)
      continue;
    const Side planned = placement_ ? placement_->nodeSide[node] : Side::Device;
    CLEAVE_TRY(parameters_[node], parameterTensor(g.parameters(node)[0], planned));
    if (placement_) {
      const Side loaded = storageSide_[index(g.storageOf(g.parameters(node)[0]))];
      placement_->nodeSide[node] = loaded;
      placement_->valueSide[index(g.outputs(node)[0])] = loaded;
    }
  }
  if (g.modelFile()) // the parameters are copied out: the model file's pages need not stay resident
    g.modelFile()->releaseResidentPages();
  return {};
}

// The layouts op node `reader` takes its operands in when runs fuse: its fused group's kernel's
// (a value read by a convolution group reaches the group's kernel), else its own kernel's. An
// unfused (observed) run's kernel takes at most these: runOp makes operands dense for a kernel
// that does not take private layouts, so a value kept in one for a reader costs a conversion there
// and nothing else.
Layouts Executor::readerLayouts(NodeId reader) const {
  const std::int32_t group = options_.optimizations.fusion ? fusion_.groupOf[reader] : -1;
  return group >= 0 ? fusedKernel(fusion_.groups[static_cast<std::size_t>(group)].kind).layouts
                    : kernels_[reader].layouts;
}

// Products (MatMul, fused MatMul+Add) and fused convolutions reading one stored weight share one
// kernel cache, so the device wing's reordered copy of it is made once, not once per node: an
// exporter's deduplicated layers (a BERT encoder's twelve identical layers read one set of weights
// through aliases) would otherwise hold a copy per layer. Shared only among nodes of one kind,
// whose products have the same form (linear() rebuilds a cache whose row count or bias presence
// differs); a convolution cache keeps an entry per input shape (a detector's head runs one weight
// over every pyramid level). The weight plan then readies each op node's own cache once, told
// which stored weight it reads (its packed copy, where the wing holds one). O(nodes log nodes).
void Executor::shareWeightCaches() {
  const ir::Graph& g = *graph_;
  cacheSlot_ = IdVector<NodeId, NodeId>(g.numNodes());
  std::vector<std::optional<ir::ParamId>> weightOwner(g.numNodes());
  std::map<std::pair<std::string_view, ir::ParamId>, NodeId> firstReader;
  for (std::uint32_t n = 0; n < g.numNodes(); ++n) {
    NodeId node{n};
    cacheSlot_[node] = node;
    if (g.kind(node) != ir::NodeKind::Op)
      continue;
    std::string_view kind;
    ir::ValueId weight = ir::kNoValue;
    const std::int32_t group = fusion_.groupOf[node];
    if (group >= 0 && fusion_.groups[group].nodes.back() == node && fusion_.groups[group].operands.size() > 1) {
      kind = fusedName(fusion_.groups[group].kind);
      weight = fusion_.groups[group].operands[1];
    } else if (g.opDomain(node).empty() && ((g.opType(node) == "MatMul" && g.inputs(node).size() == 2) ||
                                            (g.opType(node) == "Gemm" && g.inputs(node).size() >= 2))) {
      // Gemms share a cache only with Gemms that read the weight the same way round.
      const ir::Attribute* transB = g.findAttribute(node, "transB");
      kind = g.opType(node) == "MatMul" ? "MatMul" : transB && transB->intValue ? "Gemm B^T" : "Gemm";
      weight = g.inputs(node)[1];
    }
    if (weight == ir::kNoValue || g.kind(g.producer(weight)) != ir::NodeKind::Parameter)
      continue;
    ir::ParamId owner = g.storageOf(g.parameters(g.producer(weight))[0]);
    cacheSlot_[node] = firstReader.try_emplace({kind, owner}, node).first->second;
    weightOwner[index(cacheSlot_[node])] = owner;
  }
  if (!weightPlan_)
    return;
  for (std::uint32_t n = 0; n < g.numNodes(); ++n)
    if (g.kind(NodeId{n}) == ir::NodeKind::Op && cacheSlot_[NodeId{n}] == NodeId{n})
      weightPlan_->prepareCache(caches_[NodeId{n}], weightOwner[n]);
}

// A parameter's tensor on the device, loaded once per storage: aliases (ONNX's Identity of an
// initializer, an exporter's deduplicated copies) share their owner's tensor; with `trainable`,
// trained tensors are autograd leaves. The device wing's weight plan says how it is loaded and
// adopts it (it may hold it alone, or bind a stand-in).
Expected<at::Tensor> Executor::parameterTensor(ir::ParamId param, Side side) {
  const ir::Graph& g = *graph_;
  ir::ParamId owner = g.storageOf(param);
  if (storageTensors_.empty()) {
    storageTensors_.resize(g.numParameters());
    storageLoaded_.assign(g.numParameters(), false);
    storageSide_.assign(g.numParameters(), Side::Device);
  }
  if (storageLoaded_[index(owner)])
    return storageTensors_[index(owner)];
  const bool asRows = weightPlan_ && weightPlan_->loadsAsRows(owner);
  const bool ownMemory = weightPlan_ && weightPlan_->loadsIntoOwnMemory(owner);
  CLEAVE_TRY(at::Tensor tensor, loadParameter(g, owner, asRows, ownMemory));
  // Copied out: its bytes need not stay resident (else the peak holds the model file as well as
  // the tensors while the rest load).
  const ir::ParameterData& data = g.parameter(owner).data;
  if (g.modelFile() && data.source == ir::ParameterData::Source::ModelFile)
    g.modelFile()->releaseResidentPages(data.offset, data.length);
  if (options_.floatType && at::isFloatingType(tensor.scalar_type()))
    tensor = tensor.to(*options_.floatType);
  // Mixed precision: a weight only products read is held in the half type autocast would cast it
  // to in every run (once here instead; its layout kept).
  if (!halfWeights_.empty() && halfWeights_[index(owner)])
    tensor = tensor.to(*autocastTypeOf(options_.optimizations.precision));
  tensor = tensor.to(deviceOf(side));
  storageSide_[index(owner)] = side;
  if (options_.trainable && at::isFloatingType(tensor.scalar_type()) && !g.parameter(owner).isBuffer())
    tensor.requires_grad_(true);
  if (weightPlan_)
    tensor = weightPlan_->adopt(owner, std::move(tensor));
  storageTensors_[index(owner)] = tensor;
  storageLoaded_[index(owner)] = true;
  return tensor;
}

std::size_t Executor::packedWeightCount() const { return weightPlan_ ? weightPlan_->heldAloneCount() : 0; }

std::size_t Executor::reorderedOnlyWeightCount() const { return weightPlan_ ? weightPlan_->reorderedOnlyCount() : 0; }

std::vector<std::pair<std::string, at::Tensor>> Executor::trainableParameters() const {
  std::vector<std::pair<std::string, at::Tensor>> trained;
  for (std::uint32_t p = 0; p < storageTensors_.size(); ++p)
    if (storageTensors_[p].defined() && storageTensors_[p].requires_grad())
      trained.emplace_back(graph_->parameter(ir::ParamId{p}).name, storageTensors_[p]);
  return trained;
}

std::vector<std::pair<std::string, at::Tensor>> Executor::updatedStatistics() const {
  std::vector<std::pair<std::string, at::Tensor>> statistics;
  for (ir::ParamId owner : updatedStatistics_)
    if (storageLoaded_[index(owner)])
      statistics.emplace_back(graph_->parameter(owner).name, storageTensors_[index(owner)]);
  return statistics;
}

bool Executor::updatesStatisticInPlace(ir::ValueId value, const at::Tensor& operand) const {
  if (updatedStatistics_.empty() || replayingForward())
    return false;
  const ir::Graph& g = *graph_;
  const NodeId producer = g.producer(value);
  if (g.kind(producer) != ir::NodeKind::Parameter)
    return false;
  const ir::ParamId owner = g.storageOf(g.parameters(producer)[0]);
  return std::binary_search(updatedStatistics_.begin(), updatedStatistics_.end(), owner) &&
         storageTensors_[index(owner)].is_same(operand);
}

Executor& Executor::subgraph(NodeId node, std::string_view attribute) {
  auto key = std::make_pair(index(node), std::string(attribute));
  auto found = subgraphs_.find(key);
  if (found != subgraphs_.end())
    return *found->second;
  const ir::Graph& g = *graph_;
  const ir::Attribute* attr = g.findAttribute(node, attribute);
  if (!attr || attr->kind != ir::AttrKind::Graph)
    throw KernelError("attribute '" + std::string(attribute) + "' is not a graph");
  std::vector<std::string> outer;
  auto inputs = g.inputs(node);
  for (std::size_t i = inputs.size() - g.numImplicitInputs(node); i < inputs.size(); ++i)
    outer.emplace_back(g.valueName(inputs[i]));
  std::vector<std::pair<std::string, std::int64_t>> opsets = g.modelInfo().opsetImports;
  Expected<ir::Graph> body = io::readOnnxSubgraph(attr->text, outer, opsets,
                                                  std::string(g.name(node)) + "." + std::string(attribute));
  if (!body)
    throw KernelError(body.error().message());
  Expected<std::unique_ptr<Executor>> executor =
      create(std::make_shared<const ir::Graph>(std::move(*body)), options_);
  if (!executor)
    throw KernelError(executor.error().message());
  return *(subgraphs_[key] = std::move(*executor));
}

bool KernelContext::mayUpdateStatistic(std::size_t i) const {
  return owner_ && has(i) && owner_->updatesStatisticInPlace(graph_.inputs(node_)[i], inputs_[i]);
}

RunStats* KernelContext::runStats() const { return owner_ ? owner_->runningStats_ : nullptr; }

Executor& KernelContext::subgraph(std::string_view attribute) const {
  if (!owner_)
    throw KernelError("no executor to build the subgraph '" + std::string(attribute) + "'");
  return owner_->subgraph(node_, attribute);
}

struct Executor::RunState {
  RunStats* stats = nullptr;
  const Observer* observe = nullptr;
  OutputLayout outputLayout = OutputLayout::Dense;
  bool fuse = false; // an observer sees every value, so observed runs do not fuse
  std::vector<at::Tensor> values;
  std::vector<std::uint32_t> remaining;
  std::vector<at::Tensor> crossed; // host and device apart: values' copies on the other side, made on first need
  std::int64_t live = 0, peak = 0;

  bool mayStayPrivate(PrivateLayoutReaders readers) const {
    return readers == PrivateLayoutReaders::Yes ||
           (readers == PrivateLayoutReaders::IfOutputsMay && outputLayout == OutputLayout::AsComputed);
  }
  void observed(ir::ValueId value, const at::Tensor& tensor) const {
    if (observe)
      (*observe)(value, denseFromPrivateLayout(tensor));
  }
};

namespace {
std::int64_t bytesOf(const at::Tensor& tensor) {
  return tensor.defined() ? static_cast<std::int64_t>(tensor.numel() * tensor.element_size()) : 0;
}

// "VALUE (made by NODE) to the host": a copy named by what it moves and which way.
std::string crossingName(const ir::Graph& g, ir::ValueId value, Side to) {
  return std::string(g.valueName(value)) + " (made by " + std::string(g.name(g.producer(value))) + ") to the " +
         (to == Side::Host ? "host" : "device");
}

// `source` copied to `target`, the `to` side, and counted (on the CPU both sides are the CPU:
// tests and aten-cpu-as-gpu place values all the same). Inside a recording (device_wing.h,
// RecordingScope) no copy is made: it throws, naming the value.
at::Tensor crossTo(const ir::Graph& g, ir::ValueId value, Side to, const at::Tensor& source, const at::Device& target,
                   RunStats* stats) {
  if (insideRecording())
    throw std::runtime_error(crossingName(g, value, to) +
                             " would be copied inside the recording (a step reads on one side a value the other made "
                             "this run)");
  at::Tensor copied = denseFromPrivateLayout(source).to(target);
  if (stats) {
    ++stats->hostDeviceCopies;
    stats->hostDeviceCopyBytes += bytesOf(copied);
    ++stats->copiesByValue[crossingName(g, value, to)];
  }
  return copied;
}
} // namespace

Expected<TensorMap> Executor::run(const TensorMap& inputs, RunStats* stats, const Observer* observe,
                                  OutputLayout outputLayout) {
  const ir::Graph& g = *graph_;
  RunState state{stats, observe, outputLayout, observe == nullptr && options_.optimizations.fusion,
                 std::vector<at::Tensor>(g.numValues()), uses_};
  // Kernels running subgraphs count their copies in `stats` (KernelContext::runStats).
  RunStats* const outerStats = std::exchange(runningStats_, stats);
  struct RestoreStats {
    RunStats*& slot;
    RunStats* previous;
    ~RestoreStats() { slot = previous; }
  } restoreStats{runningStats_, outerStats};
  // Mixed precision: the whole run in one autocast scope (a subgraph's run finds it on already).
  std::optional<AutocastScope> mixedPrecision;
  if (std::optional<at::ScalarType> half = autocastTypeOf(options_.optimizations.precision);
      half && !activeAutocast(options_.device.type()))
    mixedPrecision.emplace(options_.device.type(), *half);
  for (std::uint32_t n = 0; n < g.numNodes(); ++n) {
    NodeId node{n};
    switch (g.kind(node)) {
    case ir::NodeKind::Input: CLEAVE_CHECK(bindInput(node, inputs, state)); break;
    case ir::NodeKind::Parameter: bindParameter(node, state); break;
    case ir::NodeKind::Output: return collectOutputs(node, state);
    default:
      if (const RecomputeSegment* segment = recomputedSegmentAt(node, state)) {
        CLEAVE_CHECK(runRecomputed(*segment, state));
        n = index(segment->last);
      } else {
        CLEAVE_CHECK(runOp(node, state));
      }
      break;
    }
  }
  return Error(ErrorCode::InvalidGraph) << "the graph has no output node";
}

void Executor::setSelectiveRecompute(bool on) {
  if (!on)
    recompute_.reset();
  else if (!recompute_)
    recompute_ = planSelectiveRecompute(*graph_);
}

const RecomputeSegment* Executor::recomputedSegmentAt(NodeId node, const RunState& state) const {
  if (!recompute_ || state.observe || !c10::GradMode::is_enabled() || recompute_->startsAt[node] < 0)
    return nullptr;
  return &recompute_->segments[static_cast<std::size_t>(recompute_->startsAt[node])];
}

// The segment's outputs carrying one replaying node (recompute.h), then the run's bookkeeping
// as if its nodes had run here: their reads end, their outputs are live. A segment no gradient
// flows through (its inputs record no graph) just runs.
Status Executor::runRecomputed(const RecomputeSegment& segment, RunState& state) {
  std::vector<at::Tensor> inputs;
  bool recordsGraph = false;
  for (ir::ValueId value : segment.inputs) {
    inputs.push_back(state.values[index(value)]);
    recordsGraph = recordsGraph || (inputs.back().defined() && inputs.back().requires_grad());
  }
  if (!recordsGraph) {
    for (std::uint32_t n = index(segment.first); n <= index(segment.last); ++n)
      CLEAVE_CHECK(runOp(NodeId{n}, state));
    return {};
  }
  // The forward's run draws on from where the generator is and updates running statistics; every
  // replay in the backward draws what it drew (a Dropout in the segment drops the same elements)
  // and updates nothing (forward_replay.h).
  auto runs = std::make_shared<int>(0);
  CLEAVE_TRY(std::vector<at::Tensor> outputs,
             runRecomputable(inputs, [this, &segment, runs, drawsFrom = generatorStates()](
                                         const std::vector<at::Tensor>& leaves) {
               if ((*runs)++ == 0)
                 return replaySegment(segment, leaves);
               ForwardReplay replay(drawsFrom);
               return replaySegment(segment, leaves);
             }, options_.device));
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    state.values[index(segment.outputs[k])] = std::move(outputs[k]);
    state.live += bytesOf(state.values[index(segment.outputs[k])]);
  }
  state.peak = std::max(state.peak, state.live);
  for (std::uint32_t n = index(segment.first); n <= index(segment.last); ++n)
    releaseDeadValues(std::array<NodeId, 1>{NodeId{n}}, NodeId{n}, state);
  return {};
}

Expected<std::vector<at::Tensor>> Executor::replaySegment(const RecomputeSegment& segment,
                                                          const std::vector<at::Tensor>& inputs) {
  RunState replay{nullptr, nullptr, OutputLayout::Dense, false, std::vector<at::Tensor>(graph_->numValues()), uses_};
  for (std::size_t k = 0; k < inputs.size(); ++k)
    replay.values[index(segment.inputs[k])] = inputs[k];
  for (std::uint32_t n = index(segment.first); n <= index(segment.last); ++n)
    CLEAVE_CHECK(runOp(NodeId{n}, replay));
  std::vector<at::Tensor> outputs;
  for (ir::ValueId value : segment.outputs)
    outputs.push_back(replay.values[index(value)]);
  return outputs;
}

Status Executor::bindInput(NodeId node, const TensorMap& inputs, RunState& state) const {
  const ir::Graph& g = *graph_;
  ir::ValueId value = g.outputs(node)[0];
  auto found = inputs.find(std::string(g.valueName(value)));
  if (found == inputs.end())
    return Error(ErrorCode::InvalidArgument) << "no value for input '" << g.valueName(value) << "'";
  // An input in a private layout (another submodel's output) stays so only for readers taking it.
  const bool keepPrivate = state.mayStayPrivate(privateLayoutReaders_[index(value)]);
  at::Tensor& bound = state.values[index(value)];
  if (!found->second.defined()) { // an empty optional
    if (g.valueKind(value) != ir::ValueKind::Sequence)
      return Error(ErrorCode::InvalidArgument) << "input '" << g.valueName(value) << "' has no value";
    return {};
  }
  if (isStringTensor(found->second)) { // strings stay on the CPU, as they are
    if (!options_.device.is_cpu())
      return Error(ErrorCode::Unsupported) << "input '" << g.valueName(value) << "' holds strings, which run on the CPU only";
    bound = found->second;
    state.observed(value, bound);
    return {};
  }
  bound = keepPrivate && inPrivateLayout(found->second) ? found->second : denseFromPrivateLayout(found->second).to(options_.device);
  if (options_.floatType && at::isFloatingType(found->second.scalar_type()))
    bound = bound.to(*options_.floatType);
  state.observed(value, bound);
  return {};
}

void Executor::bindParameter(NodeId node, RunState& state) const {
  ir::ValueId value = graph_->outputs(node)[0];
  state.values[index(value)] = parameters_[node];
  if (!state.observe)
    return;
  const ir::ParamId owner = graph_->storageOf(graph_->parameters(node)[0]);
  if (!parameters_[node].defined() && weightPlan_) {
    // Held by the wing alone: an observer sees (and this run's unfused products read) a dense copy.
    state.values[index(value)] = weightPlan_->observable(owner, parameters_[node]);
  } else if (parameters_[node].is_meta() && weightPlan_) {
    // A stand-in: the observer sees the plain weight; the wing's kernels read the stand-in.
    state.observed(value, weightPlan_->observable(owner, parameters_[node]));
    return;
  }
  state.observed(value, state.values[index(value)]);
}

TensorMap Executor::collectOutputs(NodeId node, RunState& state) const {
  const ir::Graph& g = *graph_;
  TensorMap outputs;
  for (ir::ValueId value : g.inputs(node)) {
    outputs[std::string(g.valueName(value))] = inDeclaredFloatType(value, state.values[index(value)]);
  }
  if (state.stats) // several executors (a cut model's submodels) report their largest
    state.stats->peakActivationBytes = std::max(state.stats->peakActivationBytes, state.peak);
  return outputs;
}

// A graph output computed in a lower float type than declared (floatType's, or a half type under
// mixed precision) cast back to the declared type: float32 where the model declares none.
at::Tensor Executor::inDeclaredFloatType(ir::ValueId value, at::Tensor tensor) const {
  if (options_.floatsAsDeclared() || !tensor.defined() || isStringTensor(tensor) ||
      !at::isReducedFloatingType(tensor.scalar_type()))
    return tensor;
  Expected<at::ScalarType> declared = scalarTypeOf(graph_->dtype(value));
  const at::ScalarType wanted = declared && at::isFloatingType(*declared) ? *declared : at::kFloat;
  return wanted == tensor.scalar_type() ? tensor : tensor.to(wanted);
}

// A fused group (fusion.h) runs at its last node, on the group's operands, for all its nodes.
Status Executor::runOp(NodeId node, RunState& state) {
  const ir::Graph& g = *graph_;
  const FusedGroup* group =
      state.fuse && fusion_.groupOf[node] >= 0 ? &fusion_.groups[fusion_.groupOf[node]] : nullptr;
  if (group && node != group->nodes.back())
    return {};
  const NodeId single[] = {node};
  std::span<const NodeId> members = group ? std::span<const NodeId>(group->nodes) : std::span<const NodeId>(single);
  std::span<const ir::ValueId> operandValues = group ? std::span<const ir::ValueId>(group->operands) : g.inputs(node);
  KernelEntry kernel = group ? fusedKernel(group->kind) : kernels_[node];
  std::vector<at::Tensor> operands;
  operands.reserve(operandValues.size());
  std::int64_t handedOverBytes = 0;
  const Side side = placement_ ? placement_->nodeSide[node] : Side::Device;
  for (std::size_t k = 0; k < operandValues.size(); ++k) {
    const ir::ValueId value = operandValues[k];
    const ReadSide read = placement_ ? operandReadSide(side, kernel, k) : ReadSide::Either;
    if (value == ir::kNoValue) {
      operands.emplace_back();
    } else if (placement_ && crosses(placement_->valueSide[index(value)], read)) {
      operands.push_back(crossedOperand(value, read, state));
    } else if (handsOver(value, members, operandValues, state)) {
      handedOverBytes += bytesOf(state.values[index(value)]);
      operands.push_back(std::move(state.values[index(value)]));
    } else {
      operands.push_back(state.values[index(value)]);
    }
    if (kernel.layouts == Layouts::Dense) // no-op: values stay private only for readers taking them
      operands.back() = denseFromPrivateLayout(operands.back());
  }
  const bool outputMayStayPrivate =
      !g.outputs(node).empty() && state.mayStayPrivate(privateLayoutReaders_[index(g.outputs(node)[0])]);
  CLEAVE_TRY(std::vector<at::Tensor> results,
             computeOrRecall(node, group, kernel, std::move(operands), outputMayStayPrivate, state.stats));
  CLEAVE_CHECK(storeResults(node, std::move(results), state));
  state.live -= handedOverBytes; // after storeResults counted the peak with them still live
  releaseDeadValues(members, node, state);
  return {};
}

// A constant's copy is kept for later runs (a Constant node makes the same value each run), as is
// a parameter's while it is the same tensor and not trained (a trained one changes in place); any
// other value's lives until its last reader ran.
at::Tensor Executor::crossedOperand(ir::ValueId value, ReadSide read, RunState& state) {
  const ir::Graph& g = *graph_;
  const at::Tensor& source = state.values[index(value)];
  if (!holdsNumbers(source))
    return source;
  const at::Device target = deviceOf(read == ReadSide::Host ? Side::Host : Side::Device);
  const NodeId producer = g.producer(value);
  const bool constant = g.kind(producer) == ir::NodeKind::Op && g.inputs(producer).empty() && g.opType(producer) == "Constant";
  const bool parameter = g.kind(producer) == ir::NodeKind::Parameter && !source.requires_grad();
  if (constant || parameter) {
    at::Tensor& copy = invariantCopies_[index(value)];
    at::Tensor& from = invariantSources_[index(value)];
    if (!copy.defined() || (parameter && !from.is_same(source))) {
      copy = crossTo(g, value, read == ReadSide::Host ? Side::Host : Side::Device, source, target, state.stats);
      from = source;
    }
    return copy;
  }
  if (state.crossed.empty())
    state.crossed.resize(g.numValues());
  at::Tensor& copy = state.crossed[index(value)];
  if (copy.defined())
    return copy;
  if (const at::Tensor* kept = memo_.recallCopy(value, source)) {
    copy = *kept;
    return copy;
  }
  copy = crossTo(g, value, read == ReadSide::Host ? Side::Host : Side::Device, source, target, state.stats);
  memo_.rememberCopy(value, source, copy);
  return copy;
}

// Whether `value` goes to the kernel rather than a copy of its handle: this node (or group) is its
// last reader, it is read once here, and an op made it (a graph input is the caller's tensor, a
// parameter lives on). Then the kernel holds the only handle (KernelContext::mayOverwrite).
bool Executor::handsOver(ir::ValueId value, std::span<const NodeId> members, std::span<const ir::ValueId> operands,
                         const RunState& state) const {
  const ir::Graph& g = *graph_;
  if (g.kind(g.producer(value)) != ir::NodeKind::Op || std::count(operands.begin(), operands.end(), value) != 1)
    return false;
  std::uint32_t readsHere = 0;
  for (NodeId member : members)
    readsHere += static_cast<std::uint32_t>(std::count(g.inputs(member).begin(), g.inputs(member).end(), value));
  return state.remaining[index(value)] == readsHere;
}

// The kernel's results, or those it gave for equal operands on the last run (small_op_memo.h).
Expected<std::vector<at::Tensor>> Executor::computeOrRecall(NodeId node, const FusedGroup* group,
                                                            const KernelEntry& kernel, std::vector<at::Tensor> operands,
                                                            bool outputMayStayPrivate, RunStats* stats) {
  if (group || !memo_.applies(node, operands))
    return callKernel(node, group, kernel, std::move(operands), outputMayStayPrivate, stats);
  if (const std::vector<at::Tensor>* remembered = memo_.recall(node, operands))
    return *remembered;
  std::vector<at::Tensor> kept = operands; // handles, for remember()
  CLEAVE_TRY(std::vector<at::Tensor> results, callKernel(node, group, kernel, std::move(operands), false, stats));
  memo_.remember(node, kept, results);
  return results;
}

// Any exception a kernel throws becomes one line naming the node, its op and the opset.
Expected<std::vector<at::Tensor>> Executor::callKernel(NodeId node, const FusedGroup* group, const KernelEntry& kernel,
                                                       std::vector<at::Tensor> operands, bool outputMayStayPrivate,
                                                       RunStats* stats) {
  const ir::Graph& g = *graph_;
  auto opName = [&] { return group ? std::string(fusedName(group->kind)) : g.target(node); };
  auto fail = [&](std::string_view what) {
    std::string_view text = firstLine(what);
    return Error(ErrorCode::Unsupported) << "node '" << g.name(node) << "' (" << opName() << ", opset " << opset_
                                         << "): " << text;
  };
  // A fused group's kernel reads its first node's attributes (a Conv's window, fusion.h).
  const at::Device device = placement_ ? deviceOf(placement_->nodeSide[node]) : options_.device;
  KernelContext context(g, group ? group->nodes.front() : node, opset_, std::move(operands), this,
                        &caches_[cacheSlot_[node]], outputMayStayPrivate, device, group);
  try {
    if (!stats || !stats->profileOps)
      return kernel.kernel(context);
    auto start = std::chrono::steady_clock::now();
    std::vector<at::Tensor> results = kernel.kernel(context);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    stats->secondsByOp[opName()] += seconds;
    stats->secondsByNode[std::string(g.name(node))] += seconds;
    return results;
  } catch (const KernelError& e) {
    return fail(e.what());
  } catch (const c10::Error& e) {
    return fail(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

Status Executor::storeResults(NodeId node, std::vector<at::Tensor> results, RunState& state) const {
  const ir::Graph& g = *graph_;
  auto outputs = g.outputs(node);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (i >= results.size() || !results[i].defined()) {
      // Undefined is an empty optional where the output is a sequence or optional value.
      bool emptyOptional = i < results.size() && g.valueKind(outputs[i]) == ir::ValueKind::Sequence;
      if (!g.users(outputs[i]).empty() && !emptyOptional)
        return Error(ErrorCode::Unsupported) << "node '" << g.name(node) << "' (" << g.target(node) << ", opset "
                                             << opset_ << "): output " << i
                                             << " is used but the kernel does not produce it";
      continue;
    }
    if (inPrivateLayout(results[i]) && !state.mayStayPrivate(privateLayoutReaders_[index(outputs[i])]))
      results[i] = denseFromPrivateLayout(results[i]);
    // A kernel that made its result from numbers alone may have made it elsewhere: moved to the
    // side the placement gives the node, so that every reader finds it where it was planned.
    if (placement_ && holdsNumbers(results[i]) &&
        results[i].device() != deviceOf(placement_->nodeSide[node])) {
      results[i] = crossTo(g, outputs[i], placement_->nodeSide[node], results[i],
                           deviceOf(placement_->nodeSide[node]), state.stats);
    }
    at::Tensor& stored = state.values[index(outputs[i])];
    stored = std::move(results[i]);
    state.live += bytesOf(stored);
    state.observed(outputs[i], stored);
  }
  state.peak = std::max(state.peak, state.live);
  return {};
}

// Frees the operands whose last reader this was (parameters stay; graph outputs are read by the
// output node, so they stay until the end), then `producer`'s outputs nobody reads. A group's
// members all read now; its inner values were never made.
void Executor::releaseDeadValues(std::span<const NodeId> readers, NodeId producer, RunState& state) const {
  const ir::Graph& g = *graph_;
  for (NodeId reader : readers)
    for (ir::ValueId value : g.inputs(reader)) {
      if (value == ir::kNoValue || --state.remaining[index(value)] > 0)
        continue;
      ir::NodeKind producerKind = g.kind(g.producer(value));
      if (producerKind == ir::NodeKind::Parameter)
        continue;
      if (producerKind == ir::NodeKind::Op)
        state.live -= bytesOf(state.values[index(value)]);
      state.values[index(value)] = at::Tensor();
      if (!state.crossed.empty())
        state.crossed[index(value)] = at::Tensor();
    }
  for (ir::ValueId value : g.outputs(producer))
    if (state.remaining[index(value)] == 0 && state.values[index(value)].defined()) {
      state.live -= bytesOf(state.values[index(value)]);
      state.values[index(value)] = at::Tensor();
    }
}

} // namespace cleave::runtime
