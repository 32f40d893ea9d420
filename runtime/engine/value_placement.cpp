#include "runtime/engine/value_placement.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace cleave::runtime {
using ir::NodeId;
using ir::ValueId;

namespace {

// Ops whose results are no larger than their operands taken together (elementwise, indexing,
// joining, reducing): run on host operands, they stay small. Sorted, for binary search.
constexpr std::array<std::string_view, 39> kShapeArithmetic = {
    "Abs",       "Add",       "And",        "Cast",      "CastLike",  "Ceil",          "Concat",
    "Div",       "Equal",     "Flatten",    "Floor",     "Gather",    "Greater",       "GreaterOrEqual",
    "Identity",  "Less",      "LessOrEqual", "Max",      "Min",       "Mod",           "Mul",
    "Neg",       "Not",       "Or",         "ReduceMax", "ReduceMin", "ReduceProd",    "ReduceSum",
    "Reshape",   "Round",     "Shape",      "Sign",      "Size",      "Slice",         "Sqrt",
    "Squeeze",   "Sub",       "Unsqueeze",  "Where",
};
static_assert(std::is_sorted(kShapeArithmetic.begin(), kShapeArithmetic.end()));

bool isShapeArithmetic(const ir::Graph& g, NodeId node) {
  const std::string_view domain = g.opDomain(node);
  return (domain.empty() || domain == "ai.onnx") &&
         std::binary_search(kShapeArithmetic.begin(), kShapeArithmetic.end(), g.opType(node));
}

bool isIntegerOrBool(ir::DType type) {
  switch (type) {
  case ir::DType::Bool: case ir::DType::I8: case ir::DType::U8: case ir::DType::I16: case ir::DType::U16:
  case ir::DType::I32: case ir::DType::U32: case ir::DType::I64: case ir::DType::U64: return true;
  default: return false;
  }
}

// Elements of a Constant node's value: from the inferred type, else from its attribute; -1 unknown.
std::int64_t constantElements(const ir::Graph& g, NodeId node) {
  const std::int64_t inferred = g.valueType(g.outputs(node)[0]).shape.numElements();
  if (inferred >= 0)
    return inferred;
  if (g.findAttribute(node, "value_int") || g.findAttribute(node, "value_float"))
    return 1;
  if (const ir::Attribute* ints = g.findAttribute(node, "value_ints"))
    return static_cast<std::int64_t>(ints->ints.size());
  return -1;
}

// Run-invariant sources that may live on either side: small Constant nodes, and small integer
// parameters (a float parameter may be trained: it stays with the device's compute).
bool isSmallConstant(const ir::Graph& g, NodeId node) {
  if (g.kind(node) == ir::NodeKind::Parameter) {
    const ir::Parameter& p = g.parameter(g.parameters(node)[0]);
    std::int64_t elements = 1;
    for (std::int64_t d : p.dims)
      elements *= d;
    return isIntegerOrBool(p.dtype) && elements <= ValuePlacement::kSmallElements;
  }
  if (g.kind(node) != ir::NodeKind::Op || !g.inputs(node).empty() || g.opType(node) != "Constant" ||
      g.outputs(node).size() != 1)
    return false;
  const std::int64_t elements = constantElements(g, node);
  return elements >= 0 && elements <= ValuePlacement::kSmallElements;
}

bool readsSizesOnly(const ir::Graph& g, NodeId node, const IdVector<NodeId, KernelEntry>& kernels) {
  if (g.kind(node) != ir::NodeKind::Op || !kernels[node].kernel)
    return false;
  const auto inputs = g.inputs(node);
  for (std::size_t k = 0; k < inputs.size(); ++k)
    if (inputs[k] != ir::kNoValue && !kernels[node].readsSizesOnly(k))
      return false;
  return !inputs.empty();
}

// Forward pass: which op nodes run on the host. `free[v]`: made by a small constant.
void placeOps(const ir::Graph& g, const IdVector<NodeId, KernelEntry>& kernels, const std::vector<bool>& free,
              ValuePlacement& placement) {
  for (std::uint32_t n = 0; n < g.numNodes(); ++n) {
    const NodeId node{n};
    if (g.kind(node) != ir::NodeKind::Op || isSmallConstant(g, node))
      continue;
    bool host = readsSizesOnly(g, node, kernels);
    if (!host && isShapeArithmetic(g, node)) {
      host = true;
      for (ValueId value : g.inputs(node))
        host = host && (value == ir::kNoValue || free[index(value)] || placement.valueSide[index(value)] == Side::Host);
    }
    placement.nodeSide[node] = host ? Side::Host : Side::Device;
    for (ValueId value : g.outputs(node))
      placement.valueSide[index(value)] = placement.nodeSide[node];
  }
}

// Any graph-valued attribute (Loop's and Scan's body, If's branches, SequenceMap's body, ...).
bool hasSubgraph(const ir::Graph& g, NodeId node) {
  for (const ir::Attribute& attribute : g.attributes(node))
    if (attribute.kind == ir::AttrKind::Graph)
      return true;
  return false;
}

// Chains computed from shapes and constants alone, whatever their ops, whose results only the
// host reads: a Swin block's padding and attention-mask arithmetic runs Range, ConstantOfShape,
// Transpose and Expand on shape values, into Pad's pads and Expand's shape. The largest set of
// device-placed op nodes (no subgraph) such that every operand is made on the host, is a small
// constant or is made in the set, and every reader outside the set reads its results on the host
// or for their sizes (a graph output is a device read): the set runs on the host, so no value
// crosses into or out of it. Removal from an all-candidates start, each node once: O(nodes + edges).
class HostChains {
public:
  HostChains(const ir::Graph& g, const IdVector<NodeId, KernelEntry>& kernels, const std::vector<bool>& free,
             ValuePlacement& placement)
      : g_(g), kernels_(kernels), free_(free), placement_(placement), candidate_(g.numNodes(), 0) {}

