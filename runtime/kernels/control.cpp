// runtime/kernels/control.cpp - Loop, Scan and If: their bodies run on executors of their own (built once
// per node from the subgraph attribute), fed the outer-scope values they read by name.
#include <algorithm>
#include <limits>

#include "runtime/engine/executor.h"
#include "runtime/kernels/helpers.h"

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
    Outputs out = runSubgraph(c, body, feeds);
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

// The body of a scan run `steps` times: `states` carried from step to step, each of `sequences`
// (scan axis first) read at step t, or at steps - 1 - t where `reverse` says so. Returns the final
// states and, per extra body output, its value at each step. O(steps) body runs.
struct ScanSteps {
  Outputs states;
  std::vector<Outputs> scanned;
};

ScanSteps runScanSteps(const KernelContext& c, Executor& body, const std::vector<std::string>& names,
                       TensorMap feeds, Outputs states, const std::vector<at::Tensor>& sequences,
                       const std::vector<std::int64_t>& reverse, std::int64_t steps, std::size_t bodyOutputs) {
  ScanSteps run{std::move(states), {}};
  const std::size_t stateCount = run.states.size();
  for (std::int64_t t = 0; t < steps; ++t) {
    for (std::size_t k = 0; k < stateCount; ++k)
      feeds[names[k]] = run.states[k];
    for (std::size_t m = 0; m < sequences.size(); ++m)
      feeds[names[stateCount + m]] = sequences[m][reverse[m] ? steps - 1 - t : t];
    Outputs out = runSubgraph(c, body, feeds);
    if (out.size() != bodyOutputs)
      throw KernelError("the body returns " + std::to_string(out.size()) + " values for " +
                        std::to_string(bodyOutputs) + " outputs");
    std::copy(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(stateCount), run.states.begin());
    run.scanned.resize(out.size() - stateCount);
    for (std::size_t s = 0; s < run.scanned.size(); ++s)
      run.scanned[s].push_back(out[stateCount + s]);
  }
  return run;
}

// The number of scan inputs a Scan node names, checked against its operands (`explicitInputs`,
// sequence_lens not included) and its body's own inputs (`bodyInputs` less the outer-scope values
// it reads, which the reader appends as inputs: io/onnx.h).
std::size_t scanInputCount(KernelContext& c, std::size_t explicitInputs, std::size_t bodyInputs) {
  bodyInputs -= std::min<std::size_t>(bodyInputs, c.graph().numImplicitInputs(c.node()));
  const std::size_t count = static_cast<std::size_t>(c.intAttr("num_scan_inputs", 0));
  if (count == 0 || count > explicitInputs || bodyInputs != explicitInputs)
    throw KernelError("num_scan_inputs does not fit the node's " + std::to_string(explicitInputs) +
                      " inputs and the body's " + std::to_string(bodyInputs));
  return count;
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
  const std::size_t scanCount = scanInputCount(c, c.numInputs(), names.size());
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
  ScanSteps run = runScanSteps(c, body, names, outerValues(c), std::move(states), sequences, inReverse, steps,
                               c.numOutputs());
  const std::size_t outCount = c.numOutputs() - stateCount;
  std::vector<std::int64_t> outAxes = c.intsAttr("scan_output_axes", std::vector<std::int64_t>(outCount, 0));
  std::vector<std::int64_t> outReverse = c.intsAttr("scan_output_directions", std::vector<std::int64_t>(outCount, 0));
  if (outAxes.size() != outCount || outReverse.size() != outCount)
    throw KernelError("scan_output_axes / scan_output_directions need one entry per scan output");
  Outputs results = run.states;
  for (std::size_t s = 0; s < outCount; ++s) {
    if (run.scanned.empty())
      throw KernelError("Scan over zero steps has no output shape");
    if (outReverse[s])
      std::reverse(run.scanned[s].begin(), run.scanned[s].end());
    at::Tensor stacked = at::stack(run.scanned[s], 0);
    results.push_back(stacked.movedim(0, normalizeAxis(outAxes[s], stacked.dim())));
  }
  return results;
}

