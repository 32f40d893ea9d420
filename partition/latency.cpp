#include "partition/latency.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <queue>

#include "base/json.h"

namespace cleave::partition {
using ir::NodeId;

namespace {
Expected<IdVector<NodeId, NodeLatency>> latenciesFromDocument(const ir::Graph& graph, const nlohmann::json& doc,
                                                              const std::string& sourceName) {
  if (!doc.is_object())
    return Error(ErrorCode::ParseError) << sourceName << ": expected a JSON object of node -> latency";
  IdVector<NodeId, NodeLatency> latencies(graph.numNodes());
  IdVector<NodeId, std::uint8_t> given(graph.numNodes(), 0);
  for (const auto& [name, entry] : doc.items()) {
    NodeId node = graph.findNode(name);
    if (node == NodeId{UINT32_MAX})
      return Error(ErrorCode::NotFound) << sourceName << ": node '" << name << "' is not in the model";
    if (!entry.is_object() || !entry.contains("mem_latency_sec") || !entry.contains("computer_latency_sec") ||
        !entry["mem_latency_sec"].is_number() || !entry["computer_latency_sec"].is_number())
      return Error(ErrorCode::ParseError) << sourceName << ": " << name
                                          << ": needs numbers mem_latency_sec and computer_latency_sec";
    latencies[node] = {entry["mem_latency_sec"].get<double>(), entry["computer_latency_sec"].get<double>()};
    if (!(latencies[node].memSec >= 0 && latencies[node].memSec < 1e30 &&
          latencies[node].computeSec >= 0 && latencies[node].computeSec < 1e30))
      return Error(ErrorCode::ParseError) << sourceName << ": " << name
                                          << ": latencies must be finite non-negative numbers of seconds";
    given[node] = 1;
  }
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n)
    if (graph.isCallable(NodeId{n}) && !given[NodeId{n}])
      return Error(ErrorCode::NotFound) << sourceName << ": no latency for node '" << graph.name(NodeId{n}) << "'";
  return latencies;
}
} // namespace

Expected<IdVector<NodeId, NodeLatency>> parseLatencies(const ir::Graph& graph, std::string_view text,
                                                       const std::string& sourceName) {
  CLEAVE_TRY(nlohmann::json doc, parseJsonInput(text, sourceName));
  return guardJson(sourceName, [&]() { return latenciesFromDocument(graph, doc, sourceName); });
}

namespace {
std::int64_t elements(const ir::Graph& graph, ir::ValueId value) {
  int size = graph.valueKind(value) == ir::ValueKind::Tensor ? ir::dtypeSize(graph.dtype(value)) : 0;
  return size > 0 && graph.bytes(value) > 0 ? graph.bytes(value) / size : 0;
}

double flopsOf(const ir::Graph& graph, NodeId node) {
  auto inputs = graph.inputs(node);
  auto outputs = graph.outputs(node);
  std::int64_t outElements = outputs.empty() ? 0 : elements(graph, outputs[0]);
  std::string_view op = graph.opType(node);
  auto lastDim = [&](ir::ValueId value) -> std::int64_t {
    auto dims = graph.dims(value);
    return dims.empty() || dims.back().extent < 0 ? 1 : dims.back().extent;
  };
  if ((op == "MatMul" || op == "Gemm" || op == "torch.matmul" || op == "torch.nn.modules.linear.Linear") &&
      !inputs.empty() && inputs[0] != ir::kNoValue) {
    std::int64_t k = lastDim(inputs[0]);
    if (op == "Gemm") {
      const ir::Attribute* transA = graph.findAttribute(node, "transA");
      if (transA && transA->intValue && graph.dims(inputs[0]).size() == 2)
        k = graph.dims(inputs[0])[0].extent;
    }
    return 2.0 * static_cast<double>(outElements) * static_cast<double>(std::max<std::int64_t>(k, 1));
  }
  if (op == "Conv" && inputs.size() >= 2 && inputs[1] != ir::kNoValue) {
    std::int64_t perOutput = 1; // Cin/groups * kernel elements = weight elements / Cout
    auto w = graph.dims(inputs[1]);
    for (std::size_t i = 1; i < w.size(); ++i)
      perOutput *= std::max<std::int64_t>(w[i].extent, 1);
    return 2.0 * static_cast<double>(outElements) * static_cast<double>(perOutput);
  }
  return static_cast<double>(outElements);
}
} // namespace

double estimateFlops(const ir::Graph& graph, NodeId node) { return flopsOf(graph, node); }

