#include "simplify/constant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <utility>

#include "io/onnx.h"

namespace cleave::simplify {
namespace {
using ir::DType;
using Dims = std::vector<std::int64_t>;
using Result = std::optional<std::vector<Constant>>;

std::int64_t product(const Dims& dims) {
  std::int64_t n = 1;
  for (std::int64_t d : dims)
    n *= d;
  return n;
}

const ir::Attribute* findAttribute(std::span<const ir::Attribute> attributes, std::string_view name) {
  for (const ir::Attribute& attribute : attributes)
    if (attribute.name == name)
      return &attribute;
  return nullptr;
}

std::int64_t intAttribute(std::span<const ir::Attribute> attributes, std::string_view name, std::int64_t fallback) {
  const ir::Attribute* attribute = findAttribute(attributes, name);
  return attribute ? attribute->intValue : fallback;
}

bool integral(DType dtype) {
  switch (dtype) {
  case DType::U8: case DType::I8: case DType::U16: case DType::I16: case DType::I32: case DType::I64:
  case DType::U32: case DType::U64: case DType::Bool: return true;
  default: return false;
  }
}

// A value as the dtype holds it: integers wrap to the dtype's width, F32 rounds to float.
std::int64_t wrapInt(DType dtype, std::int64_t v) {
  switch (dtype) {
  case DType::U8: return static_cast<std::uint8_t>(v);
  case DType::I8: return static_cast<std::int8_t>(v);
  case DType::U16: return static_cast<std::uint16_t>(v);
  case DType::I16: return static_cast<std::int16_t>(v);
  case DType::I32: return static_cast<std::int32_t>(v);
  case DType::U32: return static_cast<std::uint32_t>(v);
  case DType::Bool: return v != 0;
  default: return v;
  }
}
double roundReal(DType dtype, double v) { return dtype == DType::F32 ? static_cast<double>(static_cast<float>(v)) : v; }

Constant scalarLike(DType dtype, Dims dims) {
  Constant c;
  c.dtype = dtype;
  c.dims = std::move(dims);
  return c;
}

// The element of `c` at flat index i of a tensor of `dims` broadcast from c's dims (numpy rules).
std::size_t broadcastIndex(const Dims& from, const Dims& to, std::int64_t flat) {
  std::size_t index = 0, stride = 1;
  for (std::size_t k = 0; k < to.size(); ++k) {
    const std::size_t axis = to.size() - 1 - k;
    const std::int64_t coordinate = flat % to[axis];
    flat /= to[axis];
    if (k < from.size()) {
      const std::int64_t extent = from[from.size() - 1 - k];
      if (extent != 1)
        index += static_cast<std::size_t>(coordinate) * stride;
      stride *= static_cast<std::size_t>(extent);
    }
  }
  return index;
}

std::optional<Dims> broadcastDims(const std::vector<const Constant*>& operands) {
  Dims out;
  for (const Constant* c : operands) {
    if (c->dims.size() > out.size())
      out.insert(out.begin(), c->dims.size() - out.size(), 1);
    for (std::size_t k = 0; k < c->dims.size(); ++k) {
      std::int64_t& o = out[out.size() - 1 - k];
      const std::int64_t d = c->dims[c->dims.size() - 1 - k];
      if (o == 1)
        o = d;
      else if (d != 1 && d != o)
        return std::nullopt;
    }
  }
  return out;
}

// Element-wise over broadcast operands: ints(a, b) for integral ones, reals(a, b) for floating
// ones (either may refuse: nullopt), the result in `dtype` (the first operand's when Undefined).
using IntOp = std::function<std::optional<std::int64_t>(std::int64_t, std::int64_t)>;
using RealOp = std::function<std::optional<double>(double, double)>;
Result elementwise(const std::vector<const Constant*>& in, DType dtype, const IntOp& ints, const RealOp& reals,
                   std::int64_t maxElements) {
  std::optional<Dims> dims = broadcastDims(in);
  if (!dims || product(*dims) > maxElements)
    return std::nullopt;
  const bool floating = in[0]->floating();
  Constant out = scalarLike(dtype == DType::Undefined ? in[0]->dtype : dtype, *dims);
  const std::int64_t n = product(*dims);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::size_t a = broadcastIndex(in[0]->dims, *dims, i), b = broadcastIndex(in[1]->dims, *dims, i);
    if (floating) {
      if (!reals)
        return std::nullopt;
      std::optional<double> v = reals(in[0]->reals[a], in[1]->reals[b]);
      if (!v)
        return std::nullopt;
      if (out.floating())
        out.reals.push_back(roundReal(out.dtype, *v));
      else
        out.ints.push_back(static_cast<std::int64_t>(*v));
    } else {
      if (!ints)
        return std::nullopt;
      std::optional<std::int64_t> v = ints(in[0]->ints[a], in[1]->ints[b]);
      if (!v)
        return std::nullopt;
      out.ints.push_back(wrapInt(out.dtype, *v));
    }
  }
  return std::vector<Constant>{std::move(out)};
}

Result unary(const Constant& x, const std::function<std::optional<std::int64_t>(std::int64_t)>& ints,
             const std::function<std::optional<double>(double)>& reals) {
  Constant out = scalarLike(x.dtype, x.dims);
  if (x.floating()) {
    if (!reals)
      return std::nullopt;
    for (double v : x.reals) {
      std::optional<double> r = reals(v);
      if (!r)
        return std::nullopt;
      out.reals.push_back(roundReal(x.dtype, *r));
    }
  } else {
    if (!ints)
      return std::nullopt;
    for (std::int64_t v : x.ints) {
      std::optional<std::int64_t> r = ints(v);
      if (!r)
        return std::nullopt;
      out.ints.push_back(wrapInt(x.dtype, *r));
    }
  }
  return std::vector<Constant>{std::move(out)};
}

Result binaryArithmetic(std::string_view op, const std::vector<const Constant*>& in, std::int64_t maxElements) {
  if (in.size() != 2 || !in[0] || !in[1] || in[0]->floating() != in[1]->floating())
    return std::nullopt;
  if (op == "Add")
    return elementwise(in, DType::Undefined, [](auto a, auto b) { return std::optional(a + b); },
                       [](double a, double b) { return std::optional(a + b); }, maxElements);
  if (op == "Sub")
    return elementwise(in, DType::Undefined, [](auto a, auto b) { return std::optional(a - b); },
                       [](double a, double b) { return std::optional(a - b); }, maxElements);
  if (op == "Mul")
    return elementwise(in, DType::Undefined, [](auto a, auto b) { return std::optional(a * b); },
                       [](double a, double b) { return std::optional(a * b); }, maxElements);
  if (op == "Div") // integers truncate toward zero (ONNX Runtime's); never fold a division by zero
    return elementwise(in, DType::Undefined,
                       [](std::int64_t a, std::int64_t b) { return b == 0 ? std::nullopt : std::optional(a / b); },
                       [](double a, double b) { return b == 0.0 ? std::nullopt : std::optional(a / b); }, maxElements);
  if (op == "Mod") // fmod=0 (the default): the sign of the divisor, as Python's %
    return elementwise(in, DType::Undefined,
                       [](std::int64_t a, std::int64_t b) -> std::optional<std::int64_t> {
                         if (b == 0)
                           return std::nullopt;
                         std::int64_t r = a % b;
                         return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
                       },
                       nullptr, maxElements);
  if (op == "Max" || op == "Min") {
    const bool max = op == "Max";
    return elementwise(in, DType::Undefined,
                       [max](std::int64_t a, std::int64_t b) { return std::optional(max ? std::max(a, b) : std::min(a, b)); },
                       [max](double a, double b) { return std::optional(max ? std::max(a, b) : std::min(a, b)); },
                       maxElements);
  }
  return std::nullopt;
}

Result comparison(std::string_view op, const std::vector<const Constant*>& in, std::int64_t maxElements) {
  if (in.size() != 2 || !in[0] || !in[1] || in[0]->floating() != in[1]->floating())
    return std::nullopt;
  std::function<bool(double, double)> test;
  if (op == "Equal")
    test = [](double a, double b) { return a == b; };
  else if (op == "Less")
    test = [](double a, double b) { return a < b; };
  else if (op == "Greater")
    test = [](double a, double b) { return a > b; };
  else if (op == "LessOrEqual")
    test = [](double a, double b) { return a <= b; };
  else if (op == "GreaterOrEqual")
    test = [](double a, double b) { return a >= b; };
  else if (op == "And")
    test = [](double a, double b) { return a != 0 && b != 0; };
  else if (op == "Or")
    test = [](double a, double b) { return a != 0 || b != 0; };
  else if (op == "Xor")
    test = [](double a, double b) { return (a != 0) != (b != 0); };
  else
    return std::nullopt;
  return elementwise(
      in, DType::Bool,
      [&](std::int64_t a, std::int64_t b) {
        // Integers compared exactly (int64 beyond 2^53 would not be as doubles).
        if (op == "Equal")
          return std::optional<std::int64_t>(a == b);
        if (op == "Less")
          return std::optional<std::int64_t>(a < b);
        if (op == "Greater")
          return std::optional<std::int64_t>(a > b);
        if (op == "LessOrEqual")
          return std::optional<std::int64_t>(a <= b);
        if (op == "GreaterOrEqual")
          return std::optional<std::int64_t>(a >= b);
        return std::optional<std::int64_t>(test(static_cast<double>(a), static_cast<double>(b)));
      },
      [&](double a, double b) { return std::optional<double>(test(a, b)); }, maxElements);
}

Result cast(const Constant& x, std::span<const ir::Attribute> attributes) {
  std::optional<DType> to = ir::dtypeFromOnnx(static_cast<int>(intAttribute(attributes, "to", 0)));
  if (!to || !holdsDType(*to))
    return std::nullopt;
  Constant out = scalarLike(*to, x.dims);
  const bool toFloating = out.floating();
  for (std::size_t i = 0; i < static_cast<std::size_t>(x.numel()); ++i) {
    if (x.floating()) {
      const double v = x.reals[i];
      if (toFloating)
        out.reals.push_back(roundReal(*to, v));
      else if (*to == DType::Bool)
        out.ints.push_back(v != 0.0);
      else if (!std::isfinite(v) || std::fabs(v) > 9.0e18) // beyond int64: not exact
        return std::nullopt;
      else
        out.ints.push_back(wrapInt(*to, static_cast<std::int64_t>(v))); // truncation, as C's cast
    } else {
      const std::int64_t v = x.ints[i];
      if (toFloating)
        out.reals.push_back(roundReal(*to, static_cast<double>(v)));
      else
        out.ints.push_back(wrapInt(*to, v));
    }
  }
  return std::vector<Constant>{std::move(out)};
}

std::optional<std::int64_t> normalizedAxis(std::int64_t axis, std::int64_t rank) {
  if (axis < -rank || axis >= rank)
    return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

// Axes from the attribute (before `inputFrom`) or from input 1.
std::optional<Dims> axesOf(const OpToFold& op, std::int64_t inputFrom, bool required) {
  if (op.opset < inputFrom) {
    const ir::Attribute* attribute = findAttribute(op.attributes, "axes");
    if (!attribute)
      return required ? std::nullopt : std::optional<Dims>(Dims{});
    return attribute->ints;
  }
  if (op.inputs.size() < 2 || !op.inputs[1])
    return required ? std::nullopt : std::optional<Dims>(Dims{});
  if (op.inputs[1]->floating())
    return std::nullopt;
  return op.inputs[1]->ints;
}

Result unsqueeze(const OpToFold& op) {
  const Constant& x = *op.inputs[0];
  std::optional<Dims> axes = axesOf(op, 13, true);
  if (!axes)
    return std::nullopt;
  const std::int64_t rank = static_cast<std::int64_t>(x.dims.size() + axes->size());
  std::vector<bool> inserted(static_cast<std::size_t>(rank), false);
  for (std::int64_t axis : *axes) {
    std::optional<std::int64_t> a = normalizedAxis(axis, rank);
    if (!a || inserted[static_cast<std::size_t>(*a)])
      return std::nullopt;
    inserted[static_cast<std::size_t>(*a)] = true;
  }
  Constant out = x;
  out.dims.clear();
  std::size_t next = 0;
  for (std::int64_t k = 0; k < rank; ++k)
    out.dims.push_back(inserted[static_cast<std::size_t>(k)] ? 1 : x.dims[next++]);
  return std::vector<Constant>{std::move(out)};
}

Result squeeze(const OpToFold& op) {
  const Constant& x = *op.inputs[0];
  std::optional<Dims> axes = axesOf(op, 13, false);
  if (!axes)
    return std::nullopt;
  const std::int64_t rank = static_cast<std::int64_t>(x.dims.size());
  std::vector<bool> removed(x.dims.size(), false);
  for (std::int64_t axis : *axes) {
    std::optional<std::int64_t> a = normalizedAxis(axis, rank);
    if (!a || x.dims[static_cast<std::size_t>(*a)] != 1)
      return std::nullopt;
    removed[static_cast<std::size_t>(*a)] = true;
  }
  Constant out = x;
  out.dims.clear();
  for (std::size_t k = 0; k < x.dims.size(); ++k)
    if (!(axes->empty() ? x.dims[k] == 1 : removed[k]))
      out.dims.push_back(x.dims[k]);
  return std::vector<Constant>{std::move(out)};
}

// Copies the elements of `from` at `indices` (flat) into a constant of `dims`.
Constant gathered(const Constant& from, Dims dims, const std::vector<std::size_t>& indices) {
  Constant out = scalarLike(from.dtype, std::move(dims));
  for (std::size_t i : indices) {
    if (from.floating())
      out.reals.push_back(from.reals[i]);
    else
      out.ints.push_back(from.ints[i]);
  }
  return out;
}

Dims stridesOf(const Dims& dims) {
  Dims strides(dims.size(), 1);
  for (std::size_t k = dims.size(); k-- > 1;)
    strides[k - 1] = strides[k] * dims[k];
  return strides;
}

Result concat(const OpToFold& op, std::int64_t maxElements) {
  const Constant* first = op.inputs.empty() ? nullptr : op.inputs[0];
  if (!first || first->dims.empty())
    return std::nullopt;
  const std::int64_t rank = static_cast<std::int64_t>(first->dims.size());
  std::optional<std::int64_t> axis = normalizedAxis(intAttribute(op.attributes, "axis", 0), rank);
  if (!axis)
    return std::nullopt;
  Dims dims = first->dims;
  dims[static_cast<std::size_t>(*axis)] = 0;
  for (const Constant* c : op.inputs) {
    if (!c || c->dims.size() != first->dims.size() || c->floating() != first->floating())
      return std::nullopt;
    for (std::size_t k = 0; k < dims.size(); ++k)
      if (static_cast<std::int64_t>(k) != *axis && c->dims[k] != first->dims[k])
        return std::nullopt;
    dims[static_cast<std::size_t>(*axis)] += c->dims[static_cast<std::size_t>(*axis)];
  }
  if (product(dims) > maxElements)
    return std::nullopt;
  // Rows: the product of the dims before the axis; each input contributes a block per row.
  std::int64_t rows = 1;
  for (std::int64_t k = 0; k < *axis; ++k)
    rows *= dims[static_cast<std::size_t>(k)];
  Constant out = scalarLike(first->dtype, dims);
  for (std::int64_t r = 0; r < rows; ++r)
    for (const Constant* c : op.inputs) {
      const std::int64_t block = c->numel() / std::max<std::int64_t>(rows, 1);
      for (std::int64_t i = r * block; i < (r + 1) * block; ++i) {
        if (c->floating())
          out.reals.push_back(c->reals[static_cast<std::size_t>(i)]);
        else
          out.ints.push_back(c->ints[static_cast<std::size_t>(i)]);
      }
    }
  return std::vector<Constant>{std::move(out)};
}

Result gather(const OpToFold& op, std::int64_t maxElements) {
  if (op.inputs.size() != 2 || !op.inputs[0] || !op.inputs[1] || op.inputs[1]->floating())
    return std::nullopt;
  const Constant& data = *op.inputs[0];
  const Constant& indices = *op.inputs[1];
  const std::int64_t rank = static_cast<std::int64_t>(data.dims.size());
  std::optional<std::int64_t> axis = rank == 0 ? std::nullopt : normalizedAxis(intAttribute(op.attributes, "axis", 0), rank);
  if (!axis)
    return std::nullopt;
  const std::size_t a = static_cast<std::size_t>(*axis);
  Dims dims(data.dims.begin(), data.dims.begin() + *axis);
  dims.insert(dims.end(), indices.dims.begin(), indices.dims.end());
  dims.insert(dims.end(), data.dims.begin() + *axis + 1, data.dims.end());
  if (product(dims) > maxElements)
    return std::nullopt;
  const Dims strides = stridesOf(data.dims);
  std::int64_t outer = 1;
  for (std::size_t k = 0; k < a; ++k)
    outer *= data.dims[k];
  const std::int64_t inner = strides[a];
  std::vector<std::size_t> picks;
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t index : indices.ints) {
      if (index < -data.dims[a] || index >= data.dims[a])
        return std::nullopt;
      const std::int64_t i = index < 0 ? index + data.dims[a] : index;
      for (std::int64_t k = 0; k < inner; ++k)
        picks.push_back(static_cast<std::size_t>(o * data.dims[a] * inner + i * inner + k));
    }
  return std::vector<Constant>{gathered(data, std::move(dims), picks)};
}

// Slice's bounds on one axis, as the spec clamps them.
struct SliceAxis {
  std::int64_t start = 0, end = 0, step = 1;
};
std::optional<SliceAxis> sliceAxis(std::int64_t start, std::int64_t end, std::int64_t step, std::int64_t dim) {
  if (step == 0)
    return std::nullopt;
  auto clamp = [](std::int64_t v, std::int64_t low, std::int64_t high) { return std::min(std::max(v, low), high); };
  if (start < 0)
    start = start < -dim ? -1 : start + dim; // -1: before the first, clamped below
  if (end < 0)
    end = end < -dim ? -1 : end + dim;
  if (step > 0)
    return SliceAxis{clamp(start, 0, dim), clamp(end, 0, dim), step};
  return SliceAxis{clamp(start, 0, dim - 1), clamp(end, -1, dim - 1), step};
}

Result slice(const OpToFold& op, std::int64_t maxElements) {
  const Constant& x = *op.inputs[0];
  Dims starts, ends, axes, steps;
  if (op.opset < 10) {
    const ir::Attribute* s = findAttribute(op.attributes, "starts");
    const ir::Attribute* e = findAttribute(op.attributes, "ends");
    const ir::Attribute* a = findAttribute(op.attributes, "axes");
    if (!s || !e)
      return std::nullopt;
    starts = s->ints, ends = e->ints;
    if (a)
      axes = a->ints;
  } else {
    for (std::size_t k = 1; k < op.inputs.size(); ++k)
      if (op.inputs[k] && op.inputs[k]->floating())
        return std::nullopt;
    if (op.inputs.size() < 3 || !op.inputs[1] || !op.inputs[2])
      return std::nullopt;
    starts = op.inputs[1]->ints, ends = op.inputs[2]->ints;
    if (op.inputs.size() > 3 && op.inputs[3])
      axes = op.inputs[3]->ints;
    if (op.inputs.size() > 4 && op.inputs[4])
      steps = op.inputs[4]->ints;
  }
  const std::int64_t rank = static_cast<std::int64_t>(x.dims.size());
  if (axes.empty())
    for (std::int64_t k = 0; k < static_cast<std::int64_t>(starts.size()); ++k)
      axes.push_back(k);
  if (steps.empty())
    steps.assign(starts.size(), 1);
  if (starts.size() != ends.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return std::nullopt;
  std::vector<SliceAxis> bounds;
  for (std::int64_t d : x.dims)
    bounds.push_back({0, d, 1});
  for (std::size_t k = 0; k < axes.size(); ++k) {
    std::optional<std::int64_t> axis = normalizedAxis(axes[k], rank);
    if (!axis)
      return std::nullopt;
    std::optional<SliceAxis> b = sliceAxis(starts[k], ends[k], steps[k], x.dims[static_cast<std::size_t>(*axis)]);
    if (!b)
      return std::nullopt;
    bounds[static_cast<std::size_t>(*axis)] = *b;
  }
  Dims dims;
  for (const SliceAxis& b : bounds) {
    const std::int64_t span = b.step > 0 ? b.end - b.start : b.start - b.end;
    const std::int64_t stride = b.step > 0 ? b.step : -b.step;
    dims.push_back(span <= 0 ? 0 : (span + stride - 1) / stride);
  }
  if (product(dims) > maxElements)
    return std::nullopt;
  const Dims strides = stridesOf(x.dims);
  std::vector<std::size_t> picks;
  const std::int64_t n = product(dims);
  for (std::int64_t flat = 0; flat < n; ++flat) {
    std::int64_t rest = flat, offset = 0;
    for (std::size_t k = dims.size(); k-- > 0;) {
      const std::int64_t coordinate = rest % dims[k];
      rest /= dims[k];
      offset += (bounds[k].start + coordinate * bounds[k].step) * strides[k];
    }
    picks.push_back(static_cast<std::size_t>(offset));
  }
  return std::vector<Constant>{gathered(x, std::move(dims), picks)};
}

// Transpose by `perm` (default: the dims reversed); a perm that is not a permutation of the dims
// does not fold.
Result transpose(const OpToFold& op) {
  const Constant& x = *op.inputs[0];
  const std::size_t rank = x.dims.size();
  Dims perm(rank);
  const ir::Attribute* given = findAttribute(op.attributes, "perm");
  for (std::size_t k = 0; k < rank; ++k)
    perm[k] = given ? (k < given->ints.size() ? given->ints[k] : -1) : static_cast<std::int64_t>(rank - 1 - k);
  if (given && given->ints.size() != rank)
    return std::nullopt;
  std::vector<bool> seen(rank, false);
  for (std::int64_t axis : perm) {
    if (axis < 0 || axis >= static_cast<std::int64_t>(rank) || seen[static_cast<std::size_t>(axis)])
      return std::nullopt;
    seen[static_cast<std::size_t>(axis)] = true;
  }
  Constant out = scalarLike(x.dtype, Dims(rank));
  for (std::size_t k = 0; k < rank; ++k)
    out.dims[k] = x.dims[static_cast<std::size_t>(perm[k])];
  Dims inStrides(rank, 1);
  for (std::size_t k = rank; k-- > 1;)
    inStrides[k - 1] = inStrides[k] * x.dims[k];
  const std::int64_t total = x.numel();
  Dims at(rank, 0); // the output's index, odometer order
  for (std::int64_t flat = 0; flat < total; ++flat) {
    std::int64_t from = 0;
    for (std::size_t k = 0; k < rank; ++k)
      from += at[k] * inStrides[static_cast<std::size_t>(perm[k])];
    if (x.floating())
      out.reals.push_back(x.reals[static_cast<std::size_t>(from)]);
    else
      out.ints.push_back(x.ints[static_cast<std::size_t>(from)]);
    for (std::size_t k = rank; k-- > 0;) {
      if (++at[k] < out.dims[k])
        break;
      at[k] = 0;
    }
  }
  return std::vector<Constant>{std::move(out)};
}

// ScatterND without reduction: `data` with the slices `indices` names replaced by `updates`;
// indices may count from the end; one out of range does not fold.
Result scatterND(const OpToFold& op, std::int64_t maxElements) {
  if (op.inputs.size() != 3 || !op.inputs[1] || !op.inputs[2] || op.inputs[1]->floating())
    return std::nullopt;
  if (const ir::Attribute* reduction = findAttribute(op.attributes, "reduction"); reduction && reduction->text != "none")
    return std::nullopt;
  const Constant &data = *op.inputs[0], &indices = *op.inputs[1], &updates = *op.inputs[2];
  if (indices.dims.empty() || updates.dtype != data.dtype || data.numel() > maxElements)
    return std::nullopt;
  const auto depth = static_cast<std::size_t>(indices.dims.back());
  if (depth == 0 || depth > data.dims.size())
    return std::nullopt;
  const std::int64_t slice = product(Dims(data.dims.begin() + static_cast<std::ptrdiff_t>(depth), data.dims.end()));
  const std::int64_t count = indices.numel() / static_cast<std::int64_t>(depth);
  if (updates.numel() != count * slice)
    return std::nullopt;
  Constant out = data;
  for (std::int64_t u = 0; u < count; ++u) {
    std::int64_t offset = 0;
    for (std::size_t j = 0; j < depth; ++j) {
      std::int64_t at = indices.ints[static_cast<std::size_t>(u) * depth + j];
      const std::int64_t extent = data.dims[j];
      at = at < 0 ? at + extent : at;
      if (at < 0 || at >= extent)
        return std::nullopt;
      offset = offset * extent + at;
    }
    offset *= slice;
    for (std::int64_t e = 0; e < slice; ++e) {
      const auto to = static_cast<std::size_t>(offset + e), from = static_cast<std::size_t>(u * slice + e);
      if (data.floating())
        out.reals[to] = updates.reals[from];
      else
        out.ints[to] = updates.ints[from];
    }
  }
  return std::vector<Constant>{std::move(out)};
}

Result reshape(const OpToFold& op) {
  if (op.inputs.size() != 2 || !op.inputs[0] || !op.inputs[1] || op.inputs[1]->floating())
    return std::nullopt;
  const Constant& x = *op.inputs[0];
  Dims dims = op.inputs[1]->ints;
  const bool allowZero = intAttribute(op.attributes, "allowzero", 0) != 0;
  std::int64_t known = 1, inferred = -1;
  for (std::size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] == 0 && !allowZero) {
      if (k >= x.dims.size())
        return std::nullopt;
      dims[k] = x.dims[k];
    }
    if (dims[k] == -1) {
      if (inferred >= 0)
        return std::nullopt;
      inferred = static_cast<std::int64_t>(k);
    } else if (dims[k] < 0) {
      return std::nullopt;
    } else {
      known *= dims[k];
    }
  }
  if (inferred >= 0) {
    if (known == 0 || x.numel() % known != 0)
      return std::nullopt;
    dims[static_cast<std::size_t>(inferred)] = x.numel() / known;
  }
  if (product(dims) != x.numel())
    return std::nullopt;
  Constant out = x;
  out.dims = std::move(dims);
  return std::vector<Constant>{std::move(out)};
}

