#include "pipeline/stages.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "base/json.h"
#include "pipeline/balance.h"

namespace cleave::pipeline {
using ir::NodeId;
using ir::ValueId;

std::optional<Policy> parsePolicy(std::string_view name) {
  if (name == "equal_nodes") return Policy::EqualNodes;
  if (name == "equal_params") return Policy::EqualParams;
  if (name == "equal_flops") return Policy::EqualFlops;
  if (name == "equal_latency") return Policy::EqualLatency;
  if (name == "optimal") return Policy::Optimal;
  return std::nullopt;
}

std::string_view policyName(Policy policy) {
  switch (policy) {
  case Policy::EqualNodes: return "equal_nodes";
  case Policy::EqualParams: return "equal_params";
  case Policy::EqualFlops: return "equal_flops";
  case Policy::EqualLatency: return "equal_latency";
  case Policy::Optimal: return "optimal";
  }
  return "?";
}

std::optional<Balance> parseBalance(std::string_view name) {
  if (name == "nodes") return Balance::Nodes;
  if (name == "params") return Balance::Params;
  if (name == "flops") return Balance::Flops;
  if (name == "latency") return Balance::Latency;
  return std::nullopt;
}

namespace {
std::string_view balanceName(Balance balance) {
  switch (balance) {
  case Balance::Nodes: return "nodes";
  case Balance::Params: return "params";
  case Balance::Flops: return "flops";
  case Balance::Latency: return "latency";
  }
  return "?";
}

bool isMarker(const ir::Graph& graph, NodeId node) {
  if (!graph.isCallable(node))
    return false;
  std::string_view op = graph.opType(node);
  if (graph.modelInfo().format == ir::SourceFormat::Fx)
    return op.size() >= 10 && op.substr(op.size() - 10) == "pipe_split";
  return op == "PipeSplit" && graph.opDomain(node) == "cleave";
}

bool inScope(std::string_view scope, std::string_view wanted) {
  return scope == wanted || (scope.size() > wanted.size() && scope.substr(0, wanted.size()) == wanted &&
                             scope[wanted.size()] == '.');
}

} // namespace

Expected<SplitSpec> parseSplitSpec(std::string_view text, const std::string& sourceName) {
  CLEAVE_TRY(nlohmann::json doc, parseJsonInput(text, sourceName));
  auto fail = [&](const std::string& what) { return Error(ErrorCode::ParseError) << sourceName << ": " << what; };
  if (!doc.is_object())
    return fail("expected a JSON object");
  SplitSpec spec;
  for (auto& [key, value] : doc.items()) {
    if (key == "split_spec") {
      if (!value.is_object())
        return fail("split_spec: expected {\"module\": \"BEGINNING\" | \"END\"}");
      for (auto& [scope, point] : value.items()) {
        std::string where = point.is_string() ? point.get<std::string>() : "";
        std::transform(where.begin(), where.end(), where.begin(), [](unsigned char ch) { return std::toupper(ch); });
        if (where != "BEGINNING" && where != "END")
          return fail("split_spec." + scope + ": expected BEGINNING or END");
        spec.scopes.emplace_back(scope, where == "BEGINNING");
      }
    } else if (key == "split_before" || key == "split_after") {
      if (!value.is_array())
        return fail(key + ": expected a list of node names");
      for (const auto& name : value) {
        if (!name.is_string())
          return fail(key + ": expected node names");
        (key == "split_before" ? spec.before : spec.after).push_back(name.get<std::string>());
      }
    } else {
      return fail("unknown key '" + key + "' (split_spec, split_before, split_after)");
    }
  }
  if (spec.scopes.empty() && spec.before.empty() && spec.after.empty())
    return fail("no split points");
  return spec;
}

namespace {
struct Units {
  std::vector<NodeId> nodes;                          // callable, not markers
  std::vector<std::pair<NodeId, std::size_t>> markers; // marker, units before it
};

Units unitsOf(const ir::Graph& graph) {
  Units units;
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId node{n};
    if (isMarker(graph, node))
      units.markers.push_back({node, units.nodes.size()});
    else if (graph.isCallable(node))
      units.nodes.push_back(node);
  }
  return units;
}

// Cut positions -> stage starts; a cut at 0 or at the end, or repeated, would leave a stage
// empty: `describe` names what asked for it.
Expected<std::vector<std::size_t>> startsFromCuts(const std::vector<std::pair<std::size_t, std::string>>& cuts,
                                                  std::size_t count, bool collapseRepeats) {
  std::vector<std::size_t> starts{0};
  std::vector<std::pair<std::size_t, std::string>> sorted = cuts;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [position, what] : sorted) {
    if (position == 0 || position >= count)
      return Error(ErrorCode::InvalidArgument) << what << " would leave stage " << (position == 0 ? 0 : starts.size())
                                               << " empty";
    if (position == starts.back()) {
      if (collapseRepeats)
        continue;
      return Error(ErrorCode::InvalidArgument) << what << " would leave stage " << starts.size() - 1 << " empty";
    }
    starts.push_back(position);
  }
  return starts;
}

