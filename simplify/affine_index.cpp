#include "simplify/affine_index.h"

#include <algorithm>

namespace cleave::simplify {

namespace {
using ir::NodeId;
using ir::ValueId;

// Deep enough for Range -> Mul -> Unsqueeze -> Add chains of a rank-6 view; bounds the recursion.
constexpr int kMaxDepth = 32;

const Constant* scalarInt(const KnownConstant& known, ValueId value) {
  const Constant* c = value == ir::kNoValue ? nullptr : known(value);
  return c && !c->floating() && c->numel() == 1 ? c : nullptr;
}

// A known integer constant, when affine in its positions.
std::optional<AffineIndex> ofConstant(const Constant& c) {
  if (c.floating() || c.numel() == 0)
    return std::nullopt;
  AffineIndex index;
  index.offset = c.ints[0];
  std::vector<std::int64_t> rowStrides(c.dims.size(), 1);
  for (std::size_t k = c.dims.size(); k-- > 1;)
    rowStrides[k - 1] = rowStrides[k] * c.dims[k];
  for (std::size_t k = 0; k < c.dims.size(); ++k) {
    index.dims.push_back({c.dims[k], 0});
    index.strides.push_back(c.dims[k] > 1 ? c.ints[static_cast<std::size_t>(rowStrides[k])] - index.offset : 0);
  }
  std::vector<std::int64_t> at(c.dims.size(), 0);
  for (std::size_t e = 0; e < c.ints.size(); ++e) {
    std::int64_t expected = index.offset;
    for (std::size_t k = 0; k < at.size(); ++k)
      expected += index.strides[k] * at[k];
    if (c.ints[e] != expected)
      return std::nullopt;
    for (std::size_t k = at.size(); k-- > 0;) {
      if (++at[k] < c.dims[k])
        break;
      at[k] = 0;
    }
  }
  return index;
}

// The extent a scalar holds when it is one dim of a value: Squeeze(Shape(v)[j:j+1]) or
// Gather(Shape(v), j).
std::optional<IndexExtent> dimOfValue(const ir::Graph& graph, ValueId scalar, const KnownConstant& known) {
  const NodeId producer = graph.producer(scalar);
  if (graph.kind(producer) != ir::NodeKind::Op)
    return std::nullopt;
  const std::string_view type = graph.opType(producer);
  std::span<const ValueId> inputs = graph.inputs(producer);
  if (inputs.empty() || inputs[0] == ir::kNoValue)
    return std::nullopt;
  const NodeId shapeNode = graph.producer(inputs[0]);
  if (graph.kind(shapeNode) != ir::NodeKind::Op || graph.opType(shapeNode) != "Shape")
    return std::nullopt;
  const ValueId shaped = graph.inputs(shapeNode)[0];
  if (!graph.rankKnown(shaped))
    return std::nullopt;
  const auto rank = static_cast<std::int64_t>(graph.dims(shaped).size());
  const ir::Attribute* startAttribute = graph.findAttribute(shapeNode, "start");
  const ir::Attribute* endAttribute = graph.findAttribute(shapeNode, "end");
  auto clamp = [&](std::int64_t at) { return std::clamp(at < 0 ? at + rank : at, std::int64_t{0}, rank); };
  const std::int64_t start = clamp(startAttribute ? startAttribute->intValue : 0);
  const std::int64_t end = clamp(endAttribute ? endAttribute->intValue : rank);
  std::int64_t dim = -1;
  if (type == "Squeeze" && end - start == 1)
    dim = start;
  else if (type == "Gather" && inputs.size() == 2)
    if (const Constant* at = scalarInt(known, inputs[1]); at && at->dims.empty())
      dim = start + (at->ints[0] < 0 ? at->ints[0] + (end - start) : at->ints[0]);
  if (dim < start || dim >= end)
    return std::nullopt;
  const ir::DimEntry entry = graph.dims(shaped)[static_cast<std::size_t>(dim)];
  if (entry.extent >= 0)
    return IndexExtent{entry.extent, 0};
  if (entry.symbol == 0)
    return std::nullopt;
  return IndexExtent{-1, entry.symbol};
}

std::optional<AffineIndex> ofRange(const ir::Graph& graph, std::span<const ValueId> inputs, const KnownConstant& known) {
  const Constant* start = inputs.size() == 3 ? scalarInt(known, inputs[0]) : nullptr;
  const Constant* delta = inputs.size() == 3 ? scalarInt(known, inputs[2]) : nullptr;
  if (!start || !delta || delta->ints[0] == 0)
    return std::nullopt;
  AffineIndex index{{}, {delta->ints[0]}, start->ints[0]};
  if (const Constant* limit = scalarInt(known, inputs[1])) {
    const std::int64_t span = limit->ints[0] - start->ints[0], step = delta->ints[0];
    index.dims.push_back({std::max<std::int64_t>(0, (span + step + (step > 0 ? -1 : 1)) / step), 0});
  } else if (start->ints[0] == 0 && delta->ints[0] == 1) {
    std::optional<IndexExtent> extent = dimOfValue(graph, inputs[1], known);
    if (!extent)
      return std::nullopt;
    index.dims.push_back(*extent);
  } else {
    return std::nullopt;
  }
  if (index.dims[0].extent == 1)
    index.strides[0] = 0;
  return index;
}

// a + b, numpy-broadcast: a symbolic dim meets only itself or an extent of 1.
std::optional<AffineIndex> added(AffineIndex a, AffineIndex b) {
  const std::size_t rank = std::max(a.dims.size(), b.dims.size());
  auto pad = [rank](AffineIndex& x) {
    x.dims.insert(x.dims.begin(), rank - x.dims.size(), IndexExtent{1, 0});
    x.strides.insert(x.strides.begin(), rank - x.strides.size(), 0);
  };
  pad(a);
  pad(b);
  AffineIndex sum{{}, {}, a.offset + b.offset};
  for (std::size_t k = 0; k < rank; ++k) {
    const IndexExtent one{1, 0};
    if (a.dims[k] != one && b.dims[k] != one && a.dims[k] != b.dims[k])
      return std::nullopt;
    sum.dims.push_back(a.dims[k] == one ? b.dims[k] : a.dims[k]);
    sum.strides.push_back(sum.dims[k] == one ? 0 : a.strides[k] + b.strides[k]);
  }
  return sum;
}

std::optional<AffineIndex> unsqueezed(const ir::Graph& graph, NodeId node, AffineIndex index, const KnownConstant& known) {
  std::span<const ValueId> inputs = graph.inputs(node);
  std::vector<std::int64_t> axes;
  if (inputs.size() == 2) {
    const Constant* given = inputs[1] == ir::kNoValue ? nullptr : known(inputs[1]);
    if (!given || given->floating())
      return std::nullopt;
    axes = given->ints;
  } else if (const ir::Attribute* attribute = graph.findAttribute(node, "axes")) {
    axes = attribute->ints;
  }
  const auto rank = static_cast<std::int64_t>(index.dims.size() + axes.size());
  for (std::int64_t& axis : axes)
    axis = axis < 0 ? axis + rank : axis;
  std::sort(axes.begin(), axes.end());
  for (std::int64_t axis : axes) {
    if (axis < 0 || axis > static_cast<std::int64_t>(index.dims.size()))
      return std::nullopt;
    index.dims.insert(index.dims.begin() + axis, IndexExtent{1, 0});
    index.strides.insert(index.strides.begin() + axis, 0);
  }
  return index;
}

std::optional<AffineIndex> recognize(const ir::Graph& graph, ValueId value, const KnownConstant& known, int depth) {
  if (const Constant* c = known(value))
    return ofConstant(*c);
  const NodeId node = graph.producer(value);
  if (depth > kMaxDepth || graph.kind(node) != ir::NodeKind::Op || graph.outputs(node).size() != 1 ||
      !(graph.opDomain(node).empty() || graph.opDomain(node) == "ai.onnx"))
    return std::nullopt;
  const std::string_view type = graph.opType(node);
  std::span<const ValueId> inputs = graph.inputs(node);
  if (type == "Range")
    return ofRange(graph, inputs, known);
  if (inputs.empty() || inputs[0] == ir::kNoValue)
    return std::nullopt;
  if (type == "Unsqueeze") {
    std::optional<AffineIndex> inner = recognize(graph, inputs[0], known, depth + 1);
    return inner ? unsqueezed(graph, node, std::move(*inner), known) : std::nullopt;
  }
  if (inputs.size() != 2 || inputs[1] == ir::kNoValue)
    return std::nullopt;
  if (type == "Add") {
    std::optional<AffineIndex> a = recognize(graph, inputs[0], known, depth + 1);
    std::optional<AffineIndex> b = a ? recognize(graph, inputs[1], known, depth + 1) : std::nullopt;
    return b ? added(std::move(*a), std::move(*b)) : std::nullopt;
  }
  if (type == "Mul") {
    for (std::size_t side : {0u, 1u}) {
      const Constant* factor = scalarInt(known, inputs[1 - side]);
      if (!factor)
        continue;
      std::optional<AffineIndex> scaled = recognize(graph, inputs[side], known, depth + 1);
      if (!scaled || factor->dims.size() > scaled->dims.size())
        return std::nullopt; // a [1] factor would add a dim to a scalar
      for (std::int64_t& stride : scaled->strides)
        stride *= factor->ints[0];
      scaled->offset *= factor->ints[0];
      return scaled;
    }
  }
  return std::nullopt;
}
} // namespace

std::optional<AffineIndex> affineIndexOf(const ir::Graph& graph, ir::ValueId value, const KnownConstant& known) {
  return recognize(graph, value, known, 0);
}

bool enumeratesInOrder(const AffineIndex& index) {
  if (index.offset != 0)
    return false;
  std::int64_t expected = 1;
  for (std::size_t k = index.dims.size(); k-- > 0;) {
    const IndexExtent& dim = index.dims[k];
    if (dim == IndexExtent{1, 0})
      continue;
    if (index.strides[k] != expected)
      return false;
    if (dim.extent < 0) { // symbolic: only the outermost dim that is not 1
      for (std::size_t outer = 0; outer < k; ++outer)
        if (index.dims[outer] != IndexExtent{1, 0})
          return false;
      return true;
    }
    expected *= dim.extent;
  }
  return true;
}

SymbolicCount countOf(const std::vector<IndexExtent>& dims) {
  SymbolicCount count;
  for (const IndexExtent& dim : dims) {
    if (dim.extent >= 0)
      count.product *= dim.extent;
    else
      count.symbols.push_back(dim.symbol);
  }
  std::sort(count.symbols.begin(), count.symbols.end());
  return count;
}

} // namespace cleave::simplify
