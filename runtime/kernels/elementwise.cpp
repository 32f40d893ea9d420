// runtime/kernels/elementwise.cpp - element-wise ONNX ops on ATen: unary math and activations,
// broadcasting binary ops (numpy rules, as ATen's), comparisons and logic, variadic Sum/Mean/
// Max/Min, Where, Cast/CastLike, Clip.
#include "runtime/engine/forward_replay.h"
#include "runtime/kernels/helpers.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

template <at::Tensor (*Fn)(const at::Tensor&)> Outputs unary(KernelContext& c) { return {Fn(c.input(0))}; }

at::Tensor onnxDivide(const at::Tensor& a, const at::Tensor& b) {
  if (at::isIntegralType(a.scalar_type(), true) && at::isIntegralType(b.scalar_type(), true))
    return at::div(a, b, "trunc"); // ONNX integer division truncates toward zero
  return at::div(a, b);
}

Outputs variadic(KernelContext& c, at::Tensor (*combine)(const at::Tensor&, const at::Tensor&)) {
  at::Tensor result = c.input(0);
  for (std::size_t i = 1; i < c.numInputs(); ++i)
    result = combine(result, c.input(i));
  return {result};
}

at::Tensor maximum(const at::Tensor& a, const at::Tensor& b) { return at::maximum(a, b); }
at::Tensor minimum(const at::Tensor& a, const at::Tensor& b) { return at::minimum(a, b); }
at::Tensor add(const at::Tensor& a, const at::Tensor& b) { return at::add(a, b); }

// A residual connection of two blocked convolution outputs stays blocked; oneDNN's sum does not
// broadcast, so operands of other shapes are made dense.
// BitShift on unsigned integers (uint8, and u16/u32/u64 held widened, runtime/engine/tensors.h): the
// shift is logical, bits leaving the declared width are dropped, and a shift by the width or more
// gives 0. O(elements).
// BitShift on any integer type: unsigned values shift logically; signed ones (opset 28) shift
// right arithmetically, and bits shifted past the sign bit are lost. A shift that is negative or
// at least the type's width leaves what the sign alone gives: -1 for a right shift of a negative
// value, else 0.
Outputs bitShift(KernelContext& c) {
  const bool left = c.stringAttr("direction", "") == "LEFT";
  const at::ScalarType type = c.input(0).scalar_type();
  const int width = static_cast<int>(8 * c10::elementSize(type));
  if (!at::isIntegralType(type, false))
    throw KernelError("BitShift needs integer operands");
  const bool isSigned = at::isSignedType(type);
  std::vector<at::Tensor> operands = at::broadcast_tensors({c.input(0), c.input(1)});
  at::Tensor x = operands[0].to(at::kLong).contiguous(), shift = operands[1].to(at::kLong).contiguous();
  at::Tensor out = at::empty_like(x);
  const std::uint64_t mask = width == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << width) - 1;
  const std::int64_t* xs = x.data_ptr<std::int64_t>();
  const std::int64_t* ss = shift.data_ptr<std::int64_t>();
  std::int64_t* os = out.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const std::int64_t by = ss[i];
    const bool outOfRange = by < 0 || by >= width;
    if (isSigned && !left) {
      os[i] = outOfRange ? (xs[i] < 0 ? -1 : 0) : xs[i] >> by; // xs[i] holds the sign-extended value
      continue;
    }
    const std::uint64_t value = static_cast<std::uint64_t>(xs[i]) & mask;
    std::uint64_t shifted = outOfRange ? 0 : left ? (value << by) & mask : value >> by;
    if (isSigned && width < 64 && (shifted >> (width - 1) & 1u)) // back to the signed type's range
      shifted |= ~mask;
    os[i] = static_cast<std::int64_t>(shifted);
  }
  return {out.to(type)};
}

} // namespace

