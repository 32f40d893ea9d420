// runtime/ops_control.cpp - Loop, Scan and If: their bodies run on executors of their own (built once
// per node from the subgraph attribute), fed the outer-scope values they read by name.
#include <algorithm>
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

Outputs loop(KernelContext& c) {
  Executor& body = c.subgraph("body");
  std::vector<std::string> names = ir::graphInputNames(body.graph());
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
    Outputs out = runSubgraph(body, feeds);
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

// Scan (opset 9 and later): N state values carried through the body and M scan inputs sliced along
// their scan axes (read backwards where scan_input_directions says 1); the body's K extra outputs
// are stacked along scan_output_axes (in reverse order where scan_output_directions says 1).
// O(steps) body runs.
Outputs scan(KernelContext& c) {
  if (c.opset() < 9)
    throw KernelError("Scan before opset 9 (with sequence_lens) is not supported");
  Executor& body = c.subgraph("body");
  std::vector<std::string> names = ir::graphInputNames(body.graph());
  const std::size_t scanCount = static_cast<std::size_t>(c.intAttr("num_scan_inputs", 0));
  if (scanCount == 0 || scanCount > c.numInputs() || names.size() != c.numInputs())
    throw KernelError("num_scan_inputs does not fit the node's " + std::to_string(c.numInputs()) +
                      " inputs and the body's " + std::to_string(names.size()));
  const std::size_t stateCount = c.numInputs() - scanCount;
  std::vector<std::int64_t> inAxes = c.intsAttr("scan_input_axes", std::vector<std::int64_t>(scanCount, 0));
  std::vector<std::int64_t> inReverse = c.intsAttr("scan_input_directions", std::vector<std::int64_t>(scanCount, 0));
  if (inAxes.size() != scanCount || inReverse.size() != scanCount)
    throw KernelError("scan_input_axes / scan_input_directions need one entry per scan input");
  std::vector<at::Tensor> sequences;
  for (std::size_t m = 0; m < scanCount; ++m) {
    const at::Tensor& input = c.input(stateCount + m);
    sequences.push_back(input.movedim(normalizeAxis(inAxes[m], input.dim()), 0));
  }
  const std::int64_t steps = sequences[0].size(0);
  for (const at::Tensor& sequence : sequences)
    if (sequence.size(0) != steps)
      throw KernelError("scan inputs differ in their scan axis lengths");
  Outputs states;
  for (std::size_t k = 0; k < stateCount; ++k)
    states.push_back(c.input(k));
  TensorMap feeds = outerValues(c);
  std::vector<Outputs> scanned;
  for (std::int64_t t = 0; t < steps; ++t) {
    for (std::size_t k = 0; k < stateCount; ++k)
      feeds[names[k]] = states[k];
    for (std::size_t m = 0; m < scanCount; ++m)
      feeds[names[stateCount + m]] = sequences[m][inReverse[m] ? steps - 1 - t : t];
    Outputs out = runSubgraph(body, feeds);
    if (out.size() != c.numOutputs())
      throw KernelError("the body returns " + std::to_string(out.size()) + " values for " +
                        std::to_string(c.numOutputs()) + " outputs");
    std::copy(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(stateCount), states.begin());
    scanned.resize(out.size() - stateCount);
    for (std::size_t s = 0; s < scanned.size(); ++s)
      scanned[s].push_back(out[stateCount + s]);
  }
  const std::size_t outCount = c.numOutputs() - stateCount;
  std::vector<std::int64_t> outAxes = c.intsAttr("scan_output_axes", std::vector<std::int64_t>(outCount, 0));
  std::vector<std::int64_t> outReverse = c.intsAttr("scan_output_directions", std::vector<std::int64_t>(outCount, 0));
  if (outAxes.size() != outCount || outReverse.size() != outCount)
    throw KernelError("scan_output_axes / scan_output_directions need one entry per scan output");
  Outputs results = states;
  for (std::size_t s = 0; s < outCount; ++s) {
    if (scanned.empty())
      throw KernelError("Scan over zero steps has no output shape");
    if (outReverse[s])
      std::reverse(scanned[s].begin(), scanned[s].end());
    at::Tensor stacked = at::stack(scanned[s], 0);
    results.push_back(stacked.movedim(0, normalizeAxis(outAxes[s], stacked.dim())));
  }
  return results;
}

Outputs branch(KernelContext& c) {
  bool condition = c.input(0).item<bool>();
  return runSubgraph(c.subgraph(condition ? "then_branch" : "else_branch"), outerValues(c));
}
} // namespace

std::vector<at::Tensor> runSubgraph(Executor& body, const TensorMap& feeds) {
  Expected<TensorMap> results = body.run(feeds);
  if (!results)
    throw KernelError(results.error().message());
  std::vector<at::Tensor> ordered;
  for (ir::ValueId value : body.graph().graphOutputs())
    ordered.push_back(results->at(std::string(body.graph().valueName(value))));
  return ordered;
}

void registerControlKernels(KernelTable& t) {
  t.add("Loop", loop);
  t.add("Scan", scan);
  t.add("If", branch);
}

} // namespace cleave::runtime
