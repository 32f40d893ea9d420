#include "simplify/shape_folding.h"

#include "simplify/affine_index.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <unordered_map>

#include "io/onnx.h"
#include "ir/extract.h"
#include "simplify/affine_index.h"
#include "simplify/static_dims.h"
#include "simplify/symbolic_reshape.h"

namespace cleave::simplify {
namespace {
using ir::NodeId;
using ir::ValueId;

constexpr std::int32_t kUnknown = -1;

std::int64_t aiOnnxOpset(const ir::Graph& graph) {
  for (const auto& [domain, version] : graph.modelInfo().opsetImports)
    if (domain.empty() || domain == "ai.onnx")
      return version;
  return 0;
}

bool foldable(std::string_view opType) {
  std::span<const std::string_view> ops = foldableOps();
  return std::binary_search(ops.begin(), ops.end(), opType);
}

// The values known to be constants: a slot per value into a pool (dense, so a million-node graph
// pays four bytes a value). Pointers it returns stay valid while it lives.
class KnownValues {
public:
  KnownValues(const ir::Graph& graph, std::int64_t maxElements)
      : graph_(graph), maxElements_(maxElements), slot_(graph.numValues(), kUnknown),
        tried_(graph.numValues(), false) {}

  // The constant `value` holds, reading a small initializer the first time it is asked for.
  const Constant* find(ValueId value) {
    const std::size_t v = index(value);
    if (slot_[v] == kUnknown && !tried_[v]) {
      tried_[v] = true;
      if (std::optional<Constant> loaded = loadParameter(value))
        set(value, std::move(*loaded));
    }
    return slot_[v] == kUnknown ? nullptr : &pool_[static_cast<std::size_t>(slot_[v])];
  }
  // Dims planning learned for a value its types leave unknown (static_dims.h); null when none.
  const std::vector<std::int64_t>* learnedDims(ValueId value) const {
    auto found = learned_.find(index(value));
    return found == learned_.end() ? nullptr : &found->second;
  }
  void learnDims(ValueId value, std::vector<std::int64_t> dims) { learned_[index(value)] = std::move(dims); }
  void set(ValueId value, Constant constant) {
    slot_[index(value)] = static_cast<std::int32_t>(pool_.size());
    pool_.push_back(std::move(constant));
  }
  Constant take(ValueId value) { return pool_[static_cast<std::size_t>(slot_[index(value)])]; }

private:
  std::optional<Constant> loadParameter(ValueId value) const {
    NodeId producer = graph_.producer(value);
    if (graph_.kind(producer) != ir::NodeKind::Parameter || graph_.parameters(producer).empty())
      return std::nullopt;
    const ir::ParamId param = graph_.parameters(producer)[0];
    const ir::Parameter& p = graph_.parameter(param);
    std::int64_t elements = 1;
    for (std::int64_t d : p.dims)
      elements *= d;
    // A trained weight never folds, however small: training must still see it as a parameter.
    const bool trained = !p.isBuffer() && (p.dtype == ir::DType::F32 || p.dtype == ir::DType::F64);
    if (!holdsDType(p.dtype) || elements > maxElements_ || trained)
      return std::nullopt;
    Expected<std::string> bytes = graph_.readParameterData(param);
    if (!bytes)
      return std::nullopt;
    return constantFromBytes(p.dtype, p.dims, *bytes);
  }

