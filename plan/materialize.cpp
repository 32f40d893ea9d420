#include "plan/materialize.h"

#include <algorithm>
#include <filesystem>

#include "base/file_io.h"
#include "io/onnx.h"
#include "ir/builder.h"

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
  auto typeOf = [&](ValueId value) { return types ? (*types)[value] : graph.valueType(value); };
  ir::GraphBuilder builder(graph.modelInfo().format);
  ir::ModelInfo info = graph.modelInfo();
  info.graphName = sub.name;
  info.producerName = "cleave";
  builder.modelInfo() = info;
  builder.setModelFile(graph.modelFile());
  for (ValueId value : boundaries[submodule].inputs)
    builder.addInput(graph.valueName(value), typeOf(value));
  // Parameters the submodule reads, once each, in value order.
  std::vector<NodeId> params;
  for (NodeId node : sub.nodes)
    for (ValueId value : graph.inputs(node))
      if (value != ir::kNoValue && graph.kind(graph.producer(value)) == ir::NodeKind::Parameter)
        params.push_back(graph.producer(value));
  for (ValueId value : boundaries[submodule].outputs) // parameters it sends (transmit)
    if (graph.kind(graph.producer(value)) == ir::NodeKind::Parameter)
      params.push_back(graph.producer(value));
  std::sort(params.begin(), params.end());
  params.erase(std::unique(params.begin(), params.end()), params.end());
  const std::vector<ValueId>& taken = boundaries[submodule].inputs;
  for (NodeId paramNode : params) {
    if (std::find(taken.begin(), taken.end(), graph.outputs(paramNode)[0]) != taken.end())
      continue; // sent by the submodule that owns it
    for (ir::ParamId param : graph.parameters(paramNode)) {
      ir::Parameter copy = graph.parameter(param);
      if (copy.data.source == ir::ParameterData::Source::Inline) {
        CLEAVE_TRY(std::string bytes, graph.readParameterData(param));
        copy.data = builder.appendInlineData(bytes);
      }
      builder.addParameter(std::move(copy), graph.valueType(graph.outputs(paramNode)[0]));
    }
  }
  for (NodeId node : sub.nodes) {
    ir::NodeSpec spec;
    spec.kind = graph.kind(node);
    spec.name = graph.name(node);
    spec.domain = graph.opDomain(node);
    spec.opType = graph.opType(node);
    spec.scope = graph.scope(node);
    spec.implicitInputs = graph.numImplicitInputs(node);
    for (ValueId value : graph.inputs(node))
      spec.inputs.emplace_back(value == ir::kNoValue ? std::string_view() : graph.valueName(value));
    for (ValueId value : graph.outputs(node))
      spec.outputs.push_back({std::string(graph.valueName(value)), typeOf(value)});
    spec.attributes.assign(graph.attributes(node).begin(), graph.attributes(node).end());
    for (ir::ParamId param : graph.parameters(node))
      if (graph.kind(node) != ir::NodeKind::Parameter)
        spec.parameters.push_back(graph.parameter(param));
    builder.addNode(spec);
  }
  std::vector<std::string> outputs;
  for (ValueId value : boundaries[submodule].outputs)
    outputs.emplace_back(graph.valueName(value));
  builder.setOutputs(std::move(outputs));
  return std::move(builder).finish();
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
    entry.isAcc = sub.isAcc;
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
