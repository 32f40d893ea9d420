#include "simplify/static_dims.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <string_view>

namespace cleave::simplify {

namespace {
using Dims = std::vector<std::int64_t>;
using ir::NodeId;
using ir::ValueId;

constexpr std::array<std::string_view, 40> kSameShape = {
    "Abs",        "BatchNormalization", "Cast",        "CastLike",    "Ceil",    "Clip",     "Cos",
    "Dropout",    "Elu",                "Erf",         "Exp",         "Floor",   "Gelu",     "HardSigmoid",
    "HardSwish",  "Identity",           "InstanceNormalization", "IsInf", "IsNaN", "LayerNormalization",
    "LeakyRelu",  "Log",                "LogSoftmax",  "Neg",         "Not",     "Reciprocal", "Relu",
    "Round",      "Selu",               "Sigmoid",     "Sign",        "Sin",     "Softmax",  "Softplus",
    "Softsign",   "Sqrt",               "Tan",         "Tanh",        "ThresholdedRelu", "Trilu"};
constexpr std::array<std::string_view, 21> kBroadcasting = {
    "Add",  "And",     "BitShift", "Div",           "Equal", "Greater", "GreaterOrEqual",
    "Less", "LessOrEqual", "Max",  "Mean",          "Min",   "Mod",     "Mul",
    "Or",   "PRelu",   "Pow",      "Sub",           "Sum",   "Where",   "Xor"};
constexpr std::array<std::string_view, 9> kReductions = {"ReduceL1",  "ReduceL2",  "ReduceLogSumExp",
                                                        "ReduceMax", "ReduceMean", "ReduceMin",
                                                        "ReduceProd", "ReduceSum", "ReduceSumSquare"};

template <std::size_t N> bool among(const std::array<std::string_view, N>& ops, std::string_view type) {
  return std::find(ops.begin(), ops.end(), type) != ops.end();
}

bool isStatic(const Dims& dims) {
  return std::all_of(dims.begin(), dims.end(), [](std::int64_t d) { return d >= 0; });
}

// The product of dims [from, to); nullopt when it overflows (constants may say anything).
std::optional<std::int64_t> product(const Dims& dims, std::size_t from = 0, std::size_t to = SIZE_MAX) {
  std::int64_t p = 1;
  for (std::size_t k = from; k < std::min(to, dims.size()); ++k)
    if (__builtin_mul_overflow(p, dims[k], &p))
      return std::nullopt;
  return p;
}

// a + b + c; nullopt when it overflows.
std::optional<std::int64_t> sum(std::int64_t a, std::int64_t b, std::int64_t c = 0) {
  std::int64_t s = 0;
  if (__builtin_add_overflow(a, b, &s) || __builtin_add_overflow(s, c, &s))
    return std::nullopt;
  return s;
}

// Normalizes `axis` for `rank` (negative from the end); nullopt when outside.
std::optional<std::size_t> normalized(std::int64_t axis, std::size_t rank) {
  const auto r = static_cast<std::int64_t>(rank);
  if (axis < -r || axis >= r)
    return std::nullopt;
  return static_cast<std::size_t>(axis < 0 ? axis + r : axis);
}

std::optional<Dims> broadcast(const std::vector<Dims>& shapes) {
  std::size_t rank = 0;
  for (const Dims& s : shapes)
    rank = std::max(rank, s.size());
  Dims out(rank, 1);
  for (const Dims& s : shapes)
    for (std::size_t k = 0; k < s.size(); ++k) {
      std::int64_t& o = out[rank - s.size() + k];
      if (s[k] == o || s[k] == 1)
        continue;
      if (o != 1)
        return std::nullopt;
      o = s[k];
    }
  return out;
}

class DimsOfNode {
public:
  DimsOfNode(const ir::Graph& graph, NodeId node, std::int64_t opset, const DimsSources& sources)
      : g_(graph), node_(node), opset_(opset), sources_(sources), inputs_(graph.inputs(node)) {}