  const ir::Graph& graph_;
  std::int64_t maxElements_;
  std::vector<std::int32_t> slot_;
  std::vector<bool> tried_;
  std::deque<Constant> pool_; // a deque: find() hands out pointers that later sets must not move
  std::unordered_map<std::uint32_t, std::vector<std::int64_t>> learned_;
};

// The extents of `value`'s dims (-1: not static): a constant's own (it may be a fold whose type the
// graph never knew), else inference's anew where it knows the rank, else the graph's; nullopt when
// none knows the rank.
std::optional<std::vector<std::int64_t>> extentsOf(const ir::Graph& graph, ValueId value, const FoldOptions& options,
                                                   KnownValues& known) {
  if (const Constant* constant = known.find(value))
    return constant->dims;
  if (const std::vector<std::int64_t>* learned = known.learnedDims(value))
    return *learned;
  // Extents alone, not typedDims (static_dims.h): planning asks this of every node it keeps, and
  // naming symbols would cost a 1M-node chain's plan half again its time.
  if (index(value) < options.inferredTypes.size()) {
    const ir::Shape& inferred = options.inferredTypes[index(value)].shape;
    if (inferred.rankKnown) {
      std::vector<std::int64_t> extents;
      for (const ir::Dim& dim : inferred.dims)
        extents.push_back(dim.extent);
      return extents;
    }
  }
  if (!graph.rankKnown(value))
    return std::nullopt;
  std::vector<std::int64_t> extents;
  for (const ir::DimEntry& dim : graph.dims(value))
    extents.push_back(dim.extent);
  return extents;
}

// Shape (opset 15's start/end) or Size of `value` when its dims in that range are static.
std::optional<Constant> staticShape(const ir::Graph& graph, NodeId node, bool size, const FoldOptions& options,
                                    KnownValues& known) {
  const std::optional<std::vector<std::int64_t>> dims = extentsOf(graph, graph.inputs(node)[0], options, known);
  if (!dims)
    return std::nullopt;
  const auto rank = static_cast<std::int64_t>(dims->size());
  const auto [start, end] = size ? std::pair<std::int64_t, std::int64_t>{0, rank} : shapeNodeRange(graph, node, rank);
  Constant out;
  out.dtype = ir::DType::I64;
  std::int64_t elements = 1;
  for (std::int64_t k = start; k < end; ++k) {
    const std::int64_t extent = (*dims)[static_cast<std::size_t>(k)];
    if (extent < 0)
      return std::nullopt;
    out.ints.push_back(extent);
    elements *= extent;
  }
  if (size) {
    out.ints.assign(1, elements);
    return out; // a scalar
  }
  out.dims = {static_cast<std::int64_t>(out.ints.size())};
  return out;
}

// Gather(Shape(x), indices) when the dims it picks are static, although others of x are not (the
// exporters' `x.size(2)` on a dynamic batch): an int64 constant of the picked dims.
std::optional<Constant> gatheredStaticDims(const ir::Graph& graph, NodeId node, KnownValues& known,
                                           const FoldOptions& options) {
  std::span<const ValueId> inputs = graph.inputs(node);
  if (inputs.size() != 2 || inputs[0] == ir::kNoValue || inputs[1] == ir::kNoValue)
    return std::nullopt;
  const NodeId shapeNode = graph.producer(inputs[0]);
  const std::string_view domain = graph.opDomain(shapeNode);
  if (graph.kind(shapeNode) != ir::NodeKind::Op || graph.opType(shapeNode) != "Shape" ||
      !(domain.empty() || domain == "ai.onnx"))
    return std::nullopt;
  if (const ir::Attribute* axis = graph.findAttribute(node, "axis"); axis && axis->intValue != 0)
    return std::nullopt;
  const Constant* indices = known.find(inputs[1]);
  if (!indices || indices->floating() || indices->dims.size() > 1)
    return std::nullopt;
  const std::optional<std::vector<std::int64_t>> dims = extentsOf(graph, graph.inputs(shapeNode)[0], options, known);
  if (!dims)
    return std::nullopt;
  const auto rank = static_cast<std::int64_t>(dims->size());
  const auto [start, end] = shapeNodeRange(graph, shapeNode, rank);
  Constant out;
  out.dtype = ir::DType::I64;
  out.dims = indices->dims;
  for (std::int64_t index : indices->ints) {
    const std::int64_t length = end - start;
    if (index < -length || index >= length)
      return std::nullopt;
    const std::int64_t extent = (*dims)[static_cast<std::size_t>(start + (index < 0 ? index + length : index))];
    if (extent < 0)
      return std::nullopt;
    out.ints.push_back(extent);
  }
  return out;
}

// Evaluates op node `node` when it folds; its outputs' constants then join `known`.
bool fold(const ir::Graph& graph, NodeId node, std::int64_t opset, KnownValues& known, const FoldOptions& options) {
  const std::string_view type = graph.opType(node);
  if (type == "Shape" || type == "Size") {
    std::optional<Constant> shape = staticShape(graph, node, type == "Size", options, known);
    if (!shape)
      return false;
    known.set(graph.outputs(node)[0], std::move(*shape));
    return true;
  }
  if (type == "Gather" && graph.inputs(node).size() == 2 && graph.inputs(node)[0] != ir::kNoValue &&
      !known.find(graph.inputs(node)[0])) {
    std::optional<Constant> picked = gatheredStaticDims(graph, node, known, options);
    if (!picked)
      return false;
    known.set(graph.outputs(node)[0], std::move(*picked));
    return true;
  }
  std::span<const ValueId> values = graph.outputs(node);
  if (options.memo) {
    auto remembered = options.memo->outputsByNode.find(index(node));
    if (remembered != options.memo->outputsByNode.end()) {
      for (std::size_t k = 0; k < values.size(); ++k)
        known.set(values[k], remembered->second[k]);
      return true;
    }
  }
  OpToFold op{type, opset, graph.attributes(node), {}, graph.outputs(node).size()};
  for (ValueId input : graph.inputs(node)) {
    if (input == ir::kNoValue) {
      op.inputs.push_back(nullptr);
      continue;
    }
    const Constant* constant = known.find(input);
    if (!constant)
      return false;
    op.inputs.push_back(constant);
  }
  std::optional<std::vector<Constant>> outputs = evaluateOp(op, options.maxElements);
  if (!outputs)
    return false;
  for (std::size_t k = 0; k < values.size(); ++k) // a dtype the graph disagrees with: not ours to fold
    if (graph.dtype(values[k]) != ir::DType::Undefined && graph.dtype(values[k]) != (*outputs)[k].dtype)
      return false;
  if (options.memo)
    options.memo->outputsByNode.emplace(index(node), *outputs);
  for (std::size_t k = 0; k < values.size(); ++k)
    known.set(values[k], std::move((*outputs)[k]));
  return true;
}
// Whether `value` is read only as an explicit operand of op nodes: not a graph output, and no
// subgraph body reads it by name (an If or Loop's implicit operand).
bool readOnlyExplicitly(const ir::Graph& graph, ValueId value) {
  for (NodeId user : graph.users(value)) {
    if (graph.kind(user) != ir::NodeKind::Op)
      return false;
    std::span<const ValueId> inputs = graph.inputs(user);
    const std::size_t implicitFrom = inputs.size() - graph.numImplicitInputs(user);
    for (std::size_t k = implicitFrom; k < inputs.size(); ++k)
      if (inputs[k] == value)
        return false;
  }
  return true;
}

// Whether Expand(x, shape) gives x's own dims: x's are static and broadcasting them with the
// constant `shape` changes none (a class token expanded to a batch of 1).
bool expandKeepsDims(const ir::Graph& graph, NodeId node, const FoldOptions& options, KnownValues& known) {
  std::span<const ValueId> inputs = graph.inputs(node);
  const Constant* shape = inputs.size() == 2 && inputs[1] != ir::kNoValue ? known.find(inputs[1]) : nullptr;
  std::optional<std::vector<std::int64_t>> dims = extentsOf(graph, inputs[0], options, known);
  if (!shape || shape->floating() || !dims || shape->ints.size() > dims->size() ||
      std::find(dims->begin(), dims->end(), -1) != dims->end())
    return false;
  const std::size_t offset = dims->size() - shape->ints.size();
  for (std::size_t k = 0; k < shape->ints.size(); ++k)
    if (shape->ints[k] != 1 && shape->ints[k] != (*dims)[offset + k])
      return false;
  return true;
}

// The dims of X where `flat` is Reshape(X, [-1]), symbols included; none otherwise, or where a dim
// is unknown without a symbol.
std::optional<std::vector<IndexExtent>> flattenedDims(const ir::Graph& graph, ValueId flat, KnownValues& known) {
  const NodeId producer = graph.producer(flat);
  if (graph.kind(producer) != ir::NodeKind::Op || graph.opType(producer) != "Reshape" ||
      graph.inputs(producer).size() != 2)
    return std::nullopt;
  const Constant* shape = known.find(graph.inputs(producer)[1]);
  const ValueId whole = graph.inputs(producer)[0];
  if (!shape || shape->floating() || shape->ints != std::vector<std::int64_t>{-1} || !graph.rankKnown(whole))
    return std::nullopt;
  std::vector<IndexExtent> extents;
  for (const ir::DimEntry& dim : graph.dims(whole)) {
    if (dim.extent < 0 && dim.symbol == 0)
      return std::nullopt;
    extents.push_back({dim.extent, dim.extent < 0 ? dim.symbol : 0});
  }
  return extents;
}

// Whether every reader of `value` is a Reshape of it that copies no input dim (allowzero, or a
// constant shape without 0): such a reader sees only the elements in order.
bool onlyReshapesRead(const ir::Graph& graph, ValueId value, KnownValues& known) {
  for (NodeId reader : graph.users(value)) {
    std::span<const ValueId> operands = graph.inputs(reader);
    if (graph.kind(reader) != ir::NodeKind::Op || graph.opType(reader) != "Reshape" || operands.size() != 2 ||
        operands[0] != value || operands[1] == value)
      return false;
    const ir::Attribute* allowZero = graph.findAttribute(reader, "allowzero");
    if (allowZero && allowZero->intValue != 0)
      continue;
    const Constant* shape = known.find(operands[1]);
    if (!shape || shape->floating() || std::find(shape->ints.begin(), shape->ints.end(), 0) != shape->ints.end())
      return false;
  }
  return true;
}

// What a Gather(flat, indices) that only views its data reads instead (kNoValue: none). The
// indices enumerate 0..n-1 in order (affine_index.h: a constant, or torch.export's Range
// arithmetic of a contiguous as_strided view with a symbolic batch, as swin_t's and convnext's
// flatten) over all of flat's n elements. Then where flat is Reshape(X, [-1]) and the indices have
// X's dims, the Gather is X itself, for any reader; else, where only Reshapes that copy no input
// dim read it, they may read flat.
ValueId gatherViewSource(const ir::Graph& graph, NodeId node, const FoldOptions& options, KnownValues& known) {
  std::span<const ValueId> inputs = graph.inputs(node);
  const ir::Attribute* axis = graph.findAttribute(node, "axis");
  if (inputs.size() != 2 || inputs[1] == ir::kNoValue || (axis && axis->intValue != 0))
    return ir::kNoValue;
  const KnownConstant lookup = [&known](ValueId value) { return known.find(value); };
  std::optional<AffineIndex> indices = affineIndexOf(graph, inputs[1], lookup);
  std::optional<std::vector<std::int64_t>> flatDims = extentsOf(graph, inputs[0], options, known);
  if (!indices || !enumeratesInOrder(*indices) || !flatDims || flatDims->size() != 1)
    return ir::kNoValue;
  std::optional<std::vector<IndexExtent>> whole = flattenedDims(graph, inputs[0], known);
  if (whole && *whole == indices->dims)
    return graph.inputs(graph.producer(inputs[0]))[0];
  const std::optional<SymbolicCount> count =
      (*flatDims)[0] >= 0 ? std::optional<SymbolicCount>(SymbolicCount{(*flatDims)[0], {}})
                          : (whole ? std::optional<SymbolicCount>(countOf(*whole)) : std::nullopt);
  if (!count || *count != countOf(indices->dims) || !onlyReshapesRead(graph, graph.outputs(node)[0], known))
    return ir::kNoValue;
  return inputs[0];
}

// An Identity, a Cast to the dtype its input already has, an Expand that keeps its input's dims
// (ONNX Runtime's basic level removes all three), a Gather that only views its data
// (gatherViewSource), or a Dropout that passes everything on (no training_mode, a constant false
// one, or a constant ratio of 0) whose mask nothing reads: its readers can read the value this
// returns instead (its input; for the Gather, the value it views). kNoValue: not bypassable. Its
// output must be read only explicitly.
ValueId bypassSource(const ir::Graph& graph, NodeId node, const FoldOptions& options, KnownValues& known) {
  const std::string_view type = graph.opType(node);
  std::span<const ValueId> inputs = graph.inputs(node), outputs = graph.outputs(node);
  if ((type != "Identity" && type != "Dropout" && type != "Cast" && type != "Expand" && type != "Gather") ||
      inputs.empty() || inputs[0] == ir::kNoValue || graph.numImplicitInputs(node) > 0 ||
      graph.valueKind(inputs[0]) != ir::ValueKind::Tensor || !readOnlyExplicitly(graph, outputs[0]))
    return ir::kNoValue;
  if (type == "Gather")
    return gatherViewSource(graph, node, options, known);
  if (type == "Expand" && !expandKeepsDims(graph, node, options, known))
    return ir::kNoValue;
  if (type == "Cast") {
    const ir::Attribute* to = graph.findAttribute(node, "to");
    const ir::DType from = graph.valueType(inputs[0]).dtype;
    if (!to || to->kind != ir::AttrKind::Int || from == ir::DType::Undefined ||
        ir::dtypeFromOnnx(static_cast<int>(to->intValue)) != from)
      return ir::kNoValue;
  }
  if (type == "Dropout") {
    auto scalarIs = [&](std::size_t input, double value) {
      const Constant* c = input < inputs.size() && inputs[input] != ir::kNoValue ? known.find(inputs[input]) : nullptr;
      if (!c || c->numel() != 1)
        return false;
      return c->floating() ? c->reals[0] == value : static_cast<double>(c->ints[0]) == value;
    };
    const bool inference = inputs.size() <= 2 || inputs[2] == ir::kNoValue || scalarIs(2, 0.0);
    if (!inference && !scalarIs(1, 0.0)) // training with a ratio of 0 also passes everything on
      return ir::kNoValue;
    if (outputs.size() > 1 && !graph.users(outputs[1]).empty())
      return ir::kNoValue;
  }
  return inputs[0];
}
} // namespace

namespace {
// A kept node's output dims, where its types leave some unknown and its operands now determine
// them (static_dims.h): later Shape nodes of this plan read them, as inference anew would.
void learnOutputDims(const ir::Graph& graph, NodeId node, std::int64_t opset, const FoldOptions& options,
                     KnownValues& known) {
  if (graph.outputs(node).empty())
    return;
  const ValueId output = graph.outputs(node)[0];
  std::optional<std::vector<std::int64_t>> before = extentsOf(graph, output, options, known);
  if (before && std::all_of(before->begin(), before->end(), [](std::int64_t d) { return d >= 0; }))
    return;
  DimsSources sources{[&](ValueId value) { return extentsOf(graph, value, options, known); },
                      [&](ValueId value) { return known.find(value); }};
  std::optional<std::vector<std::int64_t>> dims = staticOutputDims(graph, node, opset, sources);
  if (!dims || (before && before->size() != dims->size()))
    return;
  for (std::size_t k = 0; before && k < dims->size(); ++k)
    if ((*before)[k] >= 0 && (*before)[k] != (*dims)[k])
      return; // the types disagree: not ours to settle
  known.learnDims(output, std::move(*dims));
}

// What the forward pass decided, per node and per value.
struct Decisions {
  std::vector<bool> folded, bypassed;    // by node
  std::vector<ValueId> readInstead;      // by value (empty: none): a bypassed output's source
};

// Forward, in topological order: each op node folded (its outputs join `known`), bypassed, or
// left; counts go into `plan`.
Decisions foldForward(const ir::Graph& graph, const FoldOptions& options, KnownValues& known, FoldPlan& plan) {
  const std::int64_t opset = aiOnnxOpset(graph);
  Decisions decided{std::vector<bool>(graph.numNodes(), false), std::vector<bool>(graph.numNodes(), false), {}};
  std::unordered_map<std::uint32_t, bool> candidateType; // by interned op type: a few entries
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    const NodeId node{n};
    if (graph.kind(node) != ir::NodeKind::Op)
      continue;
    auto [type, added] = candidateType.try_emplace(graph.opTypeId(node), false);
    if (added) // what folds, and what can be bypassed
      type->second = foldable(graph.opType(node)) || graph.opType(node) == "Dropout";
    const std::string_view domain = graph.opDomain(node);
    if (!(domain.empty() || domain == "ai.onnx"))
      continue;
    if (!type->second) { // an op that never folds: what it makes may still get known dims
      learnOutputDims(graph, node, opset, options, known);
      continue;
    }
    if (fold(graph, node, opset, known, options)) {
      decided.folded[n] = true;
      ++plan.folded;
      ++plan.foldedByOp[std::string(graph.opType(node))];
    } else if (const ValueId input = bypassSource(graph, node, options, known); input == ir::kNoValue) {
      learnOutputDims(graph, node, opset, options, known);
    } else {
      std::vector<ValueId>& instead = decided.readInstead;
      if (instead.empty())
        instead.assign(graph.numValues(), ir::kNoValue);
      instead[index(graph.outputs(node)[0])] = instead[index(input)] == ir::kNoValue ? input : instead[index(input)];
      decided.bypassed[n] = true;
      ++plan.bypassedByOp[std::string(graph.opType(node))];
    }
  }
  return decided;
}

// Liveness, backwards from the graph's outputs: a folded value read by a live node or an output
// becomes an initializer; a bypassed node, and an op node none of whose outputs is read, goes;
// a kept node's read of a bypassed output becomes a read of its source.
void keepWhatIsRead(const ir::Graph& graph, const Decisions& decided, KnownValues& known, FoldPlan& plan) {
  const std::vector<ValueId>& instead = decided.readInstead;
  std::vector<bool> live(graph.numValues(), false), substituted(instead.empty() ? 0 : graph.numValues(), false);
  for (ValueId output : graph.graphOutputs())
    live[index(output)] = true;
  std::vector<NodeId> keptReversed;
  for (std::uint32_t n = graph.numNodes(); n-- > 0;) {
    const NodeId node{n};
    if (!graph.isCallable(node))
      continue;
    bool read = false;
    for (ValueId value : graph.outputs(node))
      read = read || live[index(value)];
    if (!read || decided.folded[n] || decided.bypassed[n]) {
      ++plan.removed;
      if (read && decided.folded[n])
        for (ValueId value : graph.outputs(node))
          if (live[index(value)])
            plan.constants.emplace_back(value, known.take(value));
      continue;
    }
    keptReversed.push_back(node);
    if (graph.kind(node) == ir::NodeKind::Op && (graph.opType(node) == "Shape" || graph.opType(node) == "Size"))
      ++plan.shapesLeft;
    for (ValueId value : graph.inputs(node)) {
      if (value == ir::kNoValue)
        continue;
      if (!instead.empty() && instead[index(value)] != ir::kNoValue) {
        if (!substituted[index(value)])
          plan.readsInstead.emplace_back(value, instead[index(value)]);
        substituted[index(value)] = true;
        value = instead[index(value)];
      }
      live[index(value)] = true;
    }
  }
  plan.kept.assign(keptReversed.rbegin(), keptReversed.rend());
  std::reverse(plan.constants.begin(), plan.constants.end()); // graph order
}
} // namespace

