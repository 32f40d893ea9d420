// runtime/engine/kernel.h - the interface between the executor and the ATen implementation of each
// ONNX op. A kernel reads its operands and attributes from a KernelContext and returns its
// outputs; it throws KernelError (or lets ATen throw) on input it cannot handle, and the executor
// turns either into an error naming the op, the node and the opset.
// Complexity: kernels are resolved once per node at Executor::create (one hash lookup each);
// operand and attribute access is O(1) or a short scan of the node's attributes.
#pragma once

#include <ATen/ATen.h>

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/onnx_functions.h"
#include "ir/graph.h"
#include "runtime/engine/device_wing.h"
#include "runtime/engine/tensors.h"

namespace cleave::runtime {

class Executor;
struct RunStats;

// What a kernel keeps between runs of its node: a derived form of an operand (a prepacked
// weight) and the operand it was derived from, to know when it still applies; and what the device
// wing keeps for it (the CPU wing: a product's reordered weight with its oneDNN primitive).
struct KernelCache {
  at::Tensor source, derived;
  // Set by the executor's weight plan (device_wing.h); read only by the wing's kernels.
  std::shared_ptr<DeviceKernelState> deviceState;
  // A convolution's weight and bias with the BatchNormalization after it folded in (a fused
  // Conv+BatchNormalization), and the tensors they were computed from: weight, bias (or none),
  // then the normalization's scale, shift, mean and variance. For a BatchNormalization alone
  // (batchNormInference): its per-channel multiplier and shift, from its four parameters.
  std::vector<at::Tensor> foldedFrom;
  at::Tensor foldedWeight, foldedBias;
};

struct KernelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct FusedGroup;

class KernelContext {
public:
  // `owner` builds subgraph executors (Loop/If bodies); null where there are none to build.
  // `device`: where the node runs (value_placement.h), on which tensors it makes from nothing go.
  KernelContext(const ir::Graph& graph, ir::NodeId node, std::int64_t opset, std::vector<at::Tensor> inputs,
                Executor* owner = nullptr, KernelCache* cache = nullptr, bool outputMayStayPrivate = false,
                at::Device device = at::kCPU, const FusedGroup* group = nullptr)
      : graph_(graph), node_(node), opset_(opset), inputs_(std::move(inputs)), owner_(owner), cache_(cache),
        outputMayStayPrivate_(outputMayStayPrivate), device_(device), group_(group) {}

  std::int64_t opset() const { return opset_; }
  // The device the node runs on: a kernel that makes a tensor from numbers alone (Range,
  // ConstantOfShape) makes it here.
  at::Device device() const { return device_; }
  const ir::Graph& graph() const { return graph_; }
  ir::NodeId node() const { return node_; }
  std::size_t numOutputs() const { return graph_.outputs(node_).size(); }
  // Explicit operands (implicit, outer-scope operands of subgraph ops come after them).
  std::size_t numInputs() const { return inputs_.size() - graph_.numImplicitInputs(node_); }
  bool has(std::size_t i) const { return i < numInputs() && inputs_[i].defined(); }
  const at::Tensor& input(std::size_t i) const; // throws KernelError when absent
  const std::vector<at::Tensor>& allInputs() const { return inputs_; }
  bool outputUsed(std::size_t i) const;
  // Whether the kernel may write its result into operand i's buffer: the executor handed the
  // operand over (this node is its value's last reader, and it is an op's result, not a graph
  // input or a parameter) and no other tensor or view shares its buffer. The way a convolution
  // accumulates onto its residual in place, as ONNX Runtime's planner reuses a dying buffer.
  bool mayOverwrite(std::size_t i) const;
  // Whether the kernel updates operand i in place as a running statistic (running_statistics.h):
  // the executor trains, this forward is not a replay (forward_replay.h), and the operand is the
  // statistic's own tensor.
  bool mayUpdateStatistic(std::size_t i) const;

  const ir::Attribute* attribute(std::string_view name) const { return graph_.findAttribute(node_, name); }
  std::int64_t intAttr(std::string_view name, std::int64_t fallback) const;
  float floatAttr(std::string_view name, float fallback) const;
  std::string stringAttr(std::string_view name, std::string fallback) const;
  std::vector<std::int64_t> intsAttr(std::string_view name, std::vector<std::int64_t> fallback = {}) const;
  std::vector<float> floatsAttr(std::string_view name) const;
  at::Tensor tensorAttr(std::string_view name) const; // undefined when absent

  // Whether the node's (a fused group's) first output may be returned in a private layout: every
  // reader takes such operands (Layouts::DenseOrPrivate), so none pays a conversion for it.
  bool outputMayStayPrivate() const { return outputMayStayPrivate_; }
  // The fused group this kernel runs (fusion.h: what its plan decided, as Attention's steps), or
  // null for a node run alone.
  const FusedGroup* group() const { return group_; }
  // A tensor slot that lives as long as the executor, one per node (a prepacked weight); null
  // when the executor keeps none.
  KernelCache* cache() const { return cache_; }