  std::optional<Dims> compute() {
    const std::string_view type = g_.opType(node_);
    if (inputs_.empty() || inputs_[0] == ir::kNoValue)
      return std::nullopt;
    if (among(kSameShape, type))
      return in(0);
    if (among(kBroadcasting, type))
      return broadcastAll();
    if (among(kReductions, type))
      return reduce();
    if (type == "MatMul")
      return matMul();
    if (type == "Reshape")
      return reshape();
    if (type == "Transpose")
      return transpose();
    if (type == "Pad")
      return pad();
    if (type == "Slice")
      return slice();
    if (type == "Concat")
      return concat();
    if (type == "Unsqueeze")
      return unsqueeze();
    if (type == "Squeeze")
      return squeeze();
    if (type == "Expand")
      return expand();
    if (type == "Gather")
      return gather();
    if (type == "Flatten")
      return flatten();
    return std::nullopt;
  }

private:
  // Operand k's dims when all static.
  std::optional<Dims> in(std::size_t k) const {
    if (k >= inputs_.size() || inputs_[k] == ir::kNoValue)
      return std::nullopt;
    std::optional<Dims> dims = sources_.dims(inputs_[k]);
    if (!dims || !isStatic(*dims))
      return std::nullopt;
    return dims;
  }
  // Operand k's integer constant; null when absent or not one.
  const Constant* ints(std::size_t k) const {
    if (k >= inputs_.size() || inputs_[k] == ir::kNoValue)
      return nullptr;
    const Constant* c = sources_.constant(inputs_[k]);
    return c && !c->floating() ? c : nullptr;
  }
  bool present(std::size_t k) const { return k < inputs_.size() && inputs_[k] != ir::kNoValue; }
  std::int64_t attr(std::string_view name, std::int64_t fallback) const {
    const ir::Attribute* a = g_.findAttribute(node_, name);
    return a ? a->intValue : fallback;
  }
  // An ints attribute, or operand k's constant from `fromOpset` on; nullopt where it should be
  // there and is not known; an empty vector where it is absent.
  std::optional<Dims> axesFrom(std::string_view name, std::size_t k, std::int64_t fromOpset) const {
    if (opset_ >= fromOpset) {
      if (!present(k))
        return Dims{};
      const Constant* c = ints(k);
      return c ? std::optional<Dims>(c->ints) : std::nullopt;
    }
    const ir::Attribute* a = g_.findAttribute(node_, name);
    return a ? a->ints : Dims{};
  }

  std::optional<Dims> broadcastAll() const {
    std::vector<Dims> shapes;
    for (std::size_t k = 0; k < inputs_.size(); ++k) {
      std::optional<Dims> dims = in(k);
      if (!dims)
        return std::nullopt;
      shapes.push_back(std::move(*dims));
    }
    return broadcast(shapes);
  }

  std::optional<Dims> matMul() const {
    std::optional<Dims> a = in(0), b = in(1);
    if (!a || !b || a->empty() || b->empty())
      return std::nullopt;
    const bool vectorA = a->size() == 1, vectorB = b->size() == 1;
    if (vectorA)
      a->insert(a->begin(), 1);
    if (vectorB)
      b->push_back(1);
    if ((*a)[a->size() - 1] != (*b)[b->size() - 2])
      return std::nullopt;
    std::optional<Dims> batch = broadcast({Dims(a->begin(), a->end() - 2), Dims(b->begin(), b->end() - 2)});
    if (!batch)
      return std::nullopt;
    if (!vectorA)
      batch->push_back((*a)[a->size() - 2]);
    if (!vectorB)
      batch->push_back(b->back());
    return batch;
  }

  std::optional<Dims> reshape() const {
    std::optional<Dims> data = in(0);
    const Constant* target = ints(1);
    if (!data || !target)
      return std::nullopt;
    const bool allowZero = attr("allowzero", 0) != 0;
    Dims out;
    std::optional<std::size_t> inferred;
    for (std::size_t k = 0; k < target->ints.size(); ++k) {
      const std::int64_t t = target->ints[k];
      if (t == 0 && !allowZero) {
        if (k >= data->size())
          return std::nullopt;
        out.push_back((*data)[k]);
      } else if (t == -1 && !inferred) {
        inferred = k;
        out.push_back(1);
      } else if (t >= 0) {
        out.push_back(t);
      } else {
        return std::nullopt;
      }
    }
    const std::optional<std::int64_t> total = product(*data), known = product(out);
    if (!total || !known)
      return std::nullopt;
    if (inferred) {
      if (*known == 0 || *total % *known != 0)
        return std::nullopt;
      out[*inferred] = *total / *known;
    } else if (*known != *total) {
      return std::nullopt;
    }
    return out;
  }

  std::optional<Dims> transpose() const {
    std::optional<Dims> data = in(0);
    if (!data)
      return std::nullopt;
    Dims perm(data->size());
    std::iota(perm.rbegin(), perm.rend(), 0);
    if (const ir::Attribute* a = g_.findAttribute(node_, "perm"))
      perm = a->ints;
    if (perm.size() != data->size())
      return std::nullopt;
    Dims out;
    for (std::int64_t p : perm) {
      if (p < 0 || p >= static_cast<std::int64_t>(data->size()))
        return std::nullopt;
      out.push_back((*data)[static_cast<std::size_t>(p)]);
    }
    return out;
  }