FoldPlan planShapeFolding(const ir::Graph& graph, const FoldOptions& options) {
  FoldPlan plan;
  KnownValues known(graph, options.maxElements);
  const Decisions decided = foldForward(graph, options, known, plan);
  keepWhatIsRead(graph, decided, known, plan);
  return plan;
}

namespace {
// The graph `plan` leaves; `types` (by `graph`'s value ids), when given, replace its value types.
Expected<ir::Graph> extractFolded(const ir::Graph& graph, const FoldPlan& plan,
                                  const IdVector<ValueId, ir::ValueType>* types) {
  std::vector<ValueId> inputs;
  for (NodeId node : graph.inputNodes())
    inputs.push_back(graph.outputs(node)[0]);
  std::vector<ValueId> outputs(graph.graphOutputs().begin(), graph.graphOutputs().end());
  std::vector<ir::AddedParameter> added;
  for (const auto& [value, constant] : plan.constants)
    added.push_back({value, constant.dtype, constant.dims, constant.bytes()});
  return ir::extractSubgraph(graph, {std::string(graph.modelInfo().graphName), plan.kept, inputs, outputs, types,
                                     nullptr, added, plan.readsInstead});
}

// Inference's types on the graph `plan` leaves, by `graph`'s value ids (the names are kept); the
// types in `declared` (reshapes' outputs that symbols determine) go in as the graph's, for
// inference to carry on from.
Expected<std::vector<ir::ValueType>> typesAfter(const ir::Graph& graph, const FoldPlan& plan,
                                                const std::map<ValueId, ir::ValueType>& declared) {
  std::optional<IdVector<ValueId, ir::ValueType>> declaredTypes;
  if (!declared.empty()) {
    declaredTypes.emplace(graph.numValues());
    for (std::uint32_t v = 0; v < graph.numValues(); ++v)
      (*declaredTypes)[ValueId{v}] = graph.valueType(ValueId{v});
    for (const auto& [value, type] : declared)
      (*declaredTypes)[value] = type;
  }
  CLEAVE_TRY(ir::Graph folded, extractFolded(graph, plan, declaredTypes ? &*declaredTypes : nullptr));
  CLEAVE_TRY(std::vector<ir::ValueType> inferred, io::inferValueTypes(folded));
  std::vector<ir::ValueType> types(graph.numValues());
  for (std::uint32_t v = 0; v < folded.numValues(); ++v) {
    const ValueId value = graph.findValue(folded.valueName(ValueId{v}));
    if (value != ir::kNoValue)
      types[index(value)] = std::move(inferred[v]);
  }
  return types;
}
} // namespace