  // Integer values of a small operand tensor (shapes, axes, pads).
  std::vector<std::int64_t> ints(std::size_t i) const;
  // The executor for a subgraph attribute ("body", "then_branch"), built once per node.
  Executor& subgraph(std::string_view attribute) const;
  // The statistics the owning executor's run in progress gathers (null: none), for a subgraph's
  // copies between host and device to count in them.
  RunStats* runStats() const;

private:
  const ir::Graph& graph_;
  ir::NodeId node_;
  std::int64_t opset_;
  std::vector<at::Tensor> inputs_;
  Executor* owner_;
  KernelCache* cache_;
  bool outputMayStayPrivate_;
  at::Device device_;
  const FusedGroup* group_;
};

using Kernel = std::vector<at::Tensor> (*)(KernelContext&);

// The layouts a kernel takes its operands in. Private: a layout only some kernels read, kept from
// one such kernel to the next to save two conversions per op: the private layout of the wing
// serving the device (device_wing.h; the CPU wing's is oneDNN's blocked one, or ATen's in a build
// without libdnnl, which its convolutions and max pooling read). The executor gives such operands
// only to kernels that take them and makes them dense for every other reader
// (denseFromPrivateLayout).
enum class Layouts : std::uint8_t { Dense, DenseOrPrivate };

// Where a kernel reads its operands, as ONNX Runtime's kernels declare memory types: an operand
// whose bit is set in `host` is read into C++ numbers (a Reshape's shape, a Slice's bounds, a
// Loop's trip count), so the executor hands it over on the host; one in `sizesOnly` is read for
// its sizes alone (Shape, Size), wherever it lives; every other operand on the executor's device.
// The executor places values by them (value_placement.h). Operands past 31 are device operands.
struct OperandMemory {
  std::uint32_t host = 0, sizesOnly = 0;
};
constexpr std::uint32_t operandBits(std::initializer_list<unsigned> operands) {
  std::uint32_t bits = 0;
  for (unsigned k : operands)
    bits |= std::uint32_t{1} << k;
  return bits;
}
constexpr OperandMemory hostOperands(std::initializer_list<unsigned> operands) { return {operandBits(operands), 0}; }

struct KernelEntry {
  Kernel kernel = nullptr;
  Layouts layouts = Layouts::Dense;
  OperandMemory memory;
  bool readsOnHost(std::size_t operand) const { return operand < 32 && (memory.host >> operand & 1u); }
  bool readsSizesOnly(std::size_t operand) const { return operand < 32 && (memory.sizesOnly >> operand & 1u); }
};

// Op type (in the default ONNX domain unless spelled "domain::Op") -> kernel.
class KernelTable {
public:
  void add(std::string opType, Kernel kernel, Layouts layouts = Layouts::Dense, OperandMemory memory = {});
  void add(std::string opType, Kernel kernel, OperandMemory memory) { add(std::move(opType), kernel, Layouts::Dense, memory); }
  const KernelEntry* find(std::string_view domain, std::string_view opType) const; // null when none
  std::vector<std::string> names() const; // sorted

private:
  std::vector<std::pair<std::string, KernelEntry>> entries_; // sorted by name after building
  friend const KernelTable& kernelTable();
};

const KernelTable& kernelTable();

// The op targets of `graph` (ONNX op nodes, subgraph bodies not included) that have no kernel,
// sorted and unique. O(nodes * log kernels).
std::vector<std::string> missingKernels(const ir::Graph& graph);

// What the runtime asks a reader to expand into function bodies (io/onnx_functions.h): the ops
// that have no kernel. A kernel, where one is written, runs the op whole.
io::ExpandFunctionFilter opsWithoutKernels();

// Every kernel family's registration (runtime/kernels/families.cpp): the engine's table is built
// from it once.
void registerKernelFamilies(KernelTable& table);

// The runtime's thread count: the hardware's, unless OMP_NUM_THREADS says otherwise (some
// libtorch builds start with one thread). Idempotent.
void configureThreads();

// ONNX sequences are held as ATen nested tensors (elements of one dtype and rank, shapes free); an
// empty optional is an undefined tensor. makeSequence throws KernelError on elements of different
// ranks; sequenceElements on a value that is not a sequence.
bool isSequence(const at::Tensor& t);
// A defined tensor of numbers or bools: neither a sequence nor strings, so that it can move to a
// device (the values host and device memory exchange).
bool holdsNumbers(const at::Tensor& t);
std::vector<at::Tensor> sequenceElements(const at::Tensor& sequence);
at::Tensor makeSequence(const std::vector<at::Tensor>& elements, at::ScalarType type);

} // namespace cleave::runtime
