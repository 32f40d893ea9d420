#include "report/split_report.h"

#include <cstdio>
#include <map>
#include <sstream>

namespace cleave::report {
using ir::NodeId;
using ir::ValueId;

namespace {
std::string inputDtypes(const ir::Graph& graph, NodeId node) {
  std::string text = "(";
  bool first = true;
  for (ValueId value : graph.inputs(node)) {
    text += first ? "" : ", ";
    first = false;
    if (value == ir::kNoValue)
      text += "_";
    else if (graph.valueKind(value) == ir::ValueKind::Tensor)
      text += ir::dtypeName(graph.dtype(value));
    else
      text += ir::valueKindName(graph.valueKind(value));
  }
  return text + ")";
}

std::string formatQps(double qps) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", qps);
  return text;
}
} // namespace

Json supportJson(const ir::Graph& graph, const IdVector<NodeId, support::Decision>& decisions,
                 const std::string& profileName) {
  struct Entry {
    bool supported;
    std::uint32_t count = 0;
    std::string reason;
    std::string example;
  };
  std::map<std::pair<std::string, std::string>, Entry> types; // (op, input dtypes)
  std::uint32_t callable = 0, supported = 0;
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId node{n};
    if (!graph.isCallable(node))
      continue;
    ++callable;
    const support::Decision& decision = decisions[node];
    supported += decision.supported;
    Entry& entry = types[{graph.target(node), inputDtypes(graph, node)}];
    if (entry.count++ == 0) {
      entry.supported = decision.supported;
      entry.example = graph.name(node);
      entry.reason = decision.supported ? "" : std::string(support::reasonName(decision.reason)) +
                                                   (decision.detail.empty() ? "" : ": " + decision.detail);
    }
    entry.supported = entry.supported && decision.supported;
  }
  Json out;
  out["profile"] = profileName;
  out["callable_nodes"] = callable;
  out["supported_nodes"] = supported;
  Json list = Json::array();
  for (const auto& [key, entry] : types) {
    Json item;
    item["op"] = key.first;
    item["input_dtypes"] = key.second;
    item["supported"] = entry.supported;
    item["count"] = entry.count;
    item["example_node"] = entry.example;
    if (!entry.supported)
      item["reason"] = entry.reason;
    list.push_back(std::move(item));
  }
  out["op_types"] = std::move(list);
  return out;
}

void printSupportText(const Json& support, std::ostream& out) {
  std::uint32_t callable = support["callable_nodes"], supported = support["supported_nodes"];
  out << "profile: " << support["profile"].get<std::string>() << "\n";
  for (bool wanted : {true, false}) {
    out << (wanted ? "supported:\n" : "unsupported:\n");
    for (const Json& item : support["op_types"]) {
      if (item["supported"].get<bool>() != wanted)
        continue;
      std::string label = item["op"].get<std::string>() + " " + item["input_dtypes"].get<std::string>();
      out << "  " << label << std::string(label.size() < 44 ? 44 - label.size() : 1, ' ')
          << item["count"].get<std::uint32_t>();
      if (!wanted)
        out << "  " << item["reason"].get<std::string>();
      out << "\n";
    }
  }
  char percent[16];
  std::snprintf(percent, sizeof percent, "%.1f", callable ? 100.0 * supported / callable : 0.0);
  out << "summary: " << supported << " of " << callable << " callable nodes supported (" << percent << "%)\n";
}

std::string supportDot(const ir::Graph& graph, const IdVector<NodeId, support::Decision>& decisions) {
  std::ostringstream dot;
  dot << "digraph support {\n  node [shape=box, style=filled, fontname=\"Helvetica\"];\n";
  auto quoted = [](std::string_view text) {
    std::string out = "\"";
    for (char c : text)
      out += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    return out + "\"";
  };
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId node{n};
    const char* color = !graph.isCallable(node) ? "lightgrey"
                        : decisions[node].supported ? "chartreuse1" : "crimson";
    std::string label = std::string(graph.name(node)) +
                        (graph.isCallable(node) ? "\\n" + graph.target(node) : std::string());
    dot << "  n" << n << " [label=" << quoted(label) << ", fillcolor=\"" << color << "\"];\n";
  }
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n)
    for (ValueId value : graph.inputs(NodeId{n}))
      if (value != ir::kNoValue)
        dot << "  n" << index(graph.producer(value)) << " -> n" << n << ";\n";
  dot << "}\n";
  return dot.str();
}

