#include "report/pipeline_report.h"

#include <algorithm>
#include <sstream>

#include "base/strings.h"

namespace cleave::report {
using ir::NodeId;
using ir::ValueId;
using pipeline::BackwardStep;
using pipeline::GradientInput;
using pipeline::GradientOutput;
using pipeline::MultiUse;
using pipeline::ParameterPlacement;
using pipeline::PipelineOptions;
using pipeline::PipelinePlan;
using pipeline::StageStats;

namespace {
std::string policyOf(const PipelineOptions& options) {
  return options.spec ? "split_spec" : options.stages == 0 ? "markers" : std::string(pipeline::kPolicies.name(options.policy));
}
} // namespace

Json pipelineReportJson(const ir::Graph& graph, const PipelinePlan& plan, const PipelineOptions& options) {
  Json out;
  out["policy"] = policyOf(options);
  out["balance"] = std::string(pipeline::kBalances.name(options.balance));
  out["imbalance"] = plan.imbalance;
  out["multi_use"] = std::string(pipeline::kMultiUses.name(plan.multiUse));
  Json stages = Json::array();
  for (std::size_t s = 0; s < plan.stats.size(); ++s) {
    const StageStats& st = plan.stats[s];
    Json names = Json::array();
    for (NodeId node : plan.plan.submodules[s].nodes)
      names.push_back(std::string(graph.name(node)));
    Json params = Json::array();
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
  Json params = Json::array(), ties = Json::array();
  for (const ParameterPlacement& p : plan.parameters) {
    std::string mode = p.stages.size() == 1 ? "owned" : plan.multiUse == MultiUse::Replicate ? "replicated" : "transmitted";
    Json entry = {{"name", p.name}, {"bytes", p.bytes}, {"stages", p.stages}, {"owner", p.owner}, {"mode", mode}};
    if (!p.aliases.empty())
      entry["aliases"] = p.aliases;
    if (p.fixed != ir::Fixed::Trains)
      entry["fixed"] = std::string(ir::kFixedReasons.name(p.fixed));
    params.push_back(std::move(entry));
    if (p.stages.size() > 1 && plan.multiUse == MultiUse::Replicate) {
      Json tie = {{"parameter", p.name}, {"stages", p.stages}};
      if (!p.aliases.empty())
        tie["aliases"] = p.aliases;
      ties.push_back(std::move(tie));
    }
  }
  out["parameters"] = std::move(params);
  out["tie_groups"] = std::move(ties);
  Json skips = Json::array();
  for (std::uint32_t s = 0; s < plan.boundaries.size(); ++s)
    for (ValueId value : plan.boundaries[s].inputs) {
      std::uint32_t from = plan.plan.submoduleOf[graph.producer(value)];
      if (from != plan::kNoSubmodule && s > from + 1)
        skips.push_back({{"value", std::string(graph.valueName(value))}, {"from", from}, {"to", s}});
    }
  out["skip_connections"] = std::move(skips);
  out["loss"] = plan.loss ? Json(std::string(graph.valueName(*plan.loss))) : Json(nullptr);
  Json backward = Json::array();
  for (const BackwardStep& step : plan.backward) {
    Json receives = Json::array(), sends = Json::array();
    for (const GradientInput& in : step.receives)
      receives.push_back({{"value", std::string(graph.valueName(in.value))},
                          {"from_stages", in.fromStages},
                          {"loss", in.isLoss},
                          {"accumulate", in.fromStages.size() + (in.isLoss ? 1 : 0) > 1}});
    for (const GradientOutput& outGrad : step.sends)
      sends.push_back({{"value", std::string(graph.valueName(outGrad.value))},
                       {"to_stage", outGrad.toStage ? Json(*outGrad.toStage) : Json(nullptr)}});
    backward.push_back({{"stage", step.stage}, {"receive_grads", std::move(receives)}, {"send_grads", std::move(sends)}});
  }
  out["backward"] = std::move(backward);
  Json markers = Json::array();
  for (NodeId marker : plan.markers)
    markers.push_back(std::string(graph.name(marker)));
  out["markers"] = std::move(markers);
  return out;
}


std::string pipelineReportText(const ir::Graph& graph, const PipelinePlan& plan, const PipelineOptions& options) {
  std::ostringstream text;
  text << "stages: " << plan.stats.size() << " (" << policyOf(options) << "), imbalance " << plan.imbalance
       << " (max / mean " << pipeline::kBalances.name(options.balance) << ")\n";
  for (std::size_t s = 0; s < plan.stats.size(); ++s) {
    const StageStats& stats = plan.stats[s];
    text << "  " << plan.plan.submodules[s].name << ": " << stats.nodes << " node(s), params "
         << formatBytes(stats.paramBytes) << ", " << formatSi(stats.flops, "FLOPs") << ", in "
         << formatBytes(stats.activationInBytes) << ", out " << formatBytes(stats.activationOutBytes) << "\n";
  }
  for (const ParameterPlacement& p : plan.parameters) {
    if (p.stages.size() < 2 || plan.multiUse != MultiUse::Replicate)
      continue;
    text << "tie group: " << p.name;
    if (!p.aliases.empty()) // one tensor the model holds under several names
      text << " (also read as " << joinStrings(p.aliases) << ")";
    text << " on stages " << Json(p.stages).dump() << "\n";
  }
  for (std::uint32_t s = 0; s < plan.boundaries.size(); ++s)
    for (ValueId value : plan.boundaries[s].inputs) {
      std::uint32_t from = plan.plan.submoduleOf[graph.producer(value)];
      if (from != plan::kNoSubmodule && s > from + 1)
        text << "skip connection: " << graph.valueName(value) << " from stage " << from << " to stage " << s << "\n";
    }
  text << "loss: " << (plan.loss ? std::string(graph.valueName(*plan.loss)) : std::string("none (inference)")) << "\n";
  return text.str();
}

} // namespace cleave::report
