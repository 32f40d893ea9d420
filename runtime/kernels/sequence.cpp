// runtime/kernels/sequence.cpp - ONNX's sequence and optional ops: SequenceEmpty, SequenceConstruct,
// SequenceInsert, SequenceAt, SequenceErase, SequenceLength, SplitToSequence, ConcatFromSequence,
// SequenceMap, Optional, OptionalHasElement, OptionalGetElement.
// A sequence is held as an ATen nested tensor (runtime/engine/kernel.h: makeSequence), an optional as its
// value or, when empty, an undefined tensor. Positions may be negative (counted from the end).
// Complexity: O(elements) per op besides copies of the elements' data.
#include <c10/util/Exception.h>

#include "runtime/engine/executor.h"
#include "runtime/kernels/helpers.h"
#include "runtime/engine/torch_compat.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

// A position operand in [-size, size - 1] (or up to size where `insert` allows the end).
std::int64_t position(const at::Tensor& operand, std::int64_t size, bool insert) {
  std::int64_t p = operand.item<std::int64_t>();
  std::int64_t high = insert ? size : size - 1;
  if (p < -size || p > high)
    throw KernelError("position " + std::to_string(p) + " is outside a sequence of " + std::to_string(size));
  return p < 0 ? p + size : p;
}

Outputs sequenceEmpty(KernelContext& c) {
  return {makeSequence({}, onnxScalarType(c.intAttr("dtype", 1)))};
}

Outputs sequenceConstruct(KernelContext& c) {
  std::vector<at::Tensor> elements;
  for (std::size_t i = 0; i < c.numInputs(); ++i)
    elements.push_back(c.input(i));
  return {makeSequence(elements, elements.at(0).scalar_type())};
}

Outputs sequenceInsert(KernelContext& c) {
  std::vector<at::Tensor> elements = sequenceElements(c.input(0));
  std::int64_t at = c.has(2) ? position(c.input(2), static_cast<std::int64_t>(elements.size()), true)
                             : static_cast<std::int64_t>(elements.size());
  elements.insert(elements.begin() + at, c.input(1));
  return {makeSequence(elements, c.input(0).scalar_type())};
}

Outputs sequenceAt(KernelContext& c) {
  std::vector<at::Tensor> elements = sequenceElements(c.input(0));
  return {elements[static_cast<std::size_t>(position(c.input(1), static_cast<std::int64_t>(elements.size()), false))]};
}

Outputs sequenceErase(KernelContext& c) {
  std::vector<at::Tensor> elements = sequenceElements(c.input(0));
  if (elements.empty())
    throw KernelError("SequenceErase on an empty sequence");
  std::int64_t at = c.has(1) ? position(c.input(1), static_cast<std::int64_t>(elements.size()), false)
                             : static_cast<std::int64_t>(elements.size()) - 1;
  elements.erase(elements.begin() + at);
  return {makeSequence(elements, c.input(0).scalar_type())};
}

Outputs sequenceLength(KernelContext& c) {
  return {at::scalar_tensor(static_cast<std::int64_t>(sequenceElements(c.input(0)).size()),
                            at::TensorOptions().dtype(at::kLong))};
}

// Without `split`: slices of length 1 (squeezed unless keepdims); a scalar split: chunks of that
// length (the last one shorter); a 1-D split: those lengths.
Outputs splitToSequence(KernelContext& c) {
  const at::Tensor& x = c.input(0);
  std::int64_t axis = normalizeAxis(c.intAttr("axis", 0), x.dim());
  std::vector<at::Tensor> parts;
  if (!c.has(1)) {
    parts = c.intAttr("keepdims", 1) ? x.split(1, axis) : x.unbind(axis);
  } else if (c.input(1).dim() == 0) {
    parts = x.split(c.input(1).item<std::int64_t>(), axis);
  } else {
    parts = x.split_with_sizes(c.ints(1), axis);
  }
  return {makeSequence(parts, x.scalar_type())};
}

Outputs concatFromSequence(KernelContext& c) {
  std::vector<at::Tensor> elements = sequenceElements(c.input(0));
  if (elements.empty())
    throw KernelError("ConcatFromSequence of an empty sequence");
  bool newAxis = c.intAttr("new_axis", 0) != 0;
  std::int64_t axis = normalizeAxis(c.intAttr("axis", 0), elements[0].dim() + (newAxis ? 1 : 0));
  return {newAxis ? at::stack(elements, axis) : at::cat(elements, axis)};
}

// SequenceMap: the body runs once per element of the first input; further inputs give their i-th
// element when they are sequences (of the same length) and themselves when tensors.
Outputs sequenceMap(KernelContext& c) {
  Executor& body = c.subgraph("body");
  const ir::Graph& graph = body.graph();
  std::vector<std::string> names = ir::graphInputNames(graph);
  if (names.size() != c.numInputs())
    throw KernelError("the body has " + std::to_string(names.size()) + " inputs for " +
                      std::to_string(c.numInputs()) + " operands");
  std::vector<std::vector<at::Tensor>> sequences(c.numInputs());
  for (std::size_t k = 0; k < c.numInputs(); ++k)
    if (isSequence(c.input(k)))
      sequences[k] = sequenceElements(c.input(k));
  const std::size_t count = sequences[0].size();
  std::vector<std::vector<at::Tensor>> mapped(graph.graphOutputs().size());
  for (std::size_t i = 0; i < count; ++i) {
    TensorMap feeds;
    for (std::size_t k = 0; k < c.numInputs(); ++k) {
      if (isSequence(c.input(k)) && sequences[k].size() != count)
        throw KernelError("input sequences differ in length");
      feeds[names[k]] = isSequence(c.input(k)) ? sequences[k][i] : c.input(k);
    }
    Outputs results = runSubgraph(c, body, feeds);
    for (std::size_t o = 0; o < results.size(); ++o)
      mapped[o].push_back(results[o]);
  }
  Outputs outputs;
  for (std::size_t o = 0; o < mapped.size(); ++o) {
    Expected<at::ScalarType> declared = scalarTypeOf(graph.dtype(graph.graphOutputs()[o]));
    at::ScalarType type = !mapped[o].empty() ? mapped[o][0].scalar_type() : declared ? *declared : at::kFloat;
    outputs.push_back(makeSequence(mapped[o], type));
  }
  return outputs;
}

Outputs optional(KernelContext& c) { return {c.has(0) ? c.input(0) : at::Tensor()}; }

Outputs optionalHasElement(KernelContext& c) {
  return {at::scalar_tensor(c.has(0), at::TensorOptions().dtype(at::kBool))};
}

Outputs optionalGetElement(KernelContext& c) {
  if (!c.has(0))
    throw KernelError("OptionalGetElement of an empty optional");
  return {c.input(0)};
}
} // namespace

void registerSequenceKernels(KernelTable& t) {
  t.add("SequenceEmpty", sequenceEmpty);
  t.add("SequenceConstruct", sequenceConstruct);
  t.add("SequenceInsert", sequenceInsert, hostOperands({2}));
  t.add("SequenceAt", sequenceAt, hostOperands({1}));
  t.add("SequenceErase", sequenceErase, hostOperands({1}));
  t.add("SequenceLength", sequenceLength);
  t.add("SplitToSequence", splitToSequence, hostOperands({1}));
  t.add("ConcatFromSequence", concatFromSequence);
  t.add("SequenceMap", sequenceMap);
  t.add("Optional", optional);
  t.add("OptionalHasElement", optionalHasElement);
  t.add("OptionalGetElement", optionalGetElement);
}

} // namespace cleave::runtime