Result range(const OpToFold& op, std::int64_t maxElements) {
  if (op.inputs.size() != 3 || !op.inputs[0] || !op.inputs[1] || !op.inputs[2])
    return std::nullopt;
  for (const Constant* c : op.inputs)
    if (c->numel() != 1)
      return std::nullopt;
  const Constant& start = *op.inputs[0];
  Constant out = scalarLike(start.dtype, {0});
  if (start.floating()) {
    const double s = start.reals[0], limit = op.inputs[1]->reals[0], delta = op.inputs[2]->reals[0];
    if (delta == 0.0)
      return std::nullopt;
    const double count = std::max(std::ceil((limit - s) / delta), 0.0);
    if (count > static_cast<double>(maxElements))
      return std::nullopt;
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(count); ++i)
      out.reals.push_back(roundReal(start.dtype, s + static_cast<double>(i) * delta));
  } else {
    const std::int64_t s = start.ints[0], limit = op.inputs[1]->ints[0], delta = op.inputs[2]->ints[0];
    if (delta == 0)
      return std::nullopt;
    const std::int64_t span = limit - s;
    const std::int64_t count = std::max<std::int64_t>((span + delta + (delta > 0 ? -1 : 1)) / delta, 0);
    if (count > maxElements)
      return std::nullopt;
    for (std::int64_t i = 0; i < count; ++i)
      out.ints.push_back(s + i * delta);
  }
  out.dims = {static_cast<std::int64_t>(out.floating() ? out.reals.size() : out.ints.size())};
  return std::vector<Constant>{std::move(out)};
}

