#include "simplify/symbolic_reshape.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <string>

#include "simplify/static_dims.h"

namespace cleave::simplify {

namespace {
using ir::NodeId;
using ir::ValueId;

// An element of an integer vector built from dims: a number, or the size a symbol names.
struct Element {
  std::int64_t number = 0;
  std::string symbol; // non-empty: the element is this symbol's size
};
using Elements = std::vector<Element>;

// The vectors that go into shapes are short; longer ones are not followed.
constexpr std::size_t kMaxElements = 64;

class SymbolicVectors {
public:
  SymbolicVectors(const ir::Graph& graph, std::span<const ir::ValueType> types)
      : graph_(graph), types_(types), vectors_(graph.numValues()) {}

  // `value`'s dims, each an extent, a symbol or neither; nullopt when its rank is unknown.
  std::optional<std::vector<ir::Dim>> dimsOf(ValueId value) const { return typedDims(graph_, value, types_); }

  const Elements* find(ValueId value) {
    if (value == ir::kNoValue)
      return nullptr;
    std::optional<Elements>& slot = vectors_[index(value)];
    if (!slot && graph_.kind(graph_.producer(value)) == ir::NodeKind::Parameter)
      slot = initializer(value);
    return slot ? &*slot : nullptr;
  }

  // Follows one op node: its output's elements, where its inputs' are known.
  void follow(NodeId node) {
    const std::string_view type = graph_.opType(node);
    std::span<const ValueId> inputs = graph_.inputs(node);
    if (graph_.outputs(node).size() != 1 || inputs.empty() || !(graph_.opDomain(node).empty() ||
                                                                graph_.opDomain(node) == "ai.onnx"))
      return;
    std::optional<Elements> out;
    if (type == "Shape")
      out = shapeOf(node);
    else if (type == "Gather")
      out = gathered(node);
    else if (type == "Concat")
      out = concatenated(node);
    else if (type == "Unsqueeze" || type == "Squeeze" || type == "Identity" ||
             (type == "Cast" && isInteger(graph_.dtype(graph_.outputs(node)[0]))))
      if (const Elements* in = find(inputs[0]))
        out = *in;
    if (out && out->size() <= kMaxElements)
      vectors_[index(graph_.outputs(node)[0])] = std::move(out);
  }

private:
  static bool isInteger(ir::DType dtype) { return dtype == ir::DType::I64 || dtype == ir::DType::I32; }

  std::optional<Elements> initializer(ValueId value) const {
    const ir::NodeId producer = graph_.producer(value);
    if (graph_.parameters(producer).empty())
      return std::nullopt;
    const ir::Parameter& param = graph_.parameter(graph_.parameters(producer)[0]);
    if (param.dtype != ir::DType::I64 || param.dims.size() > 1 || param.bytes > static_cast<std::int64_t>(8 * kMaxElements))
      return std::nullopt;
    Expected<std::string> bytes = graph_.readParameterData(graph_.parameters(producer)[0]);
    if (!bytes || bytes->size() % 8 != 0)
      return std::nullopt;
    Elements elements(bytes->size() / 8);
    for (std::size_t k = 0; k < elements.size(); ++k)
      std::memcpy(&elements[k].number, bytes->data() + 8 * k, 8);
    return elements;
  }

  std::optional<Elements> shapeOf(NodeId node) const {
    std::optional<std::vector<ir::Dim>> dims = dimsOf(graph_.inputs(node)[0]);
    if (!dims)
      return std::nullopt;
    const auto [start, end] = shapeNodeRange(graph_, node, static_cast<std::int64_t>(dims->size()));
    Elements out;
    for (std::int64_t k = start; k < end; ++k) {
      const ir::Dim& dim = (*dims)[static_cast<std::size_t>(k)];
      if (!dim.isKnown() && dim.symbol.empty())
        return std::nullopt;
      out.push_back({dim.extent, dim.isKnown() ? std::string() : dim.symbol});
    }
    return out;
  }

  std::optional<Elements> gathered(NodeId node) {
    std::span<const ValueId> inputs = graph_.inputs(node);
    const ir::Attribute* axis = graph_.findAttribute(node, "axis");
    const Elements* data = find(inputs[0]);
    const Elements* indices = inputs.size() == 2 ? find(inputs[1]) : nullptr;
    if (!data || !indices || (axis && axis->intValue != 0))
      return std::nullopt;
    Elements out;
    for (const Element& picked : *indices) {
      if (!picked.symbol.empty())
        return std::nullopt;
      const std::int64_t at = picked.number < 0 ? picked.number + static_cast<std::int64_t>(data->size()) : picked.number;
      if (at < 0 || at >= static_cast<std::int64_t>(data->size()))
        return std::nullopt;
      out.push_back((*data)[static_cast<std::size_t>(at)]);
    }
    return out;
  }

