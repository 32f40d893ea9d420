// runtime/ops_control.cpp - Loop and If: their bodies run on executors of their own (built once
// per node from the subgraph attribute), fed the outer-scope values they read by name.
#include <limits>

#include "runtime/executor.h"
#include "runtime/kernel.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

// The outer values a node's subgraphs read: its implicit operands, by name.
TensorMap outerValues(KernelContext& c) {
  TensorMap values;
  auto operands = c.graph().inputs(c.node());
  const std::vector<at::Tensor>& tensors = c.allInputs();
  for (std::size_t i = c.numInputs(); i < operands.size(); ++i)
    values[std::string(c.graph().valueName(operands[i]))] = tensors[i];
  return values;
}

std::vector<std::string> bodyInputNames(const ir::Graph& body) {
  std::vector<std::string> names;
  for (ir::NodeId node : body.inputNodes())
    names.emplace_back(body.valueName(body.outputs(node)[0]));
  return names;
}

Outputs runBody(Executor& body, TensorMap feeds) {
  Expected<TensorMap> results = body.run(feeds);
  if (!results)
    throw KernelError(results.error().message());
  Outputs ordered;
  for (ir::ValueId value : body.graph().graphOutputs())
    ordered.push_back(results->at(std::string(body.graph().valueName(value))));
  return ordered;
}

Outputs loop(KernelContext& c) {
  Executor& body = c.subgraph("body");
  std::vector<std::string> names = bodyInputNames(body.graph());
  std::size_t carriedCount = c.numInputs() - 2;
  if (names.size() < 2 + carriedCount)
    throw KernelError("the body has " + std::to_string(names.size()) + " inputs for " + std::to_string(carriedCount) +
                      " loop-carried values");
  std::int64_t trips = c.has(0) ? c.input(0).item<std::int64_t>() : std::numeric_limits<std::int64_t>::max();
  bool condition = c.has(1) ? c.input(1).item<bool>() : true;
  Outputs carried;
  for (std::size_t i = 0; i < carriedCount; ++i)
    carried.push_back(c.input(2 + i));
  TensorMap feeds = outerValues(c);
  std::vector<Outputs> scans;
  for (std::int64_t i = 0; i < trips && condition; ++i) {
    feeds[names[0]] = at::scalar_tensor(i, at::TensorOptions().dtype(at::kLong));
    feeds[names[1]] = at::scalar_tensor(condition, at::TensorOptions().dtype(at::kBool));
    for (std::size_t k = 0; k < carriedCount; ++k)
      feeds[names[2 + k]] = carried[k];
    Outputs out = runBody(body, feeds);
    if (out.size() < 1 + carriedCount)
      throw KernelError("the body returns too few values");
    condition = out[0].item<bool>();
    for (std::size_t k = 0; k < carriedCount; ++k)
      carried[k] = out[1 + k];
    scans.resize(out.size() - 1 - carriedCount);
    for (std::size_t s = 0; s < scans.size(); ++s)
      scans[s].push_back(out[1 + carriedCount + s]);
  }
  Outputs results = carried;
  std::size_t scanOutputs = c.numOutputs() - carriedCount;
  for (std::size_t s = 0; s < scanOutputs; ++s)
    results.push_back(s < scans.size() && !scans[s].empty() ? at::stack(scans[s], 0) : at::empty({0}));
  return results;
}

Outputs branch(KernelContext& c) {
  bool condition = c.input(0).item<bool>();
  return runBody(c.subgraph(condition ? "then_branch" : "else_branch"), outerValues(c));
}
} // namespace

void registerControlKernels(KernelTable& t) {
  t.add("Loop", loop);
  t.add("If", branch);
}

} // namespace cleave::runtime