Json splitJson(const ir::Graph& graph, const split::SplitResult& result,
               const std::vector<plan::Boundary>& boundaries, const SplitReportOptions& options) {
  const plan::CutPlan& plan = result.plan;
  Json out;
  std::uint32_t acc = 0;
  for (const plan::Submodule& sub : plan.submodules)
    acc += sub.isAcc;
  out["acc_subgraphs"] = acc;
  out["cpu_subgraphs"] = static_cast<std::uint32_t>(plan.submodules.size()) - acc;
  out["before_min_size"] = {{"acc_subgraphs", result.beforeMinSize.acc}, {"cpu_subgraphs", result.beforeMinSize.cpu}};
  out["after_min_size"] = {{"acc_subgraphs", result.afterMinSize.acc}, {"cpu_subgraphs", result.afterMinSize.cpu}};
  out["fusion_groups"] = result.fusionGroups;
  Json subgraphs = Json::array();
  double maxQps = options.pcieBytesPerSecond;
  std::string bottleneck;
  for (std::uint32_t s = 0; s < plan.submodules.size(); ++s) {
    const plan::Submodule& sub = plan.submodules[s];
    Json entry;
    entry["name"] = sub.name;
    entry["is_acc"] = sub.isAcc;
    std::int64_t inBytes = 0, outBytes = 0;
    Json warnings = Json::array();
    for (ValueId value : boundaries[s].inputs) {
      if (graph.valueKind(value) != ir::ValueKind::Tensor)
        warnings.push_back("input " + std::string(graph.valueName(value)) + " is not a tensor");
      inBytes += std::max<std::int64_t>(graph.bytes(value), 0);
    }
    for (ValueId value : boundaries[s].outputs) {
      if (graph.valueKind(value) != ir::ValueKind::Tensor)
        warnings.push_back("output " + std::string(graph.valueName(value)) + " is not a tensor");
      outBytes += std::max<std::int64_t>(graph.bytes(value), 0);
    }
    entry["node_count"] = sub.nodes.size();
    entry["input_bytes"] = inBytes;
    entry["output_bytes"] = outBytes;
    if (sub.isAcc) {
      std::int64_t bound = std::max(inBytes, outBytes);
      double qps = bound > 0 ? options.pcieBytesPerSecond / static_cast<double>(bound) : options.pcieBytesPerSecond;
      entry["max_qps"] = qps;
      if (qps < maxQps) {
        maxQps = qps;
        bottleneck = sub.name;
      }
      entry["warnings"] = std::move(warnings);
    }
    Json nodes = Json::array();
    for (NodeId node : sub.nodes)
      nodes.push_back(std::string(graph.name(node)));
    entry["nodes"] = std::move(nodes);
    subgraphs.push_back(std::move(entry));
  }
  out["subgraphs"] = std::move(subgraphs);
  out["max_qps"] = maxQps;
  out["bottleneck"] = bottleneck;
  Json cpuNodes = Json::array();
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId node{n};
    if (!graph.isCallable(node) || plan.placement[node] == plan::Placement::Accelerator)
      continue;
    cpuNodes.push_back({{"node", std::string(graph.name(node))},
                        {"target", graph.target(node)},
                        {"reason", std::string(plan::placementName(plan.placement[node]))},
                        {"detail", plan.detail[node]}});
  }
  out["cpu_nodes"] = std::move(cpuNodes);
  Json remarks = Json::array();
  for (const std::string& remark : plan.remarks)
    remarks.push_back(remark);
  out["remarks"] = std::move(remarks);
  return out;
}

void printSplitText(const Json& split, bool preview, std::ostream& out) {
  const Json& before = split["before_min_size"];
  const Json& after = split["after_min_size"];
  out << "subgraphs: " << split["acc_subgraphs"].get<std::uint32_t>() << " acc, "
      << split["cpu_subgraphs"].get<std::uint32_t>() << " cpu";
  out << " (before removing small acc subgraphs: " << before["acc_subgraphs"].get<std::uint32_t>() << " acc, "
      << before["cpu_subgraphs"].get<std::uint32_t>() << " cpu; after: " << after["acc_subgraphs"].get<std::uint32_t>()
      << " acc, " << after["cpu_subgraphs"].get<std::uint32_t>() << " cpu)\n";
  if (split["fusion_groups"].get<std::uint32_t>())
    out << "fusion groups: " << split["fusion_groups"].get<std::uint32_t>() << "\n";
  for (const Json& sub : split["subgraphs"]) {
    out << "  " << sub["name"].get<std::string>() << ": " << sub["node_count"].get<std::size_t>() << " node(s)";
    if (preview || sub["is_acc"].get<bool>())
      out << ", in " << formatBytes(sub["input_bytes"].get<std::int64_t>()) << ", out "
          << formatBytes(sub["output_bytes"].get<std::int64_t>());
    if (sub["is_acc"].get<bool>() && preview)
      out << ", max qps (PCIe bound) " << formatQps(sub["max_qps"].get<double>());
    out << "\n";
    if (sub.contains("warnings"))
      for (const Json& warning : sub["warnings"])
        out << "    warning: " << warning.get<std::string>() << ", this might cause problems during lowering\n";
  }
  if (preview)
    out << "max qps (PCIe bound): " << formatQps(split["max_qps"].get<double>()) << ", bottleneck: "
        << (split["bottleneck"].get<std::string>().empty() ? "none" : split["bottleneck"].get<std::string>()) << "\n";
  if (split.contains("lower_and_run")) {
    const Json& trials = split["lower_and_run"];
    out << "lower and run on " << trials["backend"].get<std::string>() << ":\n";
    for (const Json& trial : trials["submodules"]) {
      out << "  " << trial["submodule"].get<std::string>() << ": " << trial["outcome"].get<std::string>();
      if (trial.contains("message"))
        out << " (" << trial["message"].get<std::string>() << ")";
      out << "\n";
      if (trial.contains("culprit"))
        out << "    culprit: " << trial["culprit"]["node"].get<std::string>() << " ("
            << trial["culprit"]["op"].get<std::string>() << "): " << trial["culprit"]["outcome"].get<std::string>()
            << "\n";
    }
  }
  for (const Json& remark : split["remarks"])
    out << "note: " << remark.get<std::string>() << "\n";
  if (!split["cpu_nodes"].empty()) {
    out << "cpu nodes and why:\n";
    for (const Json& node : split["cpu_nodes"]) {
      out << "  " << node["node"].get<std::string>() << " (" << node["target"].get<std::string>() << "): "
          << node["reason"].get<std::string>();
      if (!node["detail"].get<std::string>().empty())
        out << " - " << node["detail"].get<std::string>();
      out << "\n";
    }
  }
}

} // namespace cleave::report