// Broadcasts `x` to `dims` (Expand's and Where's rule).
Constant broadcastTo(const Constant& x, const Dims& dims) {
  std::vector<std::size_t> picks;
  for (std::int64_t i = 0; i < product(dims); ++i)
    picks.push_back(broadcastIndex(x.dims, dims, i));
  return gathered(x, dims, picks);
}

Result expand(const OpToFold& op, std::int64_t maxElements) {
  if (op.inputs.size() != 2 || !op.inputs[0] || !op.inputs[1] || op.inputs[1]->floating())
    return std::nullopt;
  Constant shape = scalarLike(DType::I64, {static_cast<std::int64_t>(op.inputs[1]->ints.size())});
  shape.dims = op.inputs[1]->ints; // a constant of those dims, for the broadcast rule
  std::optional<Dims> dims = broadcastDims({op.inputs[0], &shape});
  if (!dims || product(*dims) > maxElements)
    return std::nullopt;
  return std::vector<Constant>{broadcastTo(*op.inputs[0], *dims)};
}

Result where(const OpToFold& op, std::int64_t maxElements) {
  if (op.inputs.size() != 3 || !op.inputs[0] || !op.inputs[1] || !op.inputs[2] || op.inputs[0]->floating() ||
      op.inputs[1]->floating() != op.inputs[2]->floating())
    return std::nullopt;
  std::optional<Dims> dims = broadcastDims(op.inputs);
  if (!dims || product(*dims) > maxElements)
    return std::nullopt;
  const Constant condition = broadcastTo(*op.inputs[0], *dims);
  const Constant a = broadcastTo(*op.inputs[1], *dims), b = broadcastTo(*op.inputs[2], *dims);
  Constant out = scalarLike(a.dtype, *dims);
  for (std::size_t i = 0; i < condition.ints.size(); ++i) {
    if (a.floating())
      out.reals.push_back(condition.ints[i] ? a.reals[i] : b.reals[i]);
    else
      out.ints.push_back(condition.ints[i] ? a.ints[i] : b.ints[i]);
  }
  return std::vector<Constant>{std::move(out)};
}

