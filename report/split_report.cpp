#include "report/split_report.h"

#include "base/json_writer.h"

#include <algorithm>
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

// A DOT string literal: quotes and backslashes escaped, line breaks as DOT's \n.
std::string dotQuoted(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '\n')
      out += "\\n";
    else if (c == '"' || c == '\\')
      out += std::string("\\") + c;
    else
      out += c;
  }
  return out + "\"";
}

std::string formatQps(double qps) { return formatSi(qps, "qps"); }
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

Json segmentCostJson(const std::vector<split::OpSegmentCost>& costs) {
  Json list = Json::array();
  for (const split::OpSegmentCost& cost : costs)
    list.push_back({{"op", cost.op},
                    {"cpu_nodes", cost.cpuNodes},
                    {"submodules", cost.submodules},
                    {"submodules_if_supported", cost.submodulesIfSupported},
                    {"saved", cost.saved()}});
  return list;
}

void printSegmentCosts(const Json& segments, std::ostream& out) {
  if (segments.empty())
    return;
  out << "segments: submodules of the split if the accelerator also took an op (now "
      << segments[0]["submodules"].get<std::size_t>() << "):\n";
  for (const Json& cost : segments) {
    std::string label = cost["op"].get<std::string>() + " x" + std::to_string(cost["cpu_nodes"].get<std::size_t>());
    out << "  " << label << std::string(label.size() < 32 ? 32 - label.size() : 1, ' ')
        << cost["submodules_if_supported"].get<std::size_t>() << " (saves " << cost["saved"].get<std::size_t>()
        << ")\n";
  }
}

std::string supportDot(const ir::Graph& graph, const IdVector<NodeId, support::Decision>& decisions) {
  std::ostringstream dot;
  dot << "digraph support {\n  node [shape=box, style=filled, fontname=\"Helvetica\"];\n";
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId node{n};
    const char* color = !graph.isCallable(node) ? "lightgrey"
                        : decisions[node].supported ? "chartreuse1" : "crimson";
    std::string label = std::string(graph.name(node)) +
                        (graph.isCallable(node) ? "\n" + graph.target(node) : std::string());
    dot << "  n" << n << " [label=" << dotQuoted(label) << ", fillcolor=\"" << color << "\"];\n";
  }
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n)
    for (ValueId value : graph.inputs(NodeId{n}))
      if (value != ir::kNoValue)
        dot << "  n" << index(graph.producer(value)) << " -> n" << n << ";\n";
  dot << "}\n";
  return dot.str();
}

