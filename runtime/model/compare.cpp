#include "runtime/model/compare.h"

#include <sstream>

#include "runtime/engine/tensors.h"

namespace cleave::runtime {

namespace {
std::string formatIndex(const std::vector<std::int64_t>& index) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < index.size(); ++i)
    out << (i ? "," : "") << index[i];
  out << "]";
  return out.str();
}

std::vector<std::int64_t> unflatten(std::int64_t flat, at::IntArrayRef sizes) {
  std::vector<std::int64_t> index(sizes.size(), 0);
  for (std::size_t d = sizes.size(); d-- > 0;) {
    index[d] = sizes[d] ? flat % sizes[d] : 0;
    flat = sizes[d] ? flat / sizes[d] : 0;
  }
  return index;
}
} // namespace

namespace {
// Sequences (nested tensors) compare element by element; empty optionals (undefined) only equal
// each other.
Comparison compareContainers(const at::Tensor& actual, const at::Tensor& expected, const AllClose& tolerance) {
  if (!actual.defined() || !expected.defined())
    return actual.defined() == expected.defined()
               ? Comparison{}
               : Comparison{false, actual.defined() ? "a value, expected an empty optional" : "an empty optional"};
  if (actual.is_nested() != expected.is_nested())
    return {false, actual.is_nested() ? "a sequence, expected a tensor" : "a tensor, expected a sequence"};
  std::vector<at::Tensor> got = actual.unbind(0), want = expected.unbind(0);
  if (got.size() != want.size())
    return {false, "a sequence of " + std::to_string(got.size()) + ", expected " + std::to_string(want.size())};
  for (std::size_t i = 0; i < got.size(); ++i) {
    Comparison element = compareTensors(got[i], want[i], tolerance);
    if (!element.equal) {
      element.message = "sequence element " + std::to_string(i) + ": " + element.message;
      return element;
    }
  }
  return {};
}
} // namespace

namespace {
// String tensors are equal when every element is (no tolerance); the first difference is named.
Comparison compareStrings(const at::Tensor& actual, const at::Tensor& expected) {
  if (isStringTensor(actual) != isStringTensor(expected))
    return {false, isStringTensor(actual) ? "strings, expected numbers" : "numbers, expected strings"};
  if (actual.sizes() != expected.sizes()) {
    std::ostringstream out;
    out << "shape " << actual.sizes() << ", expected " << expected.sizes();
    return {false, out.str()};
  }
  std::vector<std::string> got = stringValues(actual), want = stringValues(expected);
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i])
      continue;
    Comparison result{false, ""};
    result.worstIndex = unflatten(static_cast<std::int64_t>(i), actual.sizes());
    result.message = "element " + formatIndex(result.worstIndex) + " is \"" + got[i] + "\", expected \"" + want[i] + "\"";
    return result;
  }
  return {};
}
} // namespace

namespace {
// Numbers of one shape and dtype, as doubles (complex as pairs), flattened.
Comparison compareNumbers(const at::Tensor& a, const at::Tensor& e, at::IntArrayRef sizes, const AllClose& tolerance) {
  Comparison result;
  at::Tensor diff = (a - e).abs();
  at::Tensor bothNan = a.isnan().logical_and(e.isnan());
  at::Tensor sameInfinity = a.isinf().logical_and(a == e);
  at::Tensor agreeExactly = bothNan.logical_or(sameInfinity);
  at::Tensor magnitude = e.abs();
  at::Tensor finiteMagnitude = at::where(magnitude.isfinite(), magnitude, at::zeros_like(magnitude));
  result.outputScale = finiteMagnitude.max().item<double>();
  at::Tensor counted = at::where(agreeExactly, at::zeros_like(diff), diff);
  result.maxAbs = counted.max().item<double>();
  result.maxElementRel = at::where(magnitude > 0, counted / magnitude, at::zeros_like(diff)).max().item<double>();
  at::Tensor elementwise = (diff <= tolerance.atol + tolerance.rtol * magnitude).logical_or(agreeExactly);
  result.pastElementwise = elementwise.logical_not().sum().item<std::int64_t>();
  const double scale = tolerance.scale == ToleranceScale::Output ? tolerance.atol + tolerance.rtol * result.outputScale : 0;
  at::Tensor bound = tolerance.scale == ToleranceScale::Output ? at::full_like(diff, scale)
                                                                : tolerance.atol + tolerance.rtol * magnitude;
  at::Tensor ok = tolerance.scale == ToleranceScale::Output ? (diff <= bound).logical_or(agreeExactly) : elementwise;
  if (ok.all().item<bool>())
    return result;
  at::Tensor excess = at::where(ok, at::full_like(diff, -1.0), at::where(diff.isnan(), at::full_like(diff, INFINITY),
                                                                            diff - bound));
  std::int64_t worst = excess.argmax().item<std::int64_t>();
  result.equal = false;
  result.worstIndex = unflatten(worst, sizes);
  std::ostringstream out;
  out.precision(9);
  out << "element " << formatIndex(result.worstIndex) << " is " << a[worst].item<double>() << ", expected "
      << e[worst].item<double>() << " (|diff| " << diff[worst].item<double>() << " > atol " << tolerance.atol
      << " + rtol " << tolerance.rtol;
  if (tolerance.scale == ToleranceScale::Output)
    out << " * " << result.outputScale << ", the output's largest |expected|; " << ok.logical_not().sum().item<std::int64_t>();
  else
    out << " * |expected|; " << result.pastElementwise;
  out << " of " << a.numel() << " elements differ)";
  result.message = out.str();
  return result;
}
} // namespace

Comparison compareTensors(const at::Tensor& actualIn, const at::Tensor& expectedIn, const AllClose& tolerance) {
  if (!actualIn.defined() || !expectedIn.defined() || actualIn.is_nested() || expectedIn.is_nested())
    return compareContainers(actualIn, expectedIn, tolerance);
  if (isStringTensor(actualIn) || isStringTensor(expectedIn))
    return compareStrings(actualIn, expectedIn);
  at::Tensor actual = actualIn.to(at::kCPU), expected = expectedIn.to(at::kCPU);
  if (actual.sizes() != expected.sizes()) {
    std::ostringstream out;
    out << "shape " << actual.sizes() << ", expected " << expected.sizes();
    return {false, out.str()};
  }
  if (actual.scalar_type() != expected.scalar_type()) {
    std::ostringstream out;
    out << "dtype " << actual.scalar_type() << ", expected " << expected.scalar_type();
    return {false, out.str()};
  }
  if (actual.numel() == 0)
    return {};
  if (at::isComplexType(actual.scalar_type())) {
    actual = at::view_as_real(actual.contiguous());
    expected = at::view_as_real(expected.contiguous());
  }
  AllClose rule = tolerance;
  if (at::isIntegralType(actual.scalar_type(), /*includeBool=*/true))
    rule.scale = ToleranceScale::Element; // an index or a count is right or wrong, whatever its neighbours' size
  return compareNumbers(actual.to(at::kDouble).reshape({-1}), expected.to(at::kDouble).reshape({-1}), actual.sizes(),
                        rule);
}

} // namespace cleave::runtime