// Per unit: bytes of the parameters it is the first to read (and, in FX, its module's own).
std::vector<double> firstReadParamBytes(const ir::Graph& graph, const std::vector<NodeId>& units) {
  std::set<std::string> seen;
  std::vector<double> bytes;
  for (NodeId node : units) {
    double total = 0;
    auto take = [&](ir::ParamId param) {
      const ir::Parameter& p = graph.parameter(param);
      if (seen.insert(p.name).second)
        total += static_cast<double>(p.bytes);
    };
    for (ValueId value : graph.inputs(node))
      if (value != ir::kNoValue && graph.kind(graph.producer(value)) == ir::NodeKind::Parameter)
        for (ir::ParamId param : graph.parameters(graph.producer(value)))
          take(param);
    for (ir::ParamId param : graph.parameters(node))
      take(param);
    bytes.push_back(total);
  }
  return bytes;
}
} // namespace

Expected<PipelinePlan> planPipeline(const ir::Graph& graph, const PipelineOptions& options) {
  Units units = unitsOf(graph);
  std::size_t count = units.nodes.size();
  if (count == 0)
    return Error(ErrorCode::InvalidArgument) << "the model has no operations to pipeline";
  // Weights of every kind, for the policies and the report.
  IdVector<NodeId, partition::NodeLatency> latencies =
      partition::estimateLatencies(graph, options.flopsPerSec, options.bytesPerSec);
  std::vector<double> nodes(count, 1.0), params = firstReadParamBytes(graph, units.nodes), flops(count), latency(count);
  for (std::size_t i = 0; i < count; ++i) {
    flops[i] = partition::estimateFlops(graph, units.nodes[i]);
    const partition::NodeLatency& l = latencies[units.nodes[i]];
    latency[i] = std::max(l.memSec, l.computeSec);
  }
  auto weightsOf = [&](Balance balance) -> const std::vector<double>& {
    switch (balance) {
    case Balance::Nodes: return nodes;
    case Balance::Params: return params;
    case Balance::Flops: return flops;
    case Balance::Latency: return latency;
    }
    return nodes;
  };
  Balance measure = options.balance;
  std::vector<std::size_t> starts;
  if (options.spec) {
    std::vector<std::pair<std::size_t, std::string>> cuts;
    for (const auto& [scope, beginning] : options.spec->scopes) {
      std::optional<std::size_t> first, last;
      for (std::size_t i = 0; i < count; ++i)
        if (inScope(graph.scope(units.nodes[i]), scope)) {
          first = first.value_or(i);
          last = i;
        }
      if (!first)
        return Error(ErrorCode::InvalidArgument) << "split_spec names '" << scope << "', which no node belongs to";
      cuts.push_back({beginning ? *first : *last + 1,
                      "split point '" + scope + "' (" + (beginning ? "BEGINNING" : "END") + ")"});
    }
    for (const auto& [names, after] : {std::pair{&options.spec->before, false}, std::pair{&options.spec->after, true}})
      for (const std::string& name : *names) {
        auto found = std::find_if(units.nodes.begin(), units.nodes.end(),
                                  [&](NodeId node) { return graph.name(node) == name; });
        if (found == units.nodes.end())
          return Error(ErrorCode::InvalidArgument) << "split point names node '" << name << "', which the model lacks";
        std::size_t position = static_cast<std::size_t>(found - units.nodes.begin()) + (after ? 1 : 0);
        cuts.push_back({position, std::string(after ? "split_after" : "split_before") + " '" + name + "'"});
      }
    CLEAVE_TRY(starts, startsFromCuts(cuts, count, false));
  } else if (options.stages == 0) {
    if (units.markers.empty())
      return Error(ErrorCode::InvalidArgument) << "no split markers in the model: give --stages N with a policy, or "
                                                  "--split-spec FILE";
    std::vector<std::pair<std::size_t, std::string>> cuts;
    for (const auto& [marker, position] : units.markers)
      cuts.push_back({position, "split marker '" + std::string(graph.name(marker)) + "'"});
    CLEAVE_TRY(starts, startsFromCuts(cuts, count, true));
  } else {
    if (options.stages > count)
      return Error(ErrorCode::InvalidArgument) << options.stages << " stages for " << count << " operations";
    switch (options.policy) {
    case Policy::EqualNodes: measure = Balance::Nodes; break;
    case Policy::EqualParams: measure = Balance::Params; break;
    case Policy::EqualFlops: measure = Balance::Flops; break;
    case Policy::EqualLatency: measure = Balance::Latency; break;
    case Policy::Optimal: break;
    }
    if (options.policy == Policy::Optimal) {
      std::vector<std::int64_t> memory;
      if (options.stageMemoryBytes > 0) {
        IdVector<NodeId, partition::NodeSize> sizes = partition::computeNodeSizes(graph);
        for (std::size_t i = 0; i < count; ++i)
          memory.push_back(static_cast<std::int64_t>(params[i]) + sizes[units.nodes[i]].outputBytes);
      }
      CLEAVE_TRY(starts, cutOptimal(weightsOf(measure), options.stages, memory, options.stageMemoryBytes));
    } else {
      starts = cutGreedy(weightsOf(measure), options.stages);
    }
  }

  PipelinePlan result;
  result.plan.kind = plan::PlanKind::Pipeline;
  result.plan.placement = IdVector<NodeId, plan::Placement>(graph.numNodes(), plan::Placement::NotPlaced);
  result.plan.detail = IdVector<NodeId, std::string>(graph.numNodes());
  for (std::size_t s = 0; s < starts.size(); ++s) {
    std::size_t end = s + 1 < starts.size() ? starts[s + 1] : count;
    plan::Submodule stage;
    stage.name = "stage_" + std::to_string(s);
    stage.nodes.assign(units.nodes.begin() + static_cast<std::ptrdiff_t>(starts[s]),
                       units.nodes.begin() + static_cast<std::ptrdiff_t>(end));
    result.plan.submodules.push_back(std::move(stage));
    StageStats stats;
    stats.nodes = end - starts[s];
    for (std::size_t i = starts[s]; i < end; ++i) {
      stats.flops += flops[i];
      stats.latencySec += latency[i];
      stats.weight += weightsOf(measure)[i];
    }
    result.stats.push_back(stats);
  }
  // FX markers ride in the stage after them, so torch's split_by_tags sees every node tagged;
  // ONNX markers stay out of the stage models.
  for (const auto& [marker, position] : units.markers) {
    result.markers.push_back(marker);
    if (graph.modelInfo().format == ir::SourceFormat::Fx) {
      std::size_t stage = static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), position) - starts.begin()) - 1;
      auto& stageNodes = result.plan.submodules[stage].nodes;
      stageNodes.insert(std::upper_bound(stageNodes.begin(), stageNodes.end(), marker), marker);
    }
  }
  plan::indexSubmodules(graph, result.plan);
  std::uint32_t stageCount = static_cast<std::uint32_t>(result.plan.submodules.size());

  // Parameters by name: the stages that read them.
  std::map<std::string, ParameterPlacement> byName;
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId node{n};
    auto record = [&](ir::ParamId param, std::uint32_t stage) {
      const ir::Parameter& p = graph.parameter(param);
      ParameterPlacement& placement = byName[p.name];
      placement.name = p.name;
      placement.bytes = p.bytes;
      if (std::find(placement.stages.begin(), placement.stages.end(), stage) == placement.stages.end())
        placement.stages.push_back(stage);
    };
    if (graph.kind(node) == ir::NodeKind::Parameter) {
      for (ValueId value : graph.outputs(node))
        for (NodeId user : graph.users(value))
          if (result.plan.submoduleOf[user] != plan::kNoSubmodule)
            for (ir::ParamId param : graph.parameters(node))
              record(param, result.plan.submoduleOf[user]);
    } else if (graph.isCallable(node) && result.plan.submoduleOf[node] != plan::kNoSubmodule) {
      for (ir::ParamId param : graph.parameters(node))
        record(param, result.plan.submoduleOf[node]);
    }
  }
  for (auto& [name, placement] : byName) {
    std::sort(placement.stages.begin(), placement.stages.end());
    placement.owner = placement.stages.front();
    for (std::uint32_t stage : placement.stages)
      if (options.multiUse == MultiUse::Replicate || stage == placement.owner)
        result.stats[stage].paramBytes += placement.bytes;
    result.parameters.push_back(std::move(placement));
  }
  result.multiUse = options.multiUse;
  if (options.multiUse == MultiUse::Transmit) {
    std::map<std::string_view, const ParameterPlacement*> shared; // read by several stages
    for (const ParameterPlacement& p : result.parameters)
      if (p.stages.size() > 1)
        shared[p.name] = &p;
    for (std::uint32_t n = 0; n < graph.numNodes(); ++n)
      if (graph.kind(NodeId{n}) == ir::NodeKind::Parameter)
        if (auto found = shared.find(graph.parameter(graph.parameters(NodeId{n})[0]).name); found != shared.end())
          result.transmitted.push_back({graph.outputs(NodeId{n})[0], found->second->owner});
  }
  result.boundaries = plan::computeBoundaries(graph, result.plan, result.transmitted);
  for (std::uint32_t s = 0; s < stageCount; ++s) {
    for (ValueId value : result.boundaries[s].inputs)
      result.stats[s].activationInBytes += std::max<std::int64_t>(graph.bytes(value), 0);
    for (ValueId value : result.boundaries[s].outputs)
      result.stats[s].activationOutBytes += std::max<std::int64_t>(graph.bytes(value), 0);
  }
  double mean = 0.0, worst = 0.0;
  for (const StageStats& stats : result.stats) {
    mean += stats.weight / static_cast<double>(stageCount);
    worst = std::max(worst, stats.weight);
  }
  result.imbalance = mean > 0 ? worst / mean : 1.0;

  // The loss and the backward plan.
  std::vector<std::string> outputNames;
  for (ValueId value : graph.graphOutputs())
    outputNames.emplace_back(graph.valueName(value));
  std::string wanted = options.loss.value_or("loss");
  for (ValueId value : graph.graphOutputs())
    if (graph.valueName(value) == wanted)
      result.loss = value;
  if (options.loss && !result.loss) {
    std::string list;
    for (const std::string& name : outputNames)
      list += (list.empty() ? "" : ", ") + name;
    return Error(ErrorCode::InvalidArgument) << "did not find the loss value '" << *options.loss
                                             << "' among the outputs (" << list << ")";
  }
  if (result.loss) {
    // Values the loss depends on.
    std::vector<std::uint8_t> live(graph.numValues(), 0);
    std::vector<ValueId> work{*result.loss};
    live[index(*result.loss)] = 1;
    while (!work.empty()) {
      ValueId value = work.back();
      work.pop_back();
      for (ValueId operand : graph.inputs(graph.producer(value)))
        if (operand != ir::kNoValue && !live[index(operand)]) {
          live[index(operand)] = 1;
          work.push_back(operand);
        }
    }
    for (std::uint32_t s = stageCount; s-- > 0;) {
      BackwardStep step;
      step.stage = s;
      for (ValueId value : result.boundaries[s].outputs) {
        if (!live[index(value)])
          continue;
        GradientInput input{value, {}, value == *result.loss};
        for (std::uint32_t t = s + 1; t < stageCount; ++t)
          if (std::find(result.boundaries[t].inputs.begin(), result.boundaries[t].inputs.end(), value) !=
              result.boundaries[t].inputs.end())
            input.fromStages.push_back(t);
        if (input.isLoss || !input.fromStages.empty())
          step.receives.push_back(std::move(input));
      }
      bool produces = false; // the stage makes the loss, or something it depends on
      for (NodeId node : result.plan.submodules[s].nodes)
        for (ValueId value : graph.outputs(node))
          produces = produces || live[index(value)];
      if (!produces)
        continue;
      for (ValueId value : result.boundaries[s].inputs) {
        if (!live[index(value)])
          continue;
        NodeId producer = graph.producer(value);
        std::uint32_t from = result.plan.submoduleOf[producer];
        step.sends.push_back({value, from == plan::kNoSubmodule ? std::nullopt : std::optional<std::uint32_t>(from)});
      }
      result.backward.push_back(std::move(step));
    }
  }
  return result;
}