  void place() {
    std::vector<NodeId> work;
    for (std::uint32_t n = 0; n < g_.numNodes(); ++n) {
      const NodeId node{n};
      if (g_.kind(node) == ir::NodeKind::Op && placement_.nodeSide[node] == Side::Device && !isFreeConstant(node) &&
          !hasSubgraph(g_, node) && !g_.outputs(node).empty()) {
        candidate_[node] = 1;
        work.push_back(node);
      }
    }
    while (!work.empty()) {
      const NodeId node = work.back();
      work.pop_back();
      if (!candidate_[node] || fits(node))
        continue;
      candidate_[node] = 0; // its neighbours may no longer fit
      for (ValueId value : g_.inputs(node))
        if (value != ir::kNoValue && g_.kind(g_.producer(value)) == ir::NodeKind::Op && candidate_[g_.producer(value)])
          work.push_back(g_.producer(value));
      for (ValueId value : g_.outputs(node))
        for (NodeId reader : g_.users(value))
          if (candidate_[reader])
            work.push_back(reader);
    }
    for (std::uint32_t n = 0; n < g_.numNodes(); ++n)
      if (candidate_[NodeId{n}]) {
        placement_.nodeSide[NodeId{n}] = Side::Host;
        for (ValueId value : g_.outputs(NodeId{n}))
          placement_.valueSide[index(value)] = Side::Host;
      }
  }

private:
  bool isFreeConstant(NodeId node) const {
    const auto outputs = g_.outputs(node);
    return outputs.size() == 1 && free_[index(outputs[0])];
  }