// Trilu: the upper (default) or lower triangle of each matrix of the last two dims, from the
// diagonal k (input 1, default 0); the rest zeros (a causal mask made from a constant square).
Result trilu(const OpToFold& op) {
  const Constant& x = *op.inputs[0];
  if (x.dims.size() < 2 || op.inputs.size() > 2 || (op.inputs.size() == 2 && op.inputs[1] &&
                                                     (op.inputs[1]->floating() || op.inputs[1]->ints.size() != 1)))
    return std::nullopt;
  const std::int64_t k = op.inputs.size() == 2 && op.inputs[1] ? op.inputs[1]->ints[0] : 0;
  const bool upper = intAttribute(op.attributes, "upper", 1) != 0;
  const std::int64_t rows = x.dims[x.dims.size() - 2], columns = x.dims.back();
  Constant out = x;
  const std::size_t elements = static_cast<std::size_t>(x.numel());
  for (std::size_t e = 0; e < elements; ++e) {
    const std::int64_t within = static_cast<std::int64_t>(e) % (rows * columns);
    const std::int64_t diagonal = within % columns - within / columns; // j - i
    if (upper ? diagonal >= k : diagonal <= k)
      continue;
    if (out.floating())
      out.reals[e] = 0.0;
    else
      out.ints[e] = 0;
  }
  return std::vector<Constant>{std::move(out)};
}

