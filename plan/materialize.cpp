#include "plan/materialize.h"

#include <algorithm>
#include <filesystem>

#include "base/file_io.h"
#include "io/onnx.h"
#include "ir/extract.h"

namespace cleave::plan {
using ir::NodeId;
using ir::ValueId;

std::vector<Boundary> computeBoundaries(const ir::Graph& graph, const CutPlan& plan,
                                        const std::vector<std::pair<ValueId, std::uint32_t>>& transmitted) {
  std::vector<Boundary> boundaries(plan.submodules.size());
  std::vector<std::uint32_t> lastReader(plan.submodules.size(), UINT32_MAX);
  for (std::uint32_t v = 0; v < graph.numValues(); ++v) {
    ValueId value{v};
    NodeId producer = graph.producer(value);
    if (graph.kind(producer) == ir::NodeKind::Parameter)
      continue; // copied into each submodule that reads it
    std::uint32_t from = plan.submoduleOf[producer];
    bool neededOutside = false;
    for (NodeId user : graph.users(value)) {
      std::uint32_t to = plan.submoduleOf[user];
      if (to == from)
        continue;
      if (to == kNoSubmodule) { // the graph output
        neededOutside = true;
        continue;
      }
      neededOutside = true;
      if (lastReader[to] != v) {
        lastReader[to] = v;
        boundaries[to].inputs.push_back(value);
      }
    }
    if (from != kNoSubmodule && neededOutside)
      boundaries[from].outputs.push_back(value);
  }
  for (const auto& [value, owner] : transmitted) {
    std::vector<std::uint8_t> reads(plan.submodules.size(), 0);
    for (NodeId user : graph.users(value))
      if (std::uint32_t to = plan.submoduleOf[user]; to != kNoSubmodule && to != owner)
        reads[to] = 1;
    bool sent = false;
    for (std::uint32_t s = 0; s < reads.size(); ++s)
      if (reads[s]) {
        boundaries[s].inputs.push_back(value);
        sent = true;
      }
    if (sent)
      boundaries[owner].outputs.push_back(value);
  }
  return boundaries;
}

Expected<ir::Graph> extractSubmodule(const ir::Graph& graph, const CutPlan& plan,
                                     const std::vector<Boundary>& boundaries, std::uint32_t submodule,
                                     const IdVector<ValueId, ir::ValueType>* types) {
  const Submodule& sub = plan.submodules[submodule];
  return ir::extractSubgraph(graph, {sub.name, sub.nodes, boundaries[submodule].inputs,
                                     boundaries[submodule].outputs, types});
}

PlanFile describePlan(const ir::Graph& graph, const CutPlan& plan, const std::vector<Boundary>& boundaries,
                      const std::string& modelPath, const Json& extra, bool withFiles) {
  PlanFile out;
  out.kind = plan.kind;
  out.model = modelPath;
  out.extra = extra.is_object() ? extra : Json::object();
  auto sourceOf = [&](ValueId value) -> std::string {
    std::uint32_t from = plan.submoduleOf[graph.producer(value)];
    if (from == kNoSubmodule && graph.kind(graph.producer(value)) == ir::NodeKind::Parameter)
      for (std::uint32_t s = 0; s < boundaries.size(); ++s) // a transmitted parameter: its owner
        if (std::find(boundaries[s].outputs.begin(), boundaries[s].outputs.end(), value) != boundaries[s].outputs.end())
          return plan.submodules[s].name;
    return from == kNoSubmodule ? "input" : plan.submodules[from].name;
  };
  for (std::uint32_t s = 0; s < plan.submodules.size(); ++s) {
    const Submodule& sub = plan.submodules[s];
    PlanFileSubmodule& entry = out.submodules.emplace_back();
    entry.name = sub.name;
    entry.role = sub.role;
    entry.devices = sub.devices;
    if (withFiles && graph.modelInfo().format != ir::SourceFormat::Fx)
      entry.file = sub.name + ".onnx";
    for (ValueId value : boundaries[s].inputs)
      entry.inputs.push_back({std::string(graph.valueName(value)), sourceOf(value)});
    for (ValueId value : boundaries[s].outputs)
      entry.outputs.emplace_back(graph.valueName(value));
    for (NodeId node : sub.nodes)
      entry.nodes.emplace_back(graph.name(node));
  }
  for (ValueId value : graph.graphOutputs())
    out.outputs.push_back({std::string(graph.valueName(value)), sourceOf(value)});
  // Every value that crosses a seam, described once (first seen: submodule inputs in plan order,
  // then their outputs, then the graph's outputs).
  std::vector<std::uint8_t> described(graph.numValues(), 0);
  auto describe = [&](ValueId value) {
    if (!described[index(value)]) {
      described[index(value)] = 1;
      out.values.push_back(describeValue(graph, value));
    }
  };
  for (const Boundary& boundary : boundaries) {
    for (ValueId value : boundary.inputs)
      describe(value);
    for (ValueId value : boundary.outputs)
      describe(value);
  }
  for (ValueId value : graph.graphOutputs())
    describe(value);
  return out;
}

namespace {
std::string assignmentJson(const ir::Graph& graph, const CutPlan& plan) {
  Json out;
  out["schema"] = "cleave.fx_assignment";
  out["version"] = 1;
  Json tags = Json::array();
  for (const Submodule& sub : plan.submodules)
    tags.push_back(sub.name);
  out["tags"] = std::move(tags);
  Json nodes = Json::object();
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n)
    if (plan.submoduleOf[NodeId{n}] != kNoSubmodule)
      nodes[std::string(graph.name(NodeId{n}))] = plan.submodules[plan.submoduleOf[NodeId{n}]].name;
  out["nodes"] = std::move(nodes);
  return dumpJson(out);
}
} // namespace

Status materialize(const ir::Graph& graph, const CutPlan& plan, const std::string& modelPath,
                   OutputDirectory& out, const Json& extra, const MaterializeOptions& options) {
  CLEAVE_CHECK(verify(graph, plan));
  std::vector<Boundary> boundaries = computeBoundaries(graph, plan, options.transmitted);
  const std::string& staging = out.stagingPath();
  bool fx = graph.modelInfo().format == ir::SourceFormat::Fx;
  PlanFile described = describePlan(graph, plan, boundaries, modelPath, extra, options.writeSubmodels);
  CLEAVE_CHECK(verifyPlanFile(described));
  CLEAVE_CHECK(writeFileAtomically(staging + "/plan.json", formatPlanFile(described)));
  if (fx)
    CLEAVE_CHECK(writeFileAtomically(staging + "/assignment.json", assignmentJson(graph, plan)));
  else if (options.writeSubmodels)
    for (std::uint32_t s = 0; s < plan.submodules.size(); ++s) {
      CLEAVE_TRY(ir::Graph sub, extractSubmodule(graph, plan, boundaries, s));
      CLEAVE_CHECK(io::writeOnnx(sub, staging + "/" + plan.submodules[s].name + ".onnx"));
    }
  for (const auto& [name, contents] : options.extraFiles)
    CLEAVE_CHECK(writeFileAtomically(staging + "/" + name, contents));
  return out.commit();
}

} // namespace cleave::plan