void registerElementwiseKernels(KernelTable& t) {
  // Unary math.
  t.add("Abs", unary<at::abs>);
  t.add("Neg", unary<at::neg>);
  t.add("Exp", unary<at::exp>);
  t.add("Log", unary<at::log>);
  t.add("Sqrt", unary<at::sqrt>);
  t.add("Reciprocal", unary<at::reciprocal>);
  t.add("Floor", unary<at::floor>);
  t.add("Ceil", unary<at::ceil>);
  t.add("Round", unary<at::round>);
  t.add("Sign", unary<at::sign>);
  t.add("Erf", unary<at::erf>);
  t.add("Sin", unary<at::sin>);
  t.add("Cos", unary<at::cos>);
  t.add("Tan", unary<at::tan>);
  t.add("Atan", unary<at::atan>);
  t.add("Asin", unary<at::asin>);
  t.add("Acos", unary<at::acos>);
  t.add("Sinh", unary<at::sinh>);
  t.add("Cosh", unary<at::cosh>);
  t.add("Asinh", unary<at::asinh>);
  t.add("Acosh", unary<at::acosh>);
  t.add("Atanh", unary<at::atanh>);
  t.add("Tanh", unary<at::tanh>);
  t.add("Sigmoid", unary<at::sigmoid>);
  t.add("Relu", unary<at::relu>);
  t.add("Softsign", [](KernelContext& c) -> Outputs { return {c.input(0) / (1 + at::abs(c.input(0)))}; });
  t.add("Not", unary<at::logical_not>);
  t.add("IsNaN", unary<at::isnan>);
  t.add("IsInf", [](KernelContext& c) -> Outputs {
    const at::Tensor& x = c.input(0);
    bool negative = c.intAttr("detect_negative", 1) != 0, positive = c.intAttr("detect_positive", 1) != 0;
    at::Tensor none = at::zeros_like(x, at::TensorOptions().dtype(at::kBool));
    return {(negative ? at::isneginf(x) : none).logical_or(positive ? at::isposinf(x) : none)};
  });
  t.add("Identity", [](KernelContext& c) -> Outputs { return {c.input(0)}; });
  t.add("Dropout", [](KernelContext& c) -> Outputs { // inference: identity, mask all true
    // Opset 12's training_mode operand, true: random drops, as torch.nn.functional.dropout makes
    // them (each element kept with probability 1 - ratio, from ATen's default generator, the kept
    // ones scaled by 1 / (1 - ratio)). cleave train seeds that generator before each stage's
    // forward of a microbatch (runtime/training/train.h, seedForward).
    // Held-out evaluation (forward_replay.h) drops nothing, as torch's model.eval().
    const bool training =
        c.has(2) && c.input(2).numel() == 1 && c.input(2).item<bool>() && !evaluatingForward();
    const double ratio = c.has(1) ? c.input(1).item<double>() : 0.5;
    const at::Tensor& x = c.input(0);
    if (!training || ratio <= 0.0) {
      Outputs out{x};
      if (c.numOutputs() > 1)
        out.push_back(at::ones_like(x, at::TensorOptions().dtype(at::kBool)));
      return out;
    }
    if (ratio >= 1.0)
      return {at::zeros_like(x), at::zeros_like(x, at::TensorOptions().dtype(at::kBool))};
    at::Tensor kept = at::empty_like(x, at::TensorOptions().dtype(at::kFloat)).bernoulli_(1.0 - ratio);
    Outputs out{x * kept.to(x.scalar_type()) * (1.0 / (1.0 - ratio))};
    if (c.numOutputs() > 1)
      out.push_back(kept.to(at::kBool));
    return out;
  }, hostOperands({1, 2}));
  // Activations with attributes.
  t.add("LeakyRelu", [](KernelContext& c) -> Outputs { return {at::leaky_relu(c.input(0), c.floatAttr("alpha", 0.01f))}; });
  t.add("Elu", [](KernelContext& c) -> Outputs { return {at::elu(c.input(0), c.floatAttr("alpha", 1.0f))}; });
  t.add("Selu", [](KernelContext& c) -> Outputs {
    float alpha = c.floatAttr("alpha", 1.67326319217681884765625f), gamma = c.floatAttr("gamma", 1.05070102214813232421875f);
    const at::Tensor& x = c.input(0);
    return {gamma * at::where(x > 0, x, alpha * (at::exp(x) - 1))};
  });
  t.add("Softplus", [](KernelContext& c) -> Outputs { return {at::softplus(c.input(0))}; });
  t.add("ThresholdedRelu", [](KernelContext& c) -> Outputs {
    const at::Tensor& x = c.input(0);
    return {at::where(x > c.floatAttr("alpha", 1.0f), x, at::zeros_like(x))};
  });
  t.add("Shrink", [](KernelContext& c) -> Outputs {
    const at::Tensor& x = c.input(0);
    double lambd = c.floatAttr("lambd", 0.5f), bias = c.floatAttr("bias", 0.0f);
    return {at::where(x < -lambd, x + bias, at::where(x > lambd, x - bias, at::zeros_like(x))).to(x.scalar_type())};
  });
  t.add("Celu", [](KernelContext& c) -> Outputs { return {at::celu(c.input(0), c.floatAttr("alpha", 1.0f))}; });
  t.add("PRelu", [](KernelContext& c) -> Outputs {
    const at::Tensor& x = c.input(0);
    at::Tensor slope = c.input(1);
    // Opset 6's per-channel slope (axis 1), left as is by the version converter: a 1-D slope of
    // C entries that cannot broadcast against the last axis is read per channel.
    if (slope.dim() == 1 && x.dim() > 2 && slope.size(0) == x.size(1) && slope.size(0) != 1 &&
        slope.size(0) != x.size(-1)) {
      std::vector<std::int64_t> perChannel(x.dim() - 1, 1);
      perChannel[0] = slope.size(0);
      slope = slope.reshape(perChannel);
    }
    return {at::where(x >= 0, x, x * slope)};
  });
  t.add("HardSigmoid", [](KernelContext& c) -> Outputs {
    float alpha = c.floatAttr("alpha", 0.2f), beta = c.floatAttr("beta", 0.5f);
    return {at::clamp(c.input(0) * alpha + beta, 0.0, 1.0)};
  });
  t.add("HardSwish", [](KernelContext& c) -> Outputs { return {at::hardswish(c.input(0))}; });
  t.add("Gelu", [](KernelContext& c) -> Outputs { // opset 20
    return {geluInMemoryOrder(c.input(0), c.stringAttr("approximate", "none"))};
  });
  t.add("Swish", [](KernelContext& c) -> Outputs { // opset 24
    const at::Tensor& x = c.input(0);
    float alpha = c.floatAttr("alpha", 1.0f);
    return {alpha == 1.0f ? at::silu(x) : x * at::sigmoid(x * alpha)};
  });
  t.add("Clip", [](KernelContext& c) -> Outputs {
    at::Tensor x = c.input(0);
    if (c.opset() < 11) {
      return {at::clamp(x, c.floatAttr("min", -std::numeric_limits<float>::infinity()),
                        c.floatAttr("max", std::numeric_limits<float>::infinity()))};
    }
    if (c.has(1))
      x = at::maximum(x, c.input(1).to(x.scalar_type()));
    if (c.has(2))
      x = at::minimum(x, c.input(2).to(x.scalar_type()));
    return {x};
  });
  // Binary, broadcasting.
  t.add("Add", [](KernelContext& c) -> Outputs { return {at::add(c.input(0), c.input(1))}; });
  t.add("Sub", [](KernelContext& c) -> Outputs { return {at::sub(c.input(0), c.input(1))}; });
  t.add("Mul", [](KernelContext& c) -> Outputs { return {at::mul(c.input(0), c.input(1))}; });
  t.add("Div", [](KernelContext& c) -> Outputs { return {onnxDivide(c.input(0), c.input(1))}; });
  t.add("Pow", [](KernelContext& c) -> Outputs { // the result has the base's dtype
    const at::Tensor& base = c.input(0);
    at::Tensor exponent = c.input(1);
    if (at::isFloatingType(base.scalar_type())) {
      // One exponent that adds no dims (a decomposed LayerNorm's Pow 2): ATen's scalar form,
      // which computes x * x for 2 (the tensor form calls pow per element: 0.4 ms per ViT
      // LayerNorm, 10 ms of its 200).
      if (exponent.numel() == 1 && exponent.dim() <= base.dim() && exponent.device() == base.device())
        return {at::pow(base, exponent.item())};
      exponent = exponent.to(base.scalar_type());
    }
    return {at::pow(base, exponent).to(base.scalar_type())};
  });
  t.add("Mod", [](KernelContext& c) -> Outputs {
    return {c.intAttr("fmod", 0) ? at::fmod(c.input(0), c.input(1)) : at::remainder(c.input(0), c.input(1))};
  });
  t.add("BitShift", bitShift);
  t.add("BitwiseAnd", [](KernelContext& c) -> Outputs { return {at::bitwise_and(c.input(0), c.input(1))}; });
  t.add("BitwiseOr", [](KernelContext& c) -> Outputs { return {at::bitwise_or(c.input(0), c.input(1))}; });
  t.add("BitwiseXor", [](KernelContext& c) -> Outputs { return {at::bitwise_xor(c.input(0), c.input(1))}; });
  t.add("BitwiseNot", [](KernelContext& c) -> Outputs { return {at::bitwise_not(c.input(0))}; });
  t.add("Equal", [](KernelContext& c) -> Outputs {
    if (isStringTensor(c.input(0))) // opset 19
      return stringsEqual(c.input(0), c.input(1));
    return {at::eq(c.input(0), c.input(1))};
  });
  t.add("Greater", [](KernelContext& c) -> Outputs { return {at::gt(c.input(0), c.input(1))}; });
  t.add("GreaterOrEqual", [](KernelContext& c) -> Outputs { return {at::ge(c.input(0), c.input(1))}; });
  t.add("Less", [](KernelContext& c) -> Outputs { return {at::lt(c.input(0), c.input(1))}; });
  t.add("LessOrEqual", [](KernelContext& c) -> Outputs { return {at::le(c.input(0), c.input(1))}; });
  t.add("And", [](KernelContext& c) -> Outputs { return {at::logical_and(c.input(0), c.input(1))}; });
  t.add("Or", [](KernelContext& c) -> Outputs { return {at::logical_or(c.input(0), c.input(1))}; });
  t.add("Xor", [](KernelContext& c) -> Outputs { return {at::logical_xor(c.input(0), c.input(1))}; });
  t.add("Where", [](KernelContext& c) -> Outputs { return {at::where(c.input(0).to(at::kBool), c.input(1), c.input(2))}; });
  // Variadic.
  t.add("Sum", [](KernelContext& c) -> Outputs { return variadic(c, add); });
  t.add("Max", [](KernelContext& c) -> Outputs { return variadic(c, maximum); });
  t.add("Min", [](KernelContext& c) -> Outputs { return variadic(c, minimum); });
  t.add("Mean", [](KernelContext& c) -> Outputs {
    return {variadic(c, add)[0] / static_cast<double>(c.numInputs())};
  });
  // Types.
  t.add("Cast", [](KernelContext& c) -> Outputs {
    std::optional<ir::DType> to = ir::dtypeFromOnnx(static_cast<int>(c.intAttr("to", 1)));
    if (!to)
      throw KernelError("unknown dtype code " + std::to_string(c.intAttr("to", 1)));
    return {castTo(c.input(0), *to, c.intAttr("saturate", 1) != 0)};
  });
  t.add("BitCast", [](KernelContext& c) -> Outputs { // opset 26: the same bits as another type of their width
    std::optional<ir::DType> to = ir::dtypeFromOnnx(static_cast<int>(c.intAttr("to", 0)));
    Expected<at::ScalarType> type = scalarTypeOf(to.value_or(ir::DType::Undefined));
    const at::Tensor& x = c.input(0);
    if (!type || c10::elementSize(*type) != x.element_size())
      throw KernelError("BitCast to type " + std::to_string(c.intAttr("to", 0)) + " of another width than its input");
    return {x.contiguous().view(*type)};
  });
  t.add("CastLike", [](KernelContext& c) -> Outputs {
    return {castTo(c.input(0), dtypeOf(c.input(1)), c.intAttr("saturate", 1) != 0)};
  });
}

} // namespace cleave::runtime