  std::optional<Dims> pad() const {
    std::optional<Dims> data = in(0);
    if (!data)
      return std::nullopt;
    std::optional<Dims> pads = axesFrom("pads", 1, 11);
    std::optional<Dims> axes = opset_ >= 18 ? axesFrom("axes", 3, 18) : Dims{};
    if (!pads || !axes)
      return std::nullopt;
    if (axes->empty()) {
      axes->resize(data->size());
      std::iota(axes->begin(), axes->end(), 0);
    }
    if (pads->size() != 2 * axes->size())
      return std::nullopt;
    Dims out = *data;
    for (std::size_t k = 0; k < axes->size(); ++k) {
      std::optional<std::size_t> axis = normalized((*axes)[k], data->size());
      if (!axis)
        return std::nullopt;
      std::optional<std::int64_t> padded = sum(out[*axis], (*pads)[k], (*pads)[k + axes->size()]);
      if (!padded || *padded < 0)
        return std::nullopt;
      out[*axis] = *padded;
    }
    return out;
  }

  std::optional<Dims> slice() const {
    std::optional<Dims> data = in(0);
    std::optional<Dims> starts = axesFrom("starts", 1, 10), ends = axesFrom("ends", 2, 10);
    std::optional<Dims> axes = axesFrom("axes", 3, 10), steps = opset_ >= 10 ? axesFrom("steps", 4, 10) : Dims{};
    if (!data || !starts || !ends || !axes || !steps || starts->size() != ends->size())
      return std::nullopt;
    if (axes->empty()) {
      axes->resize(starts->size());
      std::iota(axes->begin(), axes->end(), 0);
    }
    if (steps->empty())
      steps->assign(starts->size(), 1);
    if (axes->size() != starts->size() || steps->size() != starts->size())
      return std::nullopt;
    Dims out = *data;
    for (std::size_t k = 0; k < starts->size(); ++k) {
      std::optional<std::size_t> axis = normalized((*axes)[k], data->size());
      if (!axis || (*steps)[k] == 0)
        return std::nullopt;
      const std::int64_t step = (*steps)[k], size = (*data)[*axis];
      auto clampIndex = [&](std::int64_t i, bool forward) {
        if (i < 0)
          i += size;
        return forward ? std::clamp<std::int64_t>(i, 0, size) : std::clamp<std::int64_t>(i, -1, size - 1);
      };
      const std::int64_t begin = clampIndex((*starts)[k], step > 0), end = clampIndex((*ends)[k], step > 0);
      // step > INT64_MIN: -step cannot overflow; a step past the dim takes one element either way.
      const std::int64_t span = step > 0 ? end - begin : begin - end,
                         stride = step > 0 ? step : (step == INT64_MIN ? INT64_MAX : -step);
      out[*axis] = span <= 0 ? 0 : 1 + (span - 1) / stride;
    }
    return out;
  }

  std::optional<Dims> concat() const {
    std::optional<Dims> out;
    std::optional<std::size_t> axis;
    for (std::size_t k = 0; k < inputs_.size(); ++k) {
      std::optional<Dims> dims = in(k);
      if (!dims)
        return std::nullopt;
      if (!out) {
        axis = normalized(attr("axis", 0), dims->size());
        if (!axis)
          return std::nullopt;
        out = std::move(dims);
        continue;
      }
      if (dims->size() != out->size())
        return std::nullopt;
      std::optional<std::int64_t> joined = sum((*out)[*axis], (*dims)[*axis]);
      if (!joined)
        return std::nullopt;
      (*out)[*axis] = *joined;
    }
    return out;
  }

  std::optional<Dims> unsqueeze() const {
    std::optional<Dims> data = in(0);
    std::optional<Dims> axes = axesFrom("axes", 1, 13);
    if (!data || !axes || axes->empty())
      return std::nullopt;
    const std::size_t rank = data->size() + axes->size();
    std::vector<bool> inserted(rank, false);
    for (std::int64_t a : *axes) {
      std::optional<std::size_t> axis = normalized(a, rank);
      if (!axis || inserted[*axis])
        return std::nullopt;
      inserted[*axis] = true;
    }
    Dims out;
    std::size_t next = 0;
    for (std::size_t k = 0; k < rank; ++k)
      out.push_back(inserted[k] ? 1 : (*data)[next++]);
    return out;
  }

  std::optional<Dims> squeeze() const {
    std::optional<Dims> data = in(0);
    std::optional<Dims> axes = axesFrom("axes", 1, 13);
    if (!data || !axes)
      return std::nullopt;
    std::vector<bool> dropped(data->size(), false);
    for (std::size_t k = 0; k < data->size(); ++k)
      dropped[k] = axes->empty() && (*data)[k] == 1;
    for (std::int64_t a : *axes) {
      std::optional<std::size_t> axis = normalized(a, data->size());
      if (!axis || (*data)[*axis] != 1)
        return std::nullopt;
      dropped[*axis] = true;
    }
    Dims out;
    for (std::size_t k = 0; k < data->size(); ++k)
      if (!dropped[k])
        out.push_back((*data)[k]);
    return out;
  }