Result constantOfShape(const OpToFold& op, std::int64_t maxElements) {
  if (op.inputs.size() != 1 || !op.inputs[0] || op.inputs[0]->floating())
    return std::nullopt;
  Constant fill = scalarLike(DType::F32, {}); // the default: float32 zeros
  fill.reals = {0.0};
  if (const ir::Attribute* value = findAttribute(op.attributes, "value")) {
    if (value->kind != ir::AttrKind::Tensor)
      return std::nullopt;
    Expected<io::TensorValue> tensor = io::decodeTensorAttribute(value->text, "ConstantOfShape's value");
    if (!tensor)
      return std::nullopt;
    std::optional<Constant> decoded = constantFromBytes(tensor->dtype, tensor->dims, tensor->bytes);
    if (!decoded || decoded->numel() != 1)
      return std::nullopt;
    fill = std::move(*decoded);
  }
  Dims dims = op.inputs[0]->ints;
  for (std::int64_t d : dims)
    if (d < 0)
      return std::nullopt;
  if (product(dims) > maxElements)
    return std::nullopt;
  Constant out = scalarLike(fill.dtype, dims);
  if (fill.floating())
    out.reals.assign(static_cast<std::size_t>(product(dims)), fill.reals[0]);
  else
    out.ints.assign(static_cast<std::size_t>(product(dims)), fill.ints[0]);
  return std::vector<Constant>{std::move(out)};
}