IdVector<NodeId, NodeLatency> estimateLatencies(const ir::Graph& graph, double flopsPerSec, double bytesPerSec) {
  IdVector<NodeId, NodeLatency> latencies(graph.numNodes());
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId node{n};
    if (!graph.isCallable(node))
      continue;
    double bytes = static_cast<double>(graph.parameterBytes(node));
    for (ir::ValueId value : graph.inputs(node))
      if (value != ir::kNoValue)
        bytes += static_cast<double>(std::max<std::int64_t>(graph.bytes(value), 0));
    for (ir::ValueId value : graph.outputs(node))
      bytes += static_cast<double>(std::max<std::int64_t>(graph.bytes(value), 0));
    latencies[node] = {bytes / bytesPerSec, flopsOf(graph, node) / flopsPerSec};
  }
  return latencies;
}

std::vector<PartitionLatency> partitionLatencies(const ir::Graph& graph, const plan::CutPlan& plan,
                                                 const IdVector<NodeId, NodeLatency>& latencies) {
  // Longest path ending at each node, over predecessors in the same partition; ids are
  // topological, so one pass in id order suffices.
  IdVector<NodeId, PartitionLatency> best(graph.numNodes());
  std::vector<PartitionLatency> result(plan.submodules.size());
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId node{n};
    std::uint32_t partition = plan.submoduleOf[node];
    if (partition == plan::kNoSubmodule || !graph.isCallable(node))
      continue;
    PartitionLatency before;
    for (ir::ValueId value : graph.inputs(node)) {
      if (value == ir::kNoValue)
        continue;
      NodeId producer = graph.producer(value);
      if (graph.isCallable(producer) && plan.submoduleOf[producer] == partition &&
          best[producer].overallSec > before.overallSec)
        before = best[producer];
    }
    const NodeLatency& own = latencies[node];
    PartitionLatency& here = best[node];
    here.overallSec = before.overallSec + std::max(own.computeSec, own.memSec);
    here.memSec = before.memSec + own.memSec;
    here.computeSec = before.computeSec + own.computeSec;
    if (here.overallSec > result[partition].overallSec)
      result[partition] = here;
  }
  return result;
}

namespace {
// Inputs and constants each partition reads (its members besides its callable nodes), sorted.
std::vector<std::vector<NodeId>> sourcesOfPartitions(const ir::Graph& graph, const plan::CutPlan& plan) {
  std::vector<std::vector<NodeId>> sourcesOf(plan.submodules.size());
  for (std::uint32_t p = 0; p < plan.submodules.size(); ++p) {
    std::vector<NodeId>& sources = sourcesOf[p];
    for (NodeId node : plan.submodules[p].nodes)
      for (ir::ValueId value : graph.inputs(node)) {
        if (value == ir::kNoValue)
          continue;
        NodeId producer = graph.producer(value);
        ir::NodeKind kind = graph.kind(producer);
        if (kind == ir::NodeKind::Input || kind == ir::NodeKind::Parameter)
          sources.push_back(producer);
      }
    std::sort(sources.begin(), sources.end());
    sources.erase(std::unique(sources.begin(), sources.end()), sources.end());
  }
  return sourcesOf;
}

// Communication bytes per (parent, child): each member output a child node reads, once.
std::vector<std::map<std::uint32_t, std::int64_t>> transferBytes(const ir::Graph& graph, const plan::CutPlan& plan,
                                                                 const IdVector<NodeId, NodeSize>& sizes) {
  std::size_t count = plan.submodules.size();
  std::map<NodeId, std::vector<std::uint32_t>> holders; // input/constant -> partitions holding it
  std::vector<std::vector<NodeId>> sourcesOf = sourcesOfPartitions(graph, plan);
  for (std::uint32_t p = 0; p < count; ++p)
    for (NodeId source : sourcesOf[p])
      holders[source].push_back(p);
  std::vector<std::map<std::uint32_t, std::int64_t>> edges(count); // per parent: child -> bytes
  for (std::uint32_t c = 0; c < count; ++c) {
    std::map<std::uint32_t, std::vector<NodeId>> readFrom; // parent -> producers read, distinct
    for (NodeId node : plan.submodules[c].nodes)
      for (ir::ValueId value : graph.inputs(node)) {
        if (value == ir::kNoValue)
          continue;
        NodeId producer = graph.producer(value);
        if (graph.isCallable(producer)) {
          std::uint32_t parent = plan.submoduleOf[producer];
          if (parent != c && parent != plan::kNoSubmodule)
            readFrom[parent].push_back(producer);
        } else if (auto held = holders.find(producer); held != holders.end()) {
          for (std::uint32_t parent : held->second)
            if (parent != c)
              readFrom[parent].push_back(producer);
        }
      }
    for (auto& [parent, producers] : readFrom) {
      std::sort(producers.begin(), producers.end());
      producers.erase(std::unique(producers.begin(), producers.end()), producers.end());
      std::int64_t bytes = 0;
      for (NodeId producer : producers)
        bytes += sizes[producer].outputBytes;
      edges[parent][c] = bytes;
    }
  }
  return edges;
}

// torch's parent/child relation comes from users of *callable or member* nodes of the parent
// that sit in the child; a shared input makes partitions parent and child of each other only
// through callable flow, so children are the partitions that read a callable output.
std::vector<std::vector<std::uint32_t>> childrenOfPartitions(const ir::Graph& graph, const plan::CutPlan& plan) {
  std::vector<std::vector<std::uint32_t>> children(plan.submodules.size());
  for (std::uint32_t p = 0; p < plan.submodules.size(); ++p)
    for (NodeId node : plan.submodules[p].nodes)
      for (ir::ValueId value : graph.outputs(node))
        for (NodeId user : graph.users(value)) {
          std::uint32_t c = plan.submoduleOf[user];
          if (c != plan::kNoSubmodule && c != p &&
              std::find(children[p].begin(), children[p].end(), c) == children[p].end())
            children[p].push_back(c);
        }
  return children;
}
} // namespace

