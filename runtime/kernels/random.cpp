// runtime/kernels/random.cpp - ONNX's random ops: RandomUniform(Like), RandomNormal(Like), Bernoulli,
// Multinomial. Each node draws from its own ATen CPU generator seeded by its `seed` attribute, or
// (none given) by a hash of the node's name, so a run is reproducible byte for byte; the values
// are ATen's draws, not numpy's, so they are checked by their statistics
// (tests/runtime_cli_test.py), as ONNX's own test data cannot check them.
// Complexity: O(elements) (Multinomial: O(rows * (classes + samples))).
#include <ATen/CPUGeneratorImpl.h>

#include <string_view>

#include "runtime/kernels/helpers.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

at::Generator generatorFor(KernelContext& c) {
  std::uint64_t seed = 0;
  if (c.attribute("seed")) {
    seed = static_cast<std::uint64_t>(static_cast<std::int64_t>(c.floatAttr("seed", 0.0f)));
  } else {
    seed = 1469598103934665603ULL; // FNV-1a of the node's name
    for (char ch : std::string_view(c.graph().name(c.node())))
      seed = (seed ^ static_cast<unsigned char>(ch)) * 1099511628211ULL;
  }
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

// The output dtype: `dtype` when given, else `fallback`.
at::TensorOptions outputOptions(KernelContext& c, at::ScalarType fallback) {
  return at::TensorOptions().dtype(c.attribute("dtype") ? onnxScalarType(c.intAttr("dtype", 1)) : fallback);
}

Outputs randomUniform(KernelContext& c, std::vector<std::int64_t> shape, at::ScalarType fallback) {
  at::Generator generator = generatorFor(c);
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(at::kDouble));
  out.uniform_(c.floatAttr("low", 0.0f), c.floatAttr("high", 1.0f), generator);
  return {out.to(outputOptions(c, fallback).dtype())};
}

Outputs randomNormal(KernelContext& c, std::vector<std::int64_t> shape, at::ScalarType fallback) {
  at::Generator generator = generatorFor(c);
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(at::kDouble));
  out.normal_(c.floatAttr("mean", 0.0f), c.floatAttr("scale", 1.0f), generator);
  return {out.to(outputOptions(c, fallback).dtype())};
}

Outputs bernoulli(KernelContext& c) {
  at::Generator generator = generatorFor(c);
  const at::Tensor& p = c.input(0);
  return {at::bernoulli(p.to(at::kDouble), generator).to(outputOptions(c, p.scalar_type()).dtype())};
}

// Multinomial: `sample_size` class draws per row of unnormalized log-probabilities, with
// replacement.
Outputs multinomial(KernelContext& c) {
  at::Generator generator = generatorFor(c);
  const at::Tensor& logits = c.input(0);
  if (logits.dim() != 2)
    throw KernelError("Multinomial takes [batch, classes] log-probabilities");
  at::Tensor probabilities = at::softmax(logits.to(at::kDouble), 1);
  return {at::multinomial(probabilities, c.intAttr("sample_size", 1), true, generator)
              .to(outputOptions(c, at::kInt).dtype())};
}
} // namespace

void registerRandomKernels(KernelTable& t) {
  t.add("RandomUniform", [](KernelContext& c) -> Outputs { return randomUniform(c, c.intsAttr("shape"), at::kFloat); });
  t.add("RandomUniformLike", [](KernelContext& c) -> Outputs {
    return randomUniform(c, c.input(0).sizes().vec(), c.input(0).scalar_type());
  });
  t.add("RandomNormal", [](KernelContext& c) -> Outputs { return randomNormal(c, c.intsAttr("shape"), at::kFloat); });
  t.add("RandomNormalLike", [](KernelContext& c) -> Outputs {
    return randomNormal(c, c.input(0).sizes().vec(), c.input(0).scalar_type());
  });
  t.add("Bernoulli", bernoulli);
  t.add("Multinomial", multinomial);
}

} // namespace cleave::runtime