Result unaryOp(std::string_view type, const Constant& x) {
  if (type == "Identity")
    return std::vector<Constant>{x};
  if (type == "Neg")
    return unary(x, [](std::int64_t v) { return std::optional(-v); }, [](double v) { return std::optional(-v); });
  if (type == "Abs")
    return unary(x, [](std::int64_t v) { return std::optional(v < 0 ? -v : v); },
                 [](double v) { return std::optional(std::fabs(v)); });
  if (type == "Sign")
    return unary(x, [](std::int64_t v) { return std::optional<std::int64_t>((v > 0) - (v < 0)); },
                 [](double v) { return std::optional<double>((v > 0) - (v < 0)); });
  if (type == "Not" && x.dtype == DType::Bool)
    return unary(x, [](std::int64_t v) { return std::optional<std::int64_t>(v == 0); }, nullptr);
  if (type == "Floor")
    return unary(x, nullptr, [](double v) { return std::optional(std::floor(v)); });
  if (type == "Ceil")
    return unary(x, nullptr, [](double v) { return std::optional(std::ceil(v)); });
  if (type == "Sqrt")
    return unary(x, nullptr, [](double v) { return v < 0 ? std::nullopt : std::optional(std::sqrt(v)); });
  return std::nullopt;
}
} // namespace