  std::optional<Elements> concatenated(NodeId node) {
    Elements out;
    for (ValueId input : graph_.inputs(node)) {
      const Elements* part = find(input);
      if (!part)
        return std::nullopt;
      out.insert(out.end(), part->begin(), part->end());
    }
    return out;
  }

  const ir::Graph& graph_;
  std::span<const ir::ValueType> types_;
  std::vector<std::optional<Elements>> vectors_;
};

// Reshape(data, target)'s output dims from the target's elements and the data's dims; nullopt
// when an element is out of the spec (below -1) or names a dim the data lacks.
std::optional<std::vector<ir::Dim>> reshapedDims(const std::vector<ir::Dim>& data, const Elements& target,
                                                 bool allowZero) {
  std::vector<ir::Dim> out;
  std::optional<std::size_t> inferred;
  for (std::size_t i = 0; i < target.size(); ++i) {
    const Element& element = target[i];
    if (!element.symbol.empty()) {
      out.push_back({-1, element.symbol});
    } else if (element.number == 0 && !allowZero) {
      if (i >= data.size())
        return std::nullopt;
      out.push_back(data[i]);
    } else if (element.number == -1 && !inferred) {
      inferred = i;
      out.push_back({});
    } else if (element.number >= 0) {
      out.push_back({element.number, {}});
    } else {
      return std::nullopt;
    }
  }
  if (!inferred)
    return out;
  // -1: the data's elements over the others', where the symbols cancel and the numbers divide.
  std::map<std::string, int> symbols;
  std::int64_t numbers = 1, others = 1;
  for (const ir::Dim& dim : data) {
    if (!dim.isKnown() && dim.symbol.empty())
      return out; // an unnamed unknown: -1 stays unknown
    if (!dim.isKnown())
      ++symbols[dim.symbol];
    else if (__builtin_mul_overflow(numbers, dim.extent, &numbers))
      return out;
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (i == *inferred)
      continue;
    const bool unmatched = !out[i].isKnown() && (out[i].symbol.empty() || --symbols[out[i].symbol] < 0);
    if (unmatched || (out[i].isKnown() && __builtin_mul_overflow(others, out[i].extent, &others)))
      return out;
  }
  const bool cancels = std::all_of(symbols.begin(), symbols.end(), [](const auto& entry) { return entry.second == 0; });
  if (cancels && others > 0 && numbers % others == 0)
    out[*inferred].extent = numbers / others;
  return out;
}

// Whether `better` says more than `known` (nullopt: the rank is unknown).
bool saysMore(const std::optional<std::vector<ir::Dim>>& known, const std::vector<ir::Dim>& better) {
  if (!known)
    return true;
  if (known->size() != better.size())
    return false; // the types disagree: not ours to settle
  for (std::size_t i = 0; i < better.size(); ++i)
    if ((!(*known)[i].isKnown() && better[i].isKnown()) ||
        (!(*known)[i].isKnown() && (*known)[i].symbol.empty() && !better[i].symbol.empty()))
      return true;
  return false;
}
} // namespace

std::vector<std::pair<ir::ValueId, ir::ValueType>> reshapeTypesFromSymbols(const ir::Graph& graph,
                                                                           std::span<const ir::ValueType> types) {
  SymbolicVectors vectors(graph, types);
  std::vector<std::pair<ir::ValueId, ir::ValueType>> refined;
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    const NodeId node{n};
    if (graph.kind(node) != ir::NodeKind::Op)
      continue;
    vectors.follow(node);
    std::span<const ValueId> inputs = graph.inputs(node);
    if (graph.opType(node) != "Reshape" || inputs.size() != 2 || graph.outputs(node).size() != 1 ||
        !(graph.opDomain(node).empty() || graph.opDomain(node) == "ai.onnx"))
      continue;
    const Elements* target = vectors.find(inputs[1]);
    std::optional<std::vector<ir::Dim>> data = vectors.dimsOf(inputs[0]);
    if (!target || !data)
      continue;
    const ir::Attribute* allowZero = graph.findAttribute(node, "allowzero");
    std::optional<std::vector<ir::Dim>> dims = reshapedDims(*data, *target, allowZero && allowZero->intValue != 0);
    const ValueId output = graph.outputs(node)[0];
    if (!dims || !saysMore(vectors.dimsOf(output), *dims))
      continue;
    ir::ValueType type = ir::ValueType::tensor(graph.dtype(inputs[0]), {});
    type.shape.dims = std::move(*dims);
    refined.emplace_back(output, std::move(type));
  }
  return refined;
}

} // namespace cleave::simplify
