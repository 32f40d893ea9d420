// pipeline/stages.h - cutting a model into pipeline stages (the seed's pipelining IR, as a plan).
//
// Units: the callable nodes in topological order, without split markers. Stages are contiguous
// runs of units, so each is convex and values only flow forward.
// Where the cuts go:
//   markers      FX calls to `pipe_split` (any target ending in "pipe_split", or a torch.export
//                program's torch.ops.pippy._pipe_split.default), ONNX nodes
//                `PipeSplit` in the domain `cleave`: a cut where each stands; consecutive markers
//                collapse into one; a marker that leaves a stage empty is an error naming it
//   split spec   {"split_spec": {"layers.1": "BEGINNING", "layers.2": "END"},
//                 "split_before": ["node"], "split_after": ["node"]}: a cut before the first /
//                after the last node of a module scope (ONNX scopes come from node names, FX
//                scopes from the module hierarchy), or at named nodes
//   policy       --stages N with equal_nodes | equal_params | equal_flops | equal_latency (greedy
//                cut at each 1/N of the total) or optimal (smallest bottleneck of the balance
//                weight, within --stage-memory; balance.h)
// Parameters: each goes to the stages whose nodes read it; one read by several stages is either
// replicated (a copy per stage and a tie group, for summing gradients) or transmitted (the first
// stage owns it and sends it to the others). Parameters are identified by their tensor: one
// tensor under two names (ONNX Identity of an initializer, ir::Parameter::aliasOf) is one
// parameter, and ONNX Constants are parameters that are not trained, never activations.
// Skip connections: a value goes straight from the stage that makes it to every stage that reads
// it (plan inputs name the producing stage), and its gradient comes back the same way.
// Training: the loss is the graph output named by --loss (default: an output named "loss", if
// any; a named loss that is not an output is an error listing the outputs). The backward plan
// visits stages in reverse: each receives the gradients of its outputs that lead to the loss
// (summed when several stages read the value), and sends its inputs' gradients to the stages
// that made them.
// Complexity: O(V + E) for units, weights, parameters and boundaries, plus the policy's cut
// (greedy O(N), optimal O(N log(W/eps)), balance.h) and O(S^2 * boundary) for the backward plan.
#pragma once

#include <optional>

#include "base/enum_table.h"
#include "partition/latency.h"
#include "plan/materialize.h"

namespace cleave::pipeline {

enum class Policy : std::uint8_t { EqualNodes, EqualParams, EqualFlops, EqualLatency, Optimal };
inline constexpr auto kPolicies = enumTable<Policy>({{Policy::EqualNodes, "equal_nodes"},
                                                    {Policy::EqualParams, "equal_params"},
                                                    {Policy::EqualFlops, "equal_flops"},
                                                    {Policy::EqualLatency, "equal_latency"},
                                                    {Policy::Optimal, "optimal"}});
enum class Balance : std::uint8_t { Nodes, Params, Flops, Latency };
inline constexpr auto kBalances = enumTable<Balance>(
    {{Balance::Nodes, "nodes"}, {Balance::Params, "params"}, {Balance::Flops, "flops"}, {Balance::Latency, "latency"}});
enum class MultiUse : std::uint8_t { Replicate, Transmit };
inline constexpr auto kMultiUses =
    enumTable<MultiUse>({{MultiUse::Replicate, "replicate"}, {MultiUse::Transmit, "transmit"}});

struct SplitSpec {
  std::vector<std::pair<std::string, bool>> scopes; // (scope, true: BEGINNING / false: END)
  std::vector<std::string> before, after;           // node names
};
// Fails: ParseError with the JSON location.
Expected<SplitSpec> parseSplitSpec(std::string_view text, const std::string& sourceName);

struct PipelineOptions {
  std::uint32_t stages = 0;              // with a policy
  Policy policy = Policy::EqualNodes;
  Balance balance = Balance::Latency;    // what optimal balances
  std::int64_t stageMemoryBytes = 0;     // optimal: per-stage limit (0: none)
  std::optional<SplitSpec> spec;         // instead of a policy
  MultiUse multiUse = MultiUse::Replicate;
  std::optional<std::string> loss;       // --loss NAME
  double flopsPerSec = 1e12, bytesPerSec = 1e11; // for latency estimates
};

struct StageStats {
  std::size_t nodes = 0;
  std::int64_t paramBytes = 0;
  double flops = 0.0, latencySec = 0.0, weight = 0.0;
  std::int64_t activationInBytes = 0, activationOutBytes = 0;
};

struct ParameterPlacement {  // one tensor
  std::string name;                  // the parameter that owns the tensor
  std::vector<std::string> aliases;  // other names stages read it under (ir::Parameter::aliasOf)
  std::vector<std::uint32_t> stages; // every stage that reads it
  std::uint32_t owner = 0;           // the first
  std::int64_t bytes = 0;
  ir::Fixed fixed = ir::Fixed::Trains; // why training holds it fixed, if it does
};

struct GradientInput { // a stage's output whose gradient it receives
  ir::ValueId value;
  std::vector<std::uint32_t> fromStages; // several: accumulated (summed)
  bool isLoss = false;
};
struct GradientOutput { // a stage's input whose gradient it sends
  ir::ValueId value;
  std::optional<std::uint32_t> toStage; // none: a graph input (the gradient is dropped)
};
struct BackwardStep {
  std::uint32_t stage = 0;
  std::vector<GradientInput> receives;
  std::vector<GradientOutput> sends;
};

struct PipelinePlan {
  plan::CutPlan plan; // kind Pipeline, submodules "stage_<i>"
  std::vector<plan::Boundary> boundaries;
  std::vector<StageStats> stats;
  double imbalance = 1.0; // max / mean of the balanced weight
  std::vector<ParameterPlacement> parameters;
  MultiUse multiUse = MultiUse::Replicate;
  std::optional<ir::ValueId> loss;
  std::vector<BackwardStep> backward; // last stage first
  std::vector<ir::NodeId> markers;    // split markers (ONNX: in no stage; FX: in the stage after them)
  // --multi-use transmit: (parameter value, owning stage) for materialization.
  std::vector<std::pair<ir::ValueId, std::uint32_t>> transmitted;
};

// Fails: InvalidArgument (no stages requested, more stages than nodes, a spec naming an unknown
// scope or node, a cut or marker that would leave a stage empty, an unknown loss), DoesNotFit
// (optimal under a memory limit that cannot hold it).
Expected<PipelinePlan> planPipeline(const ir::Graph& graph, const PipelineOptions& options);

} // namespace cleave::pipeline