namespace {
struct CpuGroup {
  std::string op;
  split::SplitReason reason;
  std::uint32_t count = 0;
  std::string example;
};

// CPU nodes grouped by (op, reason), most frequent first, then by op and reason.
std::vector<CpuGroup> groupCpuReasons(const ir::Graph& graph, const plan::CutPlan& plan) {
  std::map<std::pair<std::string, split::SplitReason>, CpuGroup> groups;
  for (const plan::PlacementReason& reason : plan.reasons) {
    auto code = static_cast<split::SplitReason>(reason.code);
    CpuGroup& group = groups[{graph.target(reason.node), code}];
    if (group.count++ == 0) {
      group.op = graph.target(reason.node);
      group.reason = code;
      group.example = graph.name(reason.node);
    }
  }
  std::vector<CpuGroup> sorted;
  for (auto& [key, group] : groups)
    sorted.push_back(std::move(group));
  std::stable_sort(sorted.begin(), sorted.end(), [](const CpuGroup& a, const CpuGroup& b) { return a.count > b.count; });
  return sorted;
}

std::uint32_t accSubmodules(const plan::CutPlan& plan) {
  return static_cast<std::uint32_t>(std::count_if(plan.submodules.begin(), plan.submodules.end(), [](const plan::Submodule& sub) {
    return sub.role == plan::SubmoduleRole::Accelerator;
  }));
}

std::string_view reasonText(std::uint8_t code) { return split::splitReasonName(static_cast<split::SplitReason>(code)); }

Json trialJson(const SubmoduleTrialLine& trial) {
  Json entry = {{"submodule", trial.submodule}, {"outcome", trial.outcome}, {"max_abs", trial.maxAbs},
                {"max_rel", trial.maxRel}, {"max_scaled", trial.maxScaled}};
  if (!trial.message.empty())
    entry["message"] = trial.message;
  if (!trial.culpritNode.empty())
    entry["culprit"] = {{"node", trial.culpritNode}, {"op", trial.culpritOp}, {"outcome", trial.culpritOutcome},
                        {"message", trial.culpritMessage}};
  return entry;
}

void writeSubmodule(JsonWriter& out, const ir::Graph& graph, const plan::Submodule& sub,
                    const split::SubmodulePreview& preview) {
  out.beginObject();
  out.key("name").string(sub.name);
  out.key("role").string(plan::kSubmoduleRoles.name(sub.role));
  out.key("node_count").unsignedInteger(sub.nodes.size());
  out.key("input_bytes").integer(preview.inputBytes);
  out.key("output_bytes").integer(preview.outputBytes);
  if (preview.unknownInputs + preview.unknownOutputs > 0) { // symbolic dims: the bytes are a lower bound
    out.key("inputs_of_unknown_size").unsignedInteger(preview.unknownInputs);
    out.key("outputs_of_unknown_size").unsignedInteger(preview.unknownOutputs);
  }
  if (sub.role == plan::SubmoduleRole::Accelerator) {
    out.key("max_qps").number(preview.maxQps);
    out.key("warnings").beginArray();
    for (const std::string& warning : preview.warnings)
      out.string(warning);
    out.endArray();
  }
  out.key("nodes").beginArray();
  for (NodeId node : sub.nodes)
    out.string(graph.name(node));
  out.endArray();
  out.endObject();
}

void writeCpuReasons(JsonWriter& out, const ir::Graph& graph, const plan::CutPlan& plan) {
  out.key("cpu_reasons").beginArray();
  for (const CpuGroup& group : groupCpuReasons(graph, plan)) {
    out.beginObject();
    out.key("op").string(group.op);
    out.key("reason").string(split::splitReasonName(group.reason));
    out.key("count").unsignedInteger(group.count);
    out.key("example_node").string(group.example);
    out.endObject();
  }
  out.endArray();
  out.key("cpu_nodes").beginArray();
  for (const plan::PlacementReason& reason : plan.reasons) {
    out.beginObject();
    out.key("node").string(graph.name(reason.node));
    out.key("target").string(graph.target(reason.node));
    out.key("reason").string(reasonText(reason.code));
    out.key("detail").string(reason.detail);
    out.endObject();
  }
  out.endArray();
}
} // namespace

