// runtime/kernel.h - the interface between the executor and the ATen implementation of each
// ONNX op. A kernel reads its operands and attributes from a KernelContext and returns its
// outputs; it throws KernelError (or lets ATen throw) on input it cannot handle, and the executor
// turns either into an error naming the op, the node and the opset.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace cleave::runtime {

class Executor;

struct KernelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class KernelContext {
public:
  KernelContext(const ir::Graph& graph, ir::NodeId node, std::int64_t opset, std::vector<at::Tensor> inputs,
                std::function<Executor&(std::string_view)> subgraph)
      : graph_(graph), node_(node), opset_(opset), inputs_(std::move(inputs)), subgraph_(std::move(subgraph)) {}

  std::int64_t opset() const { return opset_; }
  const ir::Graph& graph() const { return graph_; }
  ir::NodeId node() const { return node_; }
  std::size_t numOutputs() const { return graph_.outputs(node_).size(); }
  // Explicit operands (implicit, outer-scope operands of subgraph ops come after them).
  std::size_t numInputs() const { return inputs_.size() - graph_.numImplicitInputs(node_); }
  bool has(std::size_t i) const { return i < numInputs() && inputs_[i].defined(); }
  const at::Tensor& input(std::size_t i) const; // throws KernelError when absent
  const std::vector<at::Tensor>& allInputs() const { return inputs_; }
  bool outputUsed(std::size_t i) const;

  const ir::Attribute* attribute(std::string_view name) const { return graph_.findAttribute(node_, name); }
  std::int64_t intAttr(std::string_view name, std::int64_t fallback) const;
  float floatAttr(std::string_view name, float fallback) const;
  std::string stringAttr(std::string_view name, std::string fallback) const;
  std::vector<std::int64_t> intsAttr(std::string_view name, std::vector<std::int64_t> fallback = {}) const;
  std::vector<float> floatsAttr(std::string_view name) const;
  at::Tensor tensorAttr(std::string_view name) const; // undefined when absent

  // Integer values of a small operand tensor (shapes, axes, pads).
  std::vector<std::int64_t> ints(std::size_t i) const;
  // The executor for a subgraph attribute ("body", "then_branch"), built once per node.
  Executor& subgraph(std::string_view attribute) const { return subgraph_(attribute); }

private:
  const ir::Graph& graph_;
  ir::NodeId node_;
  std::int64_t opset_;
  std::vector<at::Tensor> inputs_;
  std::function<Executor&(std::string_view)> subgraph_;
};

using Kernel = std::vector<at::Tensor> (*)(KernelContext&);

// Op type (in the default ONNX domain unless spelled "domain::Op") -> kernel.
class KernelTable {
public:
  void add(std::string opType, Kernel kernel);
  Kernel find(std::string_view domain, std::string_view opType) const;
  std::vector<std::string> names() const; // sorted

private:
  std::vector<std::pair<std::string, Kernel>> entries_; // sorted by name after building
  friend const KernelTable& kernelTable();
};

const KernelTable& kernelTable();

// Registration, one function per kernel file.
void registerElementwiseKernels(KernelTable& table);
void registerShapeKernels(KernelTable& table);
void registerNnKernels(KernelTable& table);
void registerReduceKernels(KernelTable& table);
void registerControlKernels(KernelTable& table);

// Helpers shared by kernel files.
std::int64_t normalizeAxis(std::int64_t axis, std::int64_t rank); // throws KernelError when out of range
at::ScalarType onnxScalarType(std::int64_t onnxDtype);              // throws KernelError when unknown

} // namespace cleave::runtime
