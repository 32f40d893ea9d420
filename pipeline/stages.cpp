#include "pipeline/stages.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "base/json.h"
#include "base/strings.h"
#include "pipeline/balance.h"

namespace cleave::pipeline {
using ir::NodeId;
using ir::ValueId;

namespace {
bool isMarker(const ir::Graph& graph, NodeId node) {
  if (!graph.isCallable(node))
    return false;
  std::string_view op = graph.opType(node);
  // torch.distributed.pipelining.pipe_split as FX traces it, and as torch.export records it (the
  // operator torch.ops.pippy._pipe_split.default).
  if (graph.modelInfo().format == ir::SourceFormat::Fx)
    return op.ends_with("pipe_split") || op.ends_with("_pipe_split.default");
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

// Per unit: bytes of the tensors it is the first to read (and, in FX, its module's own). A tensor
// under two names (ir::Parameter::aliasOf) counts once.
std::vector<double> firstReadParamBytes(const ir::Graph& graph, const std::vector<NodeId>& units) {
  std::vector<std::uint8_t> seen(graph.numParameters(), 0);
  std::vector<double> bytes;
  for (NodeId node : units) {
    double total = 0;
    auto take = [&](ir::ParamId param) {
      ir::ParamId storage = graph.storageOf(param);
      if (!seen[index(storage)]) {
        seen[index(storage)] = 1;
        total += static_cast<double>(graph.parameter(storage).bytes);
      }
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

// Every balance weight of every unit, for the policies and the report.
struct UnitWeights {
  std::vector<double> nodes, params, flops, latency;
  const std::vector<double>& of(Balance balance) const {
    switch (balance) {
    case Balance::Nodes: return nodes;
    case Balance::Params: return params;
    case Balance::Flops: return flops;
    case Balance::Latency: return latency;
    }
    return nodes;
  }
};

UnitWeights measureUnits(const ir::Graph& graph, const std::vector<NodeId>& units, const PipelineOptions& options) {
  IdVector<NodeId, partition::NodeLatency> latencies =
      partition::estimateLatencies(graph, options.flopsPerSec, options.bytesPerSec);
  UnitWeights weights;
  weights.nodes.assign(units.size(), 1.0);
  weights.params = firstReadParamBytes(graph, units);
  for (NodeId node : units) {
    weights.flops.push_back(partition::estimateFlops(graph, node));
    const partition::NodeLatency& l = latencies[node];
    weights.latency.push_back(std::max(l.memSec, l.computeSec));
  }
  return weights;
}

// Stage starts from a split spec: module scopes (BEGINNING / END) and named nodes.
Expected<std::vector<std::size_t>> startsFromSpec(const ir::Graph& graph, const Units& units, const SplitSpec& spec) {
  std::size_t count = units.nodes.size();
  std::vector<std::pair<std::size_t, std::string>> cuts;
  for (const auto& [scope, beginning] : spec.scopes) {
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
  for (const auto& [names, after] : {std::pair{&spec.before, false}, std::pair{&spec.after, true}})
    for (const std::string& name : *names) {
      auto found = std::find_if(units.nodes.begin(), units.nodes.end(),
                                [&](NodeId node) { return graph.name(node) == name; });
      if (found == units.nodes.end())
        return Error(ErrorCode::InvalidArgument) << "split point names node '" << name << "', which the model lacks";
      std::size_t position = static_cast<std::size_t>(found - units.nodes.begin()) + (after ? 1 : 0);
      cuts.push_back({position, std::string(after ? "split_after" : "split_before") + " '" + name + "'"});
    }
  return startsFromCuts(cuts, count, false);
}

Expected<std::vector<std::size_t>> startsFromMarkers(const ir::Graph& graph, const Units& units) {
  if (units.markers.empty())
    return Error(ErrorCode::InvalidArgument) << "no split markers in the model: give --stages N with a policy, or "
                                                "--split-spec FILE";
  std::vector<std::pair<std::size_t, std::string>> cuts;
  for (const auto& [marker, position] : units.markers)
    cuts.push_back({position, "split marker '" + std::string(graph.name(marker)) + "'"});
  return startsFromCuts(cuts, units.nodes.size(), true);
}

// What a policy balances: the equal_* policies their own weight, optimal the --balance one.
Balance measureOf(const PipelineOptions& options) {
  switch (options.policy) {
  case Policy::EqualNodes: return Balance::Nodes;
  case Policy::EqualParams: return Balance::Params;
  case Policy::EqualFlops: return Balance::Flops;
  case Policy::EqualLatency: return Balance::Latency;
  case Policy::Optimal: break;
  }
  return options.balance;
}

Expected<std::vector<std::size_t>> startsFromPolicy(const ir::Graph& graph, const Units& units,
                                                    const UnitWeights& weights, const PipelineOptions& options) {
  std::size_t count = units.nodes.size();
  if (options.stages > count)
    return Error(ErrorCode::InvalidArgument) << options.stages << " stages for " << count << " operations";
  const std::vector<double>& measured = weights.of(measureOf(options));
  if (options.policy != Policy::Optimal)
    return cutGreedy(measured, options.stages);
  std::vector<std::int64_t> memory;
  if (options.stageMemoryBytes > 0) {
    IdVector<NodeId, partition::NodeSize> sizes = partition::computeNodeSizes(graph);
    for (std::size_t i = 0; i < count; ++i)
      memory.push_back(static_cast<std::int64_t>(weights.params[i]) + sizes[units.nodes[i]].outputBytes);
  }
  return cutOptimal(measured, options.stages, memory, options.stageMemoryBytes);
}

// The stages as submodules of the plan, with their per-stage sums. FX markers ride in the stage
// after them, so torch's split_by_tags sees every node tagged; ONNX markers stay out of the
// stage models.
void buildStages(const ir::Graph& graph, const Units& units, const std::vector<std::size_t>& starts,
                 const UnitWeights& weights, Balance measure, PipelinePlan& result) {
  std::size_t count = units.nodes.size();
  result.plan.kind = plan::PlanKind::Pipeline;
  for (std::size_t s = 0; s < starts.size(); ++s) {
    std::size_t end = s + 1 < starts.size() ? starts[s + 1] : count;
    plan::Submodule stage;
    stage.name = "stage_" + std::to_string(s);
    stage.role = plan::SubmoduleRole::Stage;
    stage.nodes.assign(units.nodes.begin() + static_cast<std::ptrdiff_t>(starts[s]),
                       units.nodes.begin() + static_cast<std::ptrdiff_t>(end));
    result.plan.submodules.push_back(std::move(stage));
    StageStats stats;
    stats.nodes = end - starts[s];
    for (std::size_t i = starts[s]; i < end; ++i) {
      stats.flops += weights.flops[i];
      stats.latencySec += weights.latency[i];
      stats.weight += weights.of(measure)[i];
    }
    result.stats.push_back(stats);
  }
  for (const auto& [marker, position] : units.markers) {
    result.markers.push_back(marker);
    if (graph.modelInfo().format == ir::SourceFormat::Fx) {
      std::size_t stage = static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), position) - starts.begin()) - 1;
      auto& stageNodes = result.plan.submodules[stage].nodes;
      stageNodes.insert(std::upper_bound(stageNodes.begin(), stageNodes.end(), marker), marker);
    }
  }
  plan::indexSubmodules(graph, result.plan);
}

// Per tensor (parameters with one storage are one tensor, whatever names they are read under):
// the stages that read it, in storage order.
std::vector<ParameterPlacement> collectParameterReads(const ir::Graph& graph, const plan::CutPlan& stages) {
  std::vector<ParameterPlacement> byStorage(graph.numParameters());
  auto record = [&](ir::ParamId param, std::uint32_t stage) {
    ir::ParamId storage = graph.storageOf(param);
    ParameterPlacement& placement = byStorage[index(storage)];
    placement.name = graph.parameter(storage).name;
    placement.bytes = graph.parameter(storage).bytes;
    placement.fixed = graph.parameter(storage).fixed;
    const std::string& name = graph.parameter(param).name;
    if (name != placement.name && std::find(placement.aliases.begin(), placement.aliases.end(), name) == placement.aliases.end())
      placement.aliases.push_back(name);
    if (std::find(placement.stages.begin(), placement.stages.end(), stage) == placement.stages.end())
      placement.stages.push_back(stage);
  };
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n) {
    NodeId node{n};
    if (graph.kind(node) == ir::NodeKind::Parameter) {
      for (ValueId value : graph.outputs(node))
        for (NodeId user : graph.users(value))
          if (stages.submoduleOf[user] != plan::kNoSubmodule)
            for (ir::ParamId param : graph.parameters(node))
              record(param, stages.submoduleOf[user]);
    } else if (graph.isCallable(node) && stages.submoduleOf[node] != plan::kNoSubmodule) {
      for (ir::ParamId param : graph.parameters(node))
        record(param, stages.submoduleOf[node]);
    }
  }
  std::vector<ParameterPlacement> reads;
  for (ParameterPlacement& placement : byStorage)
    if (!placement.stages.empty())
      reads.push_back(std::move(placement));
  std::sort(reads.begin(), reads.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return reads;
}

// Each tensor goes to the stages that read it: a copy in each (replicate; several make a tie
// group), or the first stage's copy sent to the others under every name they read (transmit).
void placeParameters(const ir::Graph& graph, const PipelineOptions& options, PipelinePlan& result) {
  result.multiUse = options.multiUse;
  for (ParameterPlacement& placement : collectParameterReads(graph, result.plan)) {
    std::sort(placement.stages.begin(), placement.stages.end());
    placement.owner = placement.stages.front();
    for (std::uint32_t stage : placement.stages)
      if (options.multiUse == MultiUse::Replicate || stage == placement.owner)
        result.stats[stage].paramBytes += placement.bytes;
    result.parameters.push_back(std::move(placement));
  }
  if (options.multiUse != MultiUse::Transmit)
    return;
  std::map<std::string_view, const ParameterPlacement*> shared; // tensors read by several stages
  for (const ParameterPlacement& p : result.parameters)
    if (p.stages.size() > 1)
      shared[p.name] = &p;
  for (std::uint32_t n = 0; n < graph.numNodes(); ++n)
    if (graph.kind(NodeId{n}) == ir::NodeKind::Parameter && !graph.parameters(NodeId{n}).empty()) {
      ir::ParamId storage = graph.storageOf(graph.parameters(NodeId{n})[0]);
      if (auto found = shared.find(graph.parameter(storage).name); found != shared.end())
        result.transmitted.push_back({graph.outputs(NodeId{n})[0], found->second->owner});
    }
}

// Activation bytes in and out of every stage, and the imbalance of the balanced weight.
void measureStages(const ir::Graph& graph, PipelinePlan& result) {
  result.boundaries = plan::computeBoundaries(graph, result.plan, result.transmitted);
  double mean = 0.0, worst = 0.0;
  for (std::uint32_t s = 0; s < result.stats.size(); ++s) {
    StageStats& stats = result.stats[s];
    for (ValueId value : result.boundaries[s].inputs)
      stats.activationInBytes += std::max<std::int64_t>(graph.bytes(value), 0);
    for (ValueId value : result.boundaries[s].outputs)
      stats.activationOutBytes += std::max<std::int64_t>(graph.bytes(value), 0);
    mean += stats.weight / static_cast<double>(result.stats.size());
    worst = std::max(worst, stats.weight);
  }
  result.imbalance = mean > 0 ? worst / mean : 1.0;
}

// The loss: the output --loss names, else one named "loss" when there is one.
Status findLoss(const ir::Graph& graph, const PipelineOptions& options, PipelinePlan& result) {
  std::string wanted = options.loss.value_or("loss");
  for (ValueId value : graph.graphOutputs())
    if (graph.valueName(value) == wanted)
      result.loss = value;
  if (!options.loss || result.loss)
    return {};
  std::vector<std::string> names;
  for (ValueId value : graph.graphOutputs())
    names.emplace_back(graph.valueName(value));
  return Error(ErrorCode::InvalidArgument) << "did not find the loss value '" << *options.loss
                                           << "' among the outputs (" << joinStrings(names) << ")";
}

// Values the loss depends on (1 per value).
std::vector<std::uint8_t> valuesBehind(const ir::Graph& graph, ValueId loss) {
  std::vector<std::uint8_t> live(graph.numValues(), 0);
  std::vector<ValueId> work{loss};
  live[index(loss)] = 1;
  while (!work.empty()) {
    ValueId value = work.back();
    work.pop_back();
    for (ValueId operand : graph.inputs(graph.producer(value)))
      if (operand != ir::kNoValue && !live[index(operand)]) {
        live[index(operand)] = 1;
        work.push_back(operand);
      }
  }
  return live;
}

// One backward step of stage `s`: the gradients it receives for its outputs, and (when it makes
// something the loss depends on) the gradients it sends for its inputs.
std::optional<BackwardStep> backwardStepOf(const ir::Graph& graph, const PipelinePlan& result,
                                           const std::vector<std::uint8_t>& live, std::uint32_t s) {
  auto stageCount = static_cast<std::uint32_t>(result.boundaries.size());
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
  bool produces = false;
  for (NodeId node : result.plan.submodules[s].nodes)
    for (ValueId value : graph.outputs(node))
      produces = produces || live[index(value)];
  if (!produces)
    return std::nullopt;
  for (ValueId value : result.boundaries[s].inputs) {
    if (!live[index(value)])
      continue;
    std::uint32_t from = result.plan.submoduleOf[graph.producer(value)];
    step.sends.push_back({value, from == plan::kNoSubmodule ? std::nullopt : std::optional<std::uint32_t>(from)});
  }
  return step;
}

void planBackward(const ir::Graph& graph, PipelinePlan& result) {
  if (!result.loss)
    return;
  std::vector<std::uint8_t> live = valuesBehind(graph, *result.loss);
  for (auto s = static_cast<std::uint32_t>(result.boundaries.size()); s-- > 0;)
    if (std::optional<BackwardStep> step = backwardStepOf(graph, result, live, s))
      result.backward.push_back(std::move(*step));
}
} // namespace

Expected<PipelinePlan> planPipeline(const ir::Graph& graph, const PipelineOptions& options) {
  Units units = unitsOf(graph);
  if (units.nodes.empty())
    return Error(ErrorCode::InvalidArgument) << "the model has no operations to pipeline";
  UnitWeights weights = measureUnits(graph, units.nodes, options);
  std::vector<std::size_t> starts;
  if (options.spec) {
    CLEAVE_TRY(starts, startsFromSpec(graph, units, *options.spec));
  } else if (options.stages == 0) {
    CLEAVE_TRY(starts, startsFromMarkers(graph, units));
  } else {
    CLEAVE_TRY(starts, startsFromPolicy(graph, units, weights, options));
  }
  bool byPolicy = !options.spec && options.stages > 0;
  PipelinePlan result;
  buildStages(graph, units, starts, weights, byPolicy ? measureOf(options) : options.balance, result);
  placeParameters(graph, options, result);
  measureStages(graph, result);
  CLEAVE_CHECK(findLoss(graph, options, result));
  planBackward(graph, result);
  return result;
}

} // namespace cleave::pipeline