report::Json pipelineJson(const ir::Graph& graph, const PipelinePlan& plan, const PipelineOptions& options) {
  report::Json out;
  out["policy"] = options.spec ? "split_spec" : (options.stages == 0 ? "markers" : std::string(policyName(options.policy)));
  out["balance"] = std::string(balanceName(options.balance));
  out["imbalance"] = plan.imbalance;
  out["multi_use"] = plan.multiUse == MultiUse::Replicate ? "replicate" : "transmit";
  report::Json stages = report::Json::array();
  for (std::size_t s = 0; s < plan.stats.size(); ++s) {
    const StageStats& st = plan.stats[s];
    report::Json names = report::Json::array();
    for (NodeId node : plan.plan.submodules[s].nodes)
      names.push_back(std::string(graph.name(node)));
    report::Json params = report::Json::array();
    for (const ParameterPlacement& p : plan.parameters)
      if (std::find(p.stages.begin(), p.stages.end(), s) != p.stages.end() &&
          (plan.multiUse == MultiUse::Replicate || p.owner == s))
        params.push_back(p.name);
    stages.push_back({{"index", s},
                      {"name", plan.plan.submodules[s].name},
                      {"nodes", std::move(names)},
                      {"parameters", std::move(params)},
                      {"param_bytes", st.paramBytes},
                      {"flops", st.flops},
                      {"latency_sec", st.latencySec},
                      {"weight", st.weight},
                      {"activation_in_bytes", st.activationInBytes},
                      {"activation_out_bytes", st.activationOutBytes}});
  }
  out["stages"] = std::move(stages);
  report::Json params = report::Json::array(), ties = report::Json::array();
  for (const ParameterPlacement& p : plan.parameters) {
    std::string mode = p.stages.size() == 1 ? "owned" : plan.multiUse == MultiUse::Replicate ? "replicated" : "transmitted";
    params.push_back({{"name", p.name}, {"bytes", p.bytes}, {"stages", p.stages}, {"owner", p.owner}, {"mode", mode}});
    if (p.stages.size() > 1 && plan.multiUse == MultiUse::Replicate)
      ties.push_back({{"parameter", p.name}, {"stages", p.stages}});
  }
  out["parameters"] = std::move(params);
  out["tie_groups"] = std::move(ties);
  report::Json skips = report::Json::array();
  for (std::uint32_t s = 0; s < plan.boundaries.size(); ++s)
    for (ValueId value : plan.boundaries[s].inputs) {
      std::uint32_t from = plan.plan.submoduleOf[graph.producer(value)];
      if (from != plan::kNoSubmodule && s > from + 1)
        skips.push_back({{"value", std::string(graph.valueName(value))}, {"from", from}, {"to", s}});
    }
  out["skip_connections"] = std::move(skips);
  out["loss"] = plan.loss ? report::Json(std::string(graph.valueName(*plan.loss))) : report::Json(nullptr);
  report::Json backward = report::Json::array();
  for (const BackwardStep& step : plan.backward) {
    report::Json receives = report::Json::array(), sends = report::Json::array();
    for (const GradientInput& in : step.receives)
      receives.push_back({{"value", std::string(graph.valueName(in.value))},
                          {"from_stages", in.fromStages},
                          {"loss", in.isLoss},
                          {"accumulate", in.fromStages.size() + (in.isLoss ? 1 : 0) > 1}});
    for (const GradientOutput& outGrad : step.sends)
      sends.push_back({{"value", std::string(graph.valueName(outGrad.value))},
                       {"to_stage", outGrad.toStage ? report::Json(*outGrad.toStage) : report::Json(nullptr)}});
    backward.push_back({{"stage", step.stage}, {"receive_grads", std::move(receives)}, {"send_grads", std::move(sends)}});
  }
  out["backward"] = std::move(backward);
  report::Json markers = report::Json::array();
  for (NodeId marker : plan.markers)
    markers.push_back(std::string(graph.name(marker)));
  out["markers"] = std::move(markers);
  return out;
}

} // namespace cleave::pipeline
