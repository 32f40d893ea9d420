#include "split/acc_nodes.h"

#include <algorithm>
#include <deque>

namespace cleave::split {
using ir::NodeId;

bool producesTensor(const ir::Graph& graph, NodeId node) {
  auto outputs = graph.outputs(node);
  if (outputs.empty())
    return false;
  for (ir::ValueId value : outputs)
    if (graph.valueKind(value) != ir::ValueKind::Tensor)
      return false;
  return true;
}

bool hasTensorMeta(const ir::Graph& graph, NodeId node) {
  for (ir::ValueId value : graph.outputs(node)) {
    ir::ValueKind kind = graph.valueKind(value);
    if (kind == ir::ValueKind::Tensor || kind == ir::ValueKind::Sequence)
      return true;
  }
  return false;
}

namespace {
template <typename Visit> void forEachUser(const ir::Graph& graph, NodeId node, Visit&& visit) {
  auto outputs = graph.outputs(node);
  if (outputs.size() == 1) {
    for (NodeId user : graph.users(outputs[0]))
      visit(user);
    return;
  }
  std::vector<NodeId> users; // several outputs: each user once, in id order
  for (ir::ValueId value : outputs)
    users.insert(users.end(), graph.users(value).begin(), graph.users(value).end());
  std::sort(users.begin(), users.end());
  users.erase(std::unique(users.begin(), users.end()), users.end());
  for (NodeId user : users)
    visit(user);
}
} // namespace

AccNodes findAccNodes(const ir::Graph& graph, const IdVector<NodeId, support::Decision>& decisions,
                      bool allowNonTensor) {
  AccNodes result;
  std::uint32_t count = graph.numNodes();
  result.isAcc = IdVector<NodeId, std::uint8_t>(count, 0);
  result.reason = IdVector<NodeId, SplitReason>(count, SplitReason::Accelerator);
  result.detail = IdVector<NodeId, std::string>(count);
  for (std::uint32_t n = 0; n < count; ++n) {
    NodeId node{n};
    if (!graph.isCallable(node))
      continue;
    const support::Decision& decision = decisions[node];
    result.isAcc[node] = decision.supported ? 1 : 0;
    if (!decision.supported) {
      result.reason[node] = rejectedByProfile(decision.reason);
      result.detail[node] = decision.detail;
    }
  }
  if (allowNonTensor)
    return result;

  auto demote = [&](NodeId node, const std::string& why) {
    result.isAcc[node] = 0;
    result.reason[node] = SplitReason::NonTensorBoundary;
    result.detail[node] = why;
  };
  // (1) CPU nodes with non-tensor outputs push their acc users to the CPU, transitively.
  auto propagateFromCpu = [&](std::deque<NodeId>& worklist) {
    while (!worklist.empty()) {
      NodeId node = worklist.front();
      worklist.pop_front();
      forEachUser(graph, node, [&](NodeId user) {
        if (!result.isAcc[user])
          return;
        demote(user, "reads non-tensor value of CPU node '" + std::string(graph.name(node)) + "'");
        if (!producesTensor(graph, user))
          worklist.push_back(user);
      });
    }
  };
  std::deque<NodeId> worklist;
  for (std::uint32_t n = 0; n < count; ++n) {
    NodeId node{n};
    if (graph.isCallable(node) && !result.isAcc[node] && !producesTensor(graph, node))
      worklist.push_back(node);
  }
  propagateFromCpu(worklist);
  // (2) acc nodes whose non-tensor output reaches a CPU node (or the graph output).
  while (true) {
    std::vector<NodeId> demoted;
    for (std::uint32_t n = 0; n < count; ++n) {
      NodeId node{n};
      if (!result.isAcc[node] || producesTensor(graph, node))
        continue;
      bool cpuUser = false;
      forEachUser(graph, node, [&](NodeId user) { cpuUser = cpuUser || !result.isAcc[user]; });
      if (cpuUser)
        demoted.push_back(node);
    }
    if (demoted.empty())
      break;
    for (NodeId node : demoted) {
      demote(node, "passes a non-tensor value to a CPU node");
      worklist.push_back(node);
    }
    propagateFromCpu(worklist);
  }
  return result;
}

} // namespace cleave::split