namespace {
// Whether inference anew could learn a dim the plan's graph does not know: a node that stays reads
// a folded value, and one of its outputs has an unknown rank or dim (a Pad whose pads folded).
bool mayLearnShapes(const ir::Graph& graph, const FoldPlan& plan) {
  std::vector<bool> kept(graph.numNodes(), false);
  for (NodeId node : plan.kept)
    kept[index(node)] = true;
  for (const auto& [value, constant] : plan.constants)
    for (NodeId reader : graph.users(value)) {
      if (!kept[index(reader)])
        continue;
      for (ValueId output : graph.outputs(reader)) {
        if (!graph.rankKnown(output))
          return true;
        for (const ir::DimEntry& dim : graph.dims(output))
          if (dim.extent < 0)
            return true;
      }
    }
  return false;
}
} // namespace

FoldPlan foldToFixedPoint(const ir::Graph& graph, const FoldOptions& options) {
  FoldMemo memo;
  FoldOptions first = options;
  if (!first.memo)
    first.memo = &memo;
  FoldPlan plan = planShapeFolding(graph, first);
  std::vector<ir::ValueType> types;
  std::map<ValueId, ir::ValueType> declared; // every round's reshapes that symbols determine
  for (std::size_t round = 2; round <= kMaxFoldRounds && plan.shapesLeft > 0; ++round) {
    bool learned = false;
    for (auto& [value, type] : reshapeTypesFromSymbols(graph, types))
      learned = declared.insert_or_assign(value, std::move(type)).second || learned;
    if (!learned && !(plan.changes() && mayLearnShapes(graph, plan)))
      break;
    Expected<std::vector<ir::ValueType>> inferred = typesAfter(graph, plan, declared);
    if (!inferred)
      break;
    types = std::move(*inferred);
    FoldOptions next = first;
    next.inferredTypes = types;
    FoldPlan better = planShapeFolding(graph, next);
    if (better.folded <= plan.folded)
      break;
    plan = std::move(better);
    plan.rounds = round;
  }
  return plan;
}