  std::optional<Dims> expand() const {
    std::optional<Dims> data = in(0);
    const Constant* shape = ints(1);
    if (!data || !shape || !isStatic(shape->ints))
      return std::nullopt;
    return broadcast({*data, shape->ints});
  }

  std::optional<Dims> gather() const {
    std::optional<Dims> data = in(0), indices = in(1);
    if (!data || !indices)
      return std::nullopt;
    std::optional<std::size_t> axis = normalized(attr("axis", 0), data->size());
    if (!axis)
      return std::nullopt;
    Dims out(data->begin(), data->begin() + static_cast<std::ptrdiff_t>(*axis));
    out.insert(out.end(), indices->begin(), indices->end());
    out.insert(out.end(), data->begin() + static_cast<std::ptrdiff_t>(*axis) + 1, data->end());
    return out;
  }

  std::optional<Dims> flatten() const {
    std::optional<Dims> data = in(0);
    if (!data)
      return std::nullopt;
    const std::int64_t a = attr("axis", 1), rank = static_cast<std::int64_t>(data->size());
    if (a < -rank || a > rank)
      return std::nullopt;
    const auto axis = static_cast<std::size_t>(a < 0 ? a + rank : a);
    std::optional<std::int64_t> outer = product(*data, 0, axis), inner = product(*data, axis);
    if (!outer || !inner)
      return std::nullopt;
    return Dims{*outer, *inner};
  }

  std::optional<Dims> reduce() const {
    std::optional<Dims> data = in(0);
    // Axes as an input: ReduceSum from opset 13, the others from 18.
    const std::int64_t inputFrom = g_.opType(node_) == "ReduceSum" ? 13 : 18;
    std::optional<Dims> axes = axesFrom("axes", 1, inputFrom);
    if (!data || !axes)
      return std::nullopt;
    const bool keep = attr("keepdims", 1) != 0;
    if (axes->empty()) {
      if (opset_ >= inputFrom && attr("noop_with_empty_axes", 0) != 0)
        return data;
      axes->resize(data->size());
      std::iota(axes->begin(), axes->end(), 0);
    }
    std::vector<bool> reduced(data->size(), false);
    for (std::int64_t a : *axes) {
      std::optional<std::size_t> axis = normalized(a, data->size());
      if (!axis)
        return std::nullopt;
      reduced[*axis] = true;
    }
    Dims out;
    for (std::size_t k = 0; k < data->size(); ++k)
      if (!reduced[k])
        out.push_back((*data)[k]);
      else if (keep)
        out.push_back(1);
    return out;
  }

  const ir::Graph& g_;
  NodeId node_;
  std::int64_t opset_;
  const DimsSources& sources_;
  std::span<const ValueId> inputs_;
};
} // namespace

std::optional<std::vector<ir::Dim>> typedDims(const ir::Graph& graph, ir::ValueId value,
                                              std::span<const ir::ValueType> types) {
  if (index(value) < types.size() && types[index(value)].shape.rankKnown)
    return types[index(value)].shape.dims;
  if (!graph.rankKnown(value))
    return std::nullopt;
  std::vector<ir::Dim> dims;
  for (const ir::DimEntry& dim : graph.dims(value))
    dims.push_back({dim.extent, dim.symbol ? std::string(graph.symbolName(dim.symbol)) : std::string()});
  return dims;
}

std::pair<std::int64_t, std::int64_t> shapeNodeRange(const ir::Graph& graph, ir::NodeId shapeNode, std::int64_t rank) {
  std::int64_t start = 0, end = rank;
  if (const ir::Attribute* a = graph.findAttribute(shapeNode, "start"))
    start = a->intValue;
  if (const ir::Attribute* a = graph.findAttribute(shapeNode, "end"))
    end = a->intValue;
  start = std::clamp(start < 0 ? start + rank : start, std::int64_t{0}, rank);
  end = std::clamp(end < 0 ? end + rank : end, start, rank);
  return {start, end};
}

std::optional<std::vector<std::int64_t>> staticOutputDims(const ir::Graph& graph, ir::NodeId node, std::int64_t opset,
                                                          const DimsSources& sources) {
  const std::string_view domain = graph.opDomain(node);
  if (graph.kind(node) != ir::NodeKind::Op || !(domain.empty() || domain == "ai.onnx"))
    return std::nullopt;
  std::optional<Dims> dims = DimsOfNode(graph, node, opset, sources).compute();
  if (!dims || !isStatic(*dims) || !product(*dims)) // a size no tensor can have is not learned
    return std::nullopt;
  return dims;
}

} // namespace cleave::simplify