std::int64_t Constant::numel() const { return product(dims); }

bool holdsDType(DType dtype) { return integral(dtype) || dtype == DType::F32 || dtype == DType::F64; }

std::string Constant::bytes() const {
  const int size = ir::dtypeSize(dtype);
  std::string out(static_cast<std::size_t>(numel() * size), '\0');
  for (std::size_t i = 0; i < static_cast<std::size_t>(numel()); ++i) {
    char* at = out.data() + i * static_cast<std::size_t>(size);
    if (dtype == DType::F32) {
      const float v = static_cast<float>(reals[i]);
      std::memcpy(at, &v, 4);
    } else if (dtype == DType::F64) {
      std::memcpy(at, &reals[i], 8);
    } else {
      const std::int64_t v = ints[i]; // little-endian: the low bytes first
      std::memcpy(at, &v, static_cast<std::size_t>(size));
    }
  }
  return out;
}

std::optional<Constant> constantFromBytes(DType dtype, std::vector<std::int64_t> dims, std::string_view bytes) {
  if (!holdsDType(dtype))
    return std::nullopt;
  Constant c = scalarLike(dtype, std::move(dims));
  const int size = ir::dtypeSize(dtype);
  if (c.numel() < 0 || static_cast<std::int64_t>(bytes.size()) != c.numel() * size)
    return std::nullopt;
  for (std::size_t i = 0; i < static_cast<std::size_t>(c.numel()); ++i) {
    const char* at = bytes.data() + i * static_cast<std::size_t>(size);
    if (dtype == DType::F32) {
      float v;
      std::memcpy(&v, at, 4);
      c.reals.push_back(v);
    } else if (dtype == DType::F64) {
      double v;
      std::memcpy(&v, at, 8);
      c.reals.push_back(v);
    } else {
      std::int64_t v = 0;
      std::memcpy(&v, at, static_cast<std::size_t>(size));
      c.ints.push_back(wrapInt(dtype, v)); // sign-extends the signed ones
    }
  }
  return c;
}