// Streamed (base/json_writer.h): it lists every node of a model that may have millions.
std::string splitReportJson(const ir::Graph& graph, const SplitReport& report) {
  const split::SplitResult& result = report.result;
  const plan::CutPlan& plan = result.plan;
  JsonWriter out(40 * graph.numNodes() + 160 * plan.reasons.size()); // a name a node, a record a CPU node
  out.beginObject();
  if (report.folding)
    out.key("simplify").tree(foldingJson(*report.folding));
  if (report.prologue && !report.prologue->nodes.empty()) {
    Json byOp = Json::object();
    for (const auto& [op, count] : report.prologue->byOp)
      byOp[op] = count;
    out.key("shape_prologue")
        .tree({{"nodes", report.prologue->nodes.size()},
               {"by_op", std::move(byOp)},
               {"submodules", report.result.plan.submodules.size()},
               {"submodules_without", report.submodulesWithoutPrologue}});
  }
  std::uint32_t acc = accSubmodules(plan);
  out.key("acc_subgraphs").unsignedInteger(acc);
  out.key("cpu_subgraphs").unsignedInteger(static_cast<std::uint32_t>(plan.submodules.size()) - acc);
  out.key("before_min_size").tree({{"acc_subgraphs", result.beforeMinSize.acc}, {"cpu_subgraphs", result.beforeMinSize.cpu}});
  out.key("after_min_size").tree({{"acc_subgraphs", result.afterMinSize.acc}, {"cpu_subgraphs", result.afterMinSize.cpu}});
  out.key("fusion_groups").tree(result.fusionGroups);
  out.key("subgraphs").beginArray();
  for (std::size_t s = 0; s < plan.submodules.size(); ++s)
    writeSubmodule(out, graph, plan.submodules[s], report.preview.submodules[s]);
  out.endArray();
  out.key("pcie_bytes_per_sec").tree(report.preview.linkBytesPerSecond);
  out.key("max_qps").tree(report.preview.maxQps);
  out.key("bottleneck").tree(report.preview.bottleneck);
  writeCpuReasons(out, graph, plan);
  out.key("remarks").tree(plan.remarks);
  if (!report.trialBackend.empty()) {
    Json trials = Json::array();
    for (const SubmoduleTrialLine& trial : report.trials)
      trials.push_back(trialJson(trial));
    out.key("lower_and_run").tree({{"backend", report.trialBackend}, {"submodules", std::move(trials)}});
  }
  out.endObject();
  return out.finish();
}

namespace {
// " + N of unknown size" after a byte count that leaves out values with symbolic dims.
std::string unknownSizes(std::uint32_t values) {
  return values == 0 ? "" : " + " + std::to_string(values) + " of unknown size";
}

void printSubmodules(const SplitReport& report, bool preview, std::ostream& out) {
  const plan::CutPlan& plan = report.result.plan;
  for (std::size_t s = 0; s < plan.submodules.size(); ++s) {
    const plan::Submodule& sub = plan.submodules[s];
    const split::SubmodulePreview& cost = report.preview.submodules[s];
    bool acc = sub.role == plan::SubmoduleRole::Accelerator;
    out << "  " << sub.name << ": " << sub.nodes.size() << " node(s)";
    if (preview || acc)
      out << ", in " << formatBytes(cost.inputBytes) << unknownSizes(cost.unknownInputs) << ", out "
          << formatBytes(cost.outputBytes) << unknownSizes(cost.unknownOutputs);
    if (acc && preview)
      out << ", PCIe bound " << formatQps(cost.maxQps);
    out << "\n";
    for (const std::string& warning : cost.warnings)
      out << "    warning: " << warning << ", this might cause problems during lowering\n";
  }
  if (!preview)
    return;
  std::size_t unsized = 0; // acc submodules whose seams carry values of unknown size
  for (std::size_t s = 0; s < plan.submodules.size(); ++s)
    unsized += plan.submodules[s].role == plan::SubmoduleRole::Accelerator &&
               report.preview.submodules[s].unknownInputs + report.preview.submodules[s].unknownOutputs > 0;
  out << "PCIe bound: " << formatQps(report.preview.maxQps)
      << ", bottleneck: " << (report.preview.bottleneck.empty() ? "none" : report.preview.bottleneck);
  if (unsized > 0)
    out << " (an upper bound: " << unsized << " acc submodule(s) move values of unknown size)";
  out << "\n";
}

void printTrials(const SplitReport& report, std::ostream& out) {
  if (report.trialBackend.empty())
    return;
  out << "lower and run on " << report.trialBackend << ":\n";
  for (const SubmoduleTrialLine& trial : report.trials) {
    out << "  " << trial.submodule << ": " << trial.outcome;
    if (!trial.message.empty())
      out << " (" << trial.message << ")";
    out << "\n";
    if (!trial.culpritNode.empty())
      out << "    culprit: " << trial.culpritNode << " (" << trial.culpritOp << "): " << trial.culpritOutcome << "\n";
  }
}

void printCpuReasons(const ir::Graph& graph, const plan::CutPlan& plan, std::ostream& out) {
  if (plan.reasons.empty())
    return;
  out << "cpu nodes by op and reason:\n";
  for (const CpuGroup& group : groupCpuReasons(graph, plan))
    out << "  " << group.op << " x" << group.count << ": " << split::splitReasonName(group.reason) << " (e.g. "
        << group.example << ")\n";
  out << "cpu nodes and why:\n";
  for (const plan::PlacementReason& reason : plan.reasons) {
    out << "  " << graph.name(reason.node) << " (" << graph.target(reason.node) << "): " << reasonText(reason.code);
    if (!reason.detail.empty())
      out << " - " << reason.detail;
    out << "\n";
  }
}
} // namespace