Expected<CriticalPath> criticalPath(const ir::Graph& graph, const plan::CutPlan& plan,
                                    const std::vector<std::vector<std::int64_t>>& deviceIds,
                                    const std::vector<PartitionLatency>& latencies,
                                    const IdVector<NodeId, NodeSize>& sizes, const TransferRates& rates) {
  if (rates.uniformBytesPerSec <= 0)
    return Error(ErrorCode::InvalidArgument) << "the transfer rate must be positive";
  std::size_t count = plan.submodules.size();
  std::vector<std::map<std::uint32_t, std::int64_t>> edges = transferBytes(graph, plan, sizes);
  std::vector<std::vector<std::uint32_t>> children = childrenOfPartitions(graph, plan);
  std::vector<std::uint32_t> indegree(count, 0);
  for (const auto& list : children)
    for (std::uint32_t c : list)
      ++indegree[c];
  // Longest path in topological order (ties: the lowest partition first).
  std::vector<double> best(count, 0.0);
  std::vector<std::uint32_t> from(count, UINT32_MAX);
  std::priority_queue<std::uint32_t, std::vector<std::uint32_t>, std::greater<>> ready;
  for (std::uint32_t p = 0; p < count; ++p) {
    best[p] = latencies[p].overallSec;
    if (indegree[p] == 0)
      ready.push(p);
  }
  std::size_t visited = 0;
  while (!ready.empty()) {
    std::uint32_t p = ready.top();
    ready.pop();
    ++visited;
    for (std::uint32_t c : children[p]) {
      bool sameDevices = !deviceIds[p].empty() && deviceIds[p] == deviceIds[c];
      double rate = deviceIds[p].empty() || deviceIds[c].empty()
                        ? rates.uniformBytesPerSec
                        : rates.between(deviceIds[p].front(), deviceIds[c].front());
      double comm = sameDevices ? 0.0 : static_cast<double>(edges[p][c]) / rate;
      double candidate = best[p] + comm + latencies[c].overallSec;
      if (from[c] == UINT32_MAX || candidate > best[c]) { // latencies are >= 0: candidate >= best[c]
        best[c] = candidate;
        from[c] = p;
      }
      if (--indegree[c] == 0)
        ready.push(c);
    }
  }
  if (visited != count)
    return Error(ErrorCode::InvalidGraph) << "the partition graph has a cycle";
  CriticalPath path;
  std::uint32_t end = UINT32_MAX;
  for (std::uint32_t p = 0; p < count; ++p)
    if (children[p].empty() && (end == UINT32_MAX || best[p] > path.latencySec)) {
      path.latencySec = best[p];
      end = p;
    }
  for (std::uint32_t p = end; p != UINT32_MAX; p = from[p])
    path.partitions.push_back(p);
  std::reverse(path.partitions.begin(), path.partitions.end());
  return path;
}

} // namespace cleave::partition