// Scan-8 (an opset 8 model's Scan, renamed cleave::Scan8 on conversion: io/onnx.h): every input
// is batched on axis 0 and scans along axis 1; per batch entry b, the body runs sequence_lens[b]
// steps (all of axis 1 when absent; reading backwards where `directions` says 1), and its scan
// outputs stack along axis 1, zero-padded past sequence_lens[b] to the inputs' length.
// O(batch * steps) body runs.
Outputs scan8(KernelContext& c) {
  Executor& body = c.subgraph("body");
  std::vector<std::string> names = ir::graphInputNames(body.graph());
  const std::size_t operands = c.numInputs() - 1; // after sequence_lens
  const std::size_t scanCount = scanInputCount(c, operands, names.size());
  const std::size_t stateCount = operands - scanCount;
  std::vector<std::int64_t> reverse = c.intsAttr("directions", std::vector<std::int64_t>(scanCount, 0));
  if (reverse.size() != scanCount)
    throw KernelError("directions needs one entry per scan input");
  const at::Tensor& first = c.input(1 + stateCount);
  if (first.dim() < 2)
    throw KernelError("Scan-8's scan inputs are [batch, sequence, ...]");
  const std::int64_t batch = first.size(0), length = first.size(1);
  for (std::size_t i = 1; i <= operands; ++i)
    if (c.input(i).dim() < 1 || c.input(i).size(0) != batch || (i > stateCount && c.input(i).size(1) != length))
      throw KernelError("Scan-8's inputs must share batch size " + std::to_string(batch) +
                        " and its scan inputs sequence length " + std::to_string(length));
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(batch), length);
  if (c.has(0))
    lengths = c.ints(0);
  if (static_cast<std::int64_t>(lengths.size()) != batch)
    throw KernelError("sequence_lens needs one entry per batch entry");
  const std::size_t outCount = c.numOutputs() - stateCount;
  std::vector<Outputs> finalStates(stateCount), scanOutputs(outCount);
  TensorMap feeds = outerValues(c);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t steps = lengths[static_cast<std::size_t>(b)];
    if (steps < 1 || steps > length)
      throw KernelError("sequence_lens[" + std::to_string(b) + "] is " + std::to_string(steps) + ", not in [1, " +
                        std::to_string(length) + "]");
    Outputs states;
    for (std::size_t k = 0; k < stateCount; ++k)
      states.push_back(c.input(1 + k)[b]);
    std::vector<at::Tensor> sequences;
    for (std::size_t m = 0; m < scanCount; ++m)
      sequences.push_back(c.input(1 + stateCount + m)[b].narrow(0, 0, steps));
    ScanSteps run = runScanSteps(c, body, names, feeds, std::move(states), sequences, reverse, steps, c.numOutputs());
    for (std::size_t k = 0; k < stateCount; ++k)
      finalStates[k].push_back(run.states[k]);
    for (std::size_t s = 0; s < outCount; ++s) {
      at::Tensor stacked = at::stack(run.scanned[s], 0);
      std::vector<std::int64_t> padded = stacked.sizes().vec();
      padded[0] = length - steps;
      scanOutputs[s].push_back(at::cat({stacked, at::zeros(padded, stacked.options())}, 0));
    }
  }
  Outputs results;
  for (Outputs& perBatch : finalStates)
    results.push_back(at::stack(perBatch, 0));
  for (Outputs& perBatch : scanOutputs)
    results.push_back(at::stack(perBatch, 0));
  return results;
}

Outputs branch(KernelContext& c) {
  bool condition = c.input(0).item<bool>();
  return runSubgraph(c, c.subgraph(condition ? "then_branch" : "else_branch"), outerValues(c));
}
} // namespace

std::vector<at::Tensor> runSubgraph(const KernelContext& c, Executor& body, const TensorMap& feeds) {
  // The body's copies between host and device count in the run's statistics (per-op times and
  // peaks stay the node's own).
  RunStats* stats = c.runStats();
  RunStats copies;
  Expected<TensorMap> results = body.run(feeds, stats ? &copies : nullptr);
  if (stats) {
    stats->hostDeviceCopies += copies.hostDeviceCopies;
    stats->hostDeviceCopiesInBodies += copies.hostDeviceCopies;
    stats->hostDeviceCopyBytes += copies.hostDeviceCopyBytes;
    for (const auto& [value, count] : copies.copiesByValue)
      stats->copiesByValue[value] += count;
  }
  if (!results)
    throw KernelError(results.error().message());
  std::vector<at::Tensor> ordered;
  for (ir::ValueId value : body.graph().graphOutputs())
    ordered.push_back(results->at(std::string(body.graph().valueName(value))));
  return ordered;
}

void registerControlKernels(KernelTable& t) {
  t.add("Loop", loop, hostOperands({0, 1}));
  t.add("Scan", scan);
  t.add("cleave::Scan8", scan8);
  t.add("If", branch, hostOperands({0}));
}

} // namespace cleave::runtime