std::string splitDot(const ir::Graph& graph, const plan::CutPlan& plan) {
  std::ostringstream dot;
  dot << "digraph split {\n  rankdir=TB;\n  node [shape=box, style=filled, fontname=\"Helvetica\", fillcolor=white];\n";
  for (std::uint32_t s = 0; s < plan.submodules.size(); ++s) {
    const plan::Submodule& sub = plan.submodules[s];
    bool acc = sub.role == plan::SubmoduleRole::Accelerator;
    dot << "  subgraph cluster_" << s << " {\n    label=" << dotQuoted(sub.name) << ";\n    style=filled;\n"
        << "    fillcolor=\"" << (acc ? "#d9f2d0" : "#e6e6e6") << "\";\n";
    for (NodeId node : sub.nodes) {
      std::string label = std::string(graph.name(node)) + "\n" + graph.target(node);
      if (const plan::PlacementReason* reason = plan::reasonOf(plan, node))
        label += "\n(" + std::string(reasonText(reason->code)) + ")";
      dot << "    n" << index(node) << " [label=" << dotQuoted(label) << "];\n";
    }
    dot << "  }\n";
  }
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId node{n};
    if (graph.kind(node) == ir::NodeKind::Input || graph.kind(node) == ir::NodeKind::Output)
      dot << "  n" << n << " [shape=ellipse, label=" << dotQuoted(graph.name(node)) << "];\n";
  }
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n)
    for (ValueId value : graph.inputs(NodeId{n}))
      if (value != ir::kNoValue && graph.kind(graph.producer(value)) != ir::NodeKind::Parameter)
        dot << "  n" << index(graph.producer(value)) << " -> n" << n << ";\n";
  dot << "}\n";
  return dot.str();
}

std::string splitReportText(const ir::Graph& graph, const SplitReport& report, bool preview) {
  const split::SplitResult& result = report.result;
  std::uint32_t acc = accSubmodules(result.plan);
  std::ostringstream out;
  if (report.folding)
    out << foldingText(*report.folding);
  if (report.prologue && !report.prologue->nodes.empty()) {
    out << "shape prologue: " << report.prologue->nodes.size()
        << " integer shape node(s) of dynamic dims kept with the acc submodules that read them (run on the host "
           "before them where the profile does not take them):";
    for (const auto& [op, count] : report.prologue->byOp)
      out << " " << op << " " << count;
    out << "; the cut has " << result.plan.submodules.size() << " submodule(s), " << report.submodulesWithoutPrologue
        << " without it\n";
  }
  out << "subgraphs: " << acc << " acc, " << result.plan.submodules.size() - acc << " cpu"
      << " (before removing small acc subgraphs: " << result.beforeMinSize.acc << " acc, " << result.beforeMinSize.cpu
      << " cpu; after: " << result.afterMinSize.acc << " acc, " << result.afterMinSize.cpu << " cpu)\n";
  if (result.fusionGroups)
    out << "fusion groups: " << result.fusionGroups << "\n";
  printSubmodules(report, preview, out);
  printTrials(report, out);
  for (const std::string& remark : result.plan.remarks)
    out << "note: " << remark << "\n";
  printCpuReasons(graph, result.plan, out);
  return out.str();
}

} // namespace cleave::report