namespace {
using Evaluator = Result (*)(const OpToFold& op, std::int64_t maxElements);

Result evaluateCast(const OpToFold& op, std::int64_t) { return cast(*op.inputs[0], op.attributes); }
Result evaluateUnary(const OpToFold& op, std::int64_t) {
  return op.inputs.size() == 1 ? unaryOp(op.opType, *op.inputs[0]) : std::nullopt;
}
Result evaluateArithmetic(const OpToFold& op, std::int64_t maxElements) {
  if ((op.opType == "Max" || op.opType == "Min") && op.inputs.size() != 2)
    return std::nullopt;
  if (op.opType == "Mod" && intAttribute(op.attributes, "fmod", 0) != 0)
    return std::nullopt;
  return binaryArithmetic(op.opType, op.inputs, maxElements);
}
Result evaluateComparison(const OpToFold& op, std::int64_t maxElements) {
  return comparison(op.opType, op.inputs, maxElements);
}
Result evaluateUnsqueeze(const OpToFold& op, std::int64_t) { return unsqueeze(op); }
Result evaluateSqueeze(const OpToFold& op, std::int64_t) { return squeeze(op); }
Result evaluateReshape(const OpToFold& op, std::int64_t) { return reshape(op); }
Result evaluateTranspose(const OpToFold& op, std::int64_t) { return transpose(op); }
Result evaluateTrilu(const OpToFold& op, std::int64_t) { return trilu(op); }

// Every op evaluateOp folds, sorted by name: the one list (foldableOps() is derived from it).
constexpr std::array<std::pair<std::string_view, Evaluator>, 37> kEvaluators = {{
    {"Abs", evaluateUnary},          {"Add", evaluateArithmetic},       {"And", evaluateComparison},
    {"Cast", evaluateCast},          {"Ceil", evaluateUnary},           {"Concat", concat},
    {"ConstantOfShape", constantOfShape}, {"Div", evaluateArithmetic},  {"Equal", evaluateComparison},
    {"Expand", expand},              {"Floor", evaluateUnary},          {"Gather", gather},
    {"Greater", evaluateComparison}, {"GreaterOrEqual", evaluateComparison}, {"Identity", evaluateUnary},
    {"Less", evaluateComparison},    {"LessOrEqual", evaluateComparison}, {"Max", evaluateArithmetic},
    {"Min", evaluateArithmetic},     {"Mod", evaluateArithmetic},       {"Mul", evaluateArithmetic},
    {"Neg", evaluateUnary},          {"Not", evaluateUnary},            {"Or", evaluateComparison},
    {"Range", range},                {"Reshape", evaluateReshape},      {"ScatterND", scatterND},
    {"Sign", evaluateUnary},         {"Slice", slice},                  {"Sqrt", evaluateUnary},
    {"Squeeze", evaluateSqueeze},    {"Sub", evaluateArithmetic},       {"Transpose", evaluateTranspose},
    {"Trilu", evaluateTrilu},        {"Unsqueeze", evaluateUnsqueeze},  {"Where", where},
    {"Xor", evaluateComparison},
}};

static_assert(std::is_sorted(kEvaluators.begin(), kEvaluators.end(),
                             [](const auto& a, const auto& b) { return a.first < b.first; }),
              "kEvaluators is searched by name");

Evaluator evaluatorOf(std::string_view type) {
  auto at = std::lower_bound(kEvaluators.begin(), kEvaluators.end(), type,
                             [](const auto& entry, std::string_view name) { return entry.first < name; });
  return at != kEvaluators.end() && at->first == type ? at->second : nullptr;
}
} // namespace

std::span<const std::string_view> foldableOps() {
  // The evaluators' ops, and Shape and Size, which simplify/shape_folding.h folds from types.
  static const auto sorted = [] {
    std::array<std::string_view, kEvaluators.size() + 2> ops{};
    for (std::size_t k = 0; k < kEvaluators.size(); ++k)
      ops[k] = kEvaluators[k].first;
    ops[kEvaluators.size()] = "Shape";
    ops[kEvaluators.size() + 1] = "Size";
    std::sort(ops.begin(), ops.end());
    return ops;
  }();
  return sorted;
}

std::optional<std::vector<Constant>> evaluateOp(const OpToFold& op, std::int64_t maxElements) {
  if (op.outputs != 1 || op.inputs.empty() || !op.inputs[0])
    return std::nullopt;
  const Evaluator evaluate = evaluatorOf(op.opType);
  return evaluate ? evaluate(op, maxElements) : std::nullopt;
}

} // namespace cleave::simplify