Expected<ir::Graph> applyFoldPlan(const ir::Graph& graph, const FoldPlan& plan) {
  return extractFolded(graph, plan, nullptr);
}

namespace {
// `own`, with what `inferred` knows of its rank and dims where `own` does not.
ir::ValueType merged(ir::ValueType own, const ir::ValueType& inferred) {
  if (!inferred.shape.rankKnown || (own.shape.rankKnown && own.shape.dims.size() != inferred.shape.dims.size()))
    return own;
  if (!own.shape.rankKnown) {
    own.shape = inferred.shape;
  } else {
    for (std::size_t k = 0; k < own.shape.dims.size(); ++k)
      if (!own.shape.dims[k].isKnown() && (inferred.shape.dims[k].isKnown() || own.shape.dims[k].symbol.empty()))
        own.shape.dims[k] = inferred.shape.dims[k];
  }
  if (own.dtype == ir::DType::Undefined)
    own.dtype = inferred.dtype;
  if (own.kind == ir::ValueKind::Unknown)
    own.kind = inferred.kind;
  return own;
}
} // namespace

Expected<ir::Graph> applyFoldPlanRetyped(const ir::Graph& graph, const FoldPlan& plan) {
  CLEAVE_TRY(ir::Graph folded, extractFolded(graph, plan, nullptr));
  Expected<std::vector<ir::ValueType>> inferred = io::inferValueTypes(folded);
  if (!inferred)
    return folded;
  IdVector<ValueId, ir::ValueType> types(folded.numValues());
  for (std::uint32_t v = 0; v < folded.numValues(); ++v)
    types[ValueId{v}] = merged(folded.valueType(ValueId{v}), (*inferred)[v]);
  std::vector<NodeId> ops;
  std::vector<ValueId> inputs;
  for (std::uint32_t n = 0; n < folded.numNodes(); ++n)
    if (folded.kind(NodeId{n}) == ir::NodeKind::Op)
      ops.push_back(NodeId{n});
  for (NodeId node : folded.inputNodes())
    inputs.push_back(folded.outputs(node)[0]);
  std::vector<ValueId> outputs(folded.graphOutputs().begin(), folded.graphOutputs().end());
  return ir::extractSubgraph(folded, {std::string(folded.modelInfo().graphName), ops, inputs, outputs, &types});
}

} // namespace cleave::simplify