  bool fits(NodeId node) const {
    for (ValueId value : g_.inputs(node)) {
      if (value == ir::kNoValue || free_[index(value)])
        continue;
      const NodeId producer = g_.producer(value);
      const bool inSet = g_.kind(producer) == ir::NodeKind::Op && candidate_[producer];
      if (!inSet && placement_.valueSide[index(value)] != Side::Host)
        return false;
    }
    for (ValueId value : g_.outputs(node))
      for (NodeId reader : g_.users(value)) {
        if (g_.kind(reader) != ir::NodeKind::Op)
          return false; // a graph output
        if (candidate_[reader])
          continue;
        const auto inputs = g_.inputs(reader);
        for (std::size_t k = 0; k < inputs.size(); ++k)
          if (inputs[k] == value && operandReadSide(placement_.nodeSide[reader], kernels_[reader], k) == ReadSide::Device)
            return false;
      }
    return true;
  }

  const ir::Graph& g_;
  const IdVector<NodeId, KernelEntry>& kernels_;
  const std::vector<bool>& free_;
  ValuePlacement& placement_;
  IdVector<NodeId, std::uint8_t> candidate_; // 1: still in the set
};

// Backward decision for run-invariant sources: host when a reader reads it there (a small
// constant), or when every reader does (any parameter).
void placeSources(const ir::Graph& g, const IdVector<NodeId, KernelEntry>& kernels, ValuePlacement& placement) {
  for (std::uint32_t n = 0; n < g.numNodes(); ++n) {
    const NodeId node{n};
    const bool small = isSmallConstant(g, node);
    if (!small && g.kind(node) != ir::NodeKind::Parameter)
      continue;
    const ValueId value = g.outputs(node)[0];
    bool anyHost = false, allHost = true;
    for (NodeId reader : g.users(value)) {
      if (g.kind(reader) != ir::NodeKind::Op) {
        allHost = false;
        continue;
      }
      const auto inputs = g.inputs(reader);
      for (std::size_t k = 0; k < inputs.size(); ++k) {
        if (inputs[k] != value)
          continue;
        const ReadSide read = operandReadSide(placement.nodeSide[reader], kernels[reader], k);
        anyHost = anyHost || read == ReadSide::Host;
        allHost = allHost && read != ReadSide::Device;
      }
    }
    const bool host = small ? anyHost : (allHost && !g.users(value).empty());
    placement.nodeSide[node] = host ? Side::Host : Side::Device;
    placement.valueSide[index(value)] = placement.nodeSide[node];
  }
}

} // namespace

ReadSide operandReadSide(Side readerSide, const KernelEntry& kernel, std::size_t k) {
  if (kernel.readsSizesOnly(k))
    return ReadSide::Either;
  if (readerSide == Side::Host || kernel.readsOnHost(k))
    return ReadSide::Host;
  return ReadSide::Device;
}

ValuePlacement placeValues(const ir::Graph& g, const IdVector<NodeId, KernelEntry>& kernels) {
  ValuePlacement placement{IdVector<NodeId, Side>(g.numNodes(), Side::Device),
                           std::vector<Side>(g.numValues(), Side::Device)};
  std::vector<bool> free(g.numValues(), false);
  for (std::uint32_t n = 0; n < g.numNodes(); ++n)
    if (isSmallConstant(g, NodeId{n}))
      free[index(g.outputs(NodeId{n})[0])] = true;
  placeOps(g, kernels, free, placement);
  HostChains(g, kernels, free, placement).place();
  placeSources(g, kernels, placement);
  return placement;
}

std::vector<Crossing> crossingReads(const ir::Graph& g, const IdVector<NodeId, KernelEntry>& kernels,
                                    const ValuePlacement& placement) {
  std::vector<Crossing> crossings;
  for (std::uint32_t n = 0; n < g.numNodes(); ++n) {
    const NodeId node{n};
    if (g.kind(node) != ir::NodeKind::Op)
      continue;
    const auto inputs = g.inputs(node);
    for (std::size_t k = 0; k < inputs.size(); ++k)
      if (inputs[k] != ir::kNoValue &&
          crosses(placement.valueSide[index(inputs[k])], operandReadSide(placement.nodeSide[node], kernels[node], k)))
        crossings.push_back({node, static_cast<std::uint32_t>(k), inputs[k]});
  }
  return crossings;
}

} // namespace cleave::runtime
