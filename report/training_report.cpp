#include "report/training_report.h"

#include <algorithm>
#include <cstdio>
#include <tuple>
#include <vector>

#include "base/strings.h"
#include "ir/graph.h"

namespace cleave::report {
namespace {

// The measured timeline: every action run, in each rank's order ("0F1": stage 0's forward of
// microbatch 1, as `cleave schedule` names it), seconds from the step's start on its rank.
Json actionTimeline(const runtime::StepTiming& timing) {
  using runtime::StepTiming;
  const std::size_t stages = timing.forwardSeconds.size();
  const std::size_t microbatches =
      stages ? timing.actionSeconds.size() / (StepTiming::kSlotFields * StepTiming::kComputeTypes * stages) : 0;
  std::vector<std::tuple<int, double, Json>> rows;
  for (std::size_t stage = 0; stage < stages; ++stage)
    for (std::size_t m = 0; m < microbatches; ++m)
      for (std::size_t t = 0; t < StepTiming::kComputeTypes; ++t) {
        const auto type = static_cast<pipeline::ActionType>(t);
        const double* slot =
            &timing.actionSeconds[StepTiming::kSlotFields * StepTiming::actionSlot(stage, m, microbatches, type)];
        if (slot[1] <= 0.0)
          continue; // not run
        pipeline::Action action{static_cast<std::uint32_t>(stage), type, static_cast<std::uint32_t>(m)};
        const int rank = static_cast<int>(slot[3]); // the rank that ran it
        rows.emplace_back(rank, slot[0],
                          Json{{"rank", rank}, {"action", pipeline::formatAction(action)}, {"start_s", slot[0]},
                               {"end_s", slot[1]}, {"wait_s", slot[2]}, {"compute_s", slot[4]}});
      }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
  });
  Json list = Json::array();
  for (auto& row : rows)
    list.push_back(std::move(std::get<2>(row)));
  return list;
}

// "; 12.3 ktokens/s, 4.5 GFLOP/s, 3m05s left".
void printRate(const runtime::StepRecord& record, const StepLineStyle& style, std::ostream& out) {
  const runtime::StepRate& rate = record.rate;
  out << "; " << (rate.tokensPerSecond > 0.0 ? formatSi(rate.tokensPerSecond, "tokens/s")
                                              : formatSi(rate.rowsPerSecond, "rows/s"));
  if (rate.flopsPerSecond)
    out << ", " << formatSi(*rate.flopsPerSecond, "FLOP/s");
  if (style.printInterval > 1 && record.step + 1 < style.steps)
    out << ", " << formatEta(rate.etaSeconds) << " left";
}

} // namespace

// What trains and what stays fixed, as JSON (the first step line's "trainable").
Json trainableJson(const runtime::TrainableSet& set) {
  Json fixed = Json::object();
  for (const auto& [why, count] : set.fixed)
    fixed[std::string(ir::kFixedReasons.name(why))] = count;
  return {{"trains", set.trains}, {"trained_bytes", set.trainedBytes}, {"fixed", std::move(fixed)},
          {"integer", set.integer}, {"updated", set.updated}, {"rule", set.defaultRule ? "default" : "listed"},
          {"shared", set.shared}, {"exporter_folds", set.exporterFolds},
          {"merged_split", set.mergesSplit}, {"possibly_constant", set.possiblyConstant}};
}

// "trains 9 tensors (1.2 MiB); holds 3 fixed: 2 folded, 1 buffer" (then how many running
// statistics its normalizations update) and, under the default rule,
// the line that says a buffer may be among those that train, and the one that says which tensors
// more than one module reads (tied, or merged by an eval-mode export).
void printTrainable(const runtime::TrainableSet& set, std::ostream& out) {
  std::int64_t held = set.integer;
  for (const auto& entry : set.fixed)
    held += entry.second;
  out << "trains " << set.trains << " tensor(s) (" << formatBytes(set.trainedBytes) << "); holds " << held << " fixed";
  const char* separator = ": ";
  for (const auto& [why, count] : set.fixed) {
    out << separator << count << " " << ir::kFixedReasons.name(why);
    separator = ", ";
  }
  if (set.integer)
    out << separator << set.integer << " integer";
  if (set.updated)
    out << "; updates " << set.updated << " running statistic(s) as torch's BatchNorm does";
  out << "\n";
  if (set.defaultRule)
    out << "the model lists no buffers: every floating initializer trains but Constants, running statistics and "
           "folded values, so a registered buffer exported as an initializer would train (tools/cleave_onnx.py "
           "lists a module's buffers in the model)\n";
  if (set.shared)
    out << set.shared << " trained tensor(s) are read by more than one module and train as one, their gradients "
        << "summed (e.g. " << set.sharedExample << ", read by " << set.sharedExampleScopes << " modules): a tied weight; "
        << "or, if those modules had their own, parameters of equal value that an eval-mode export merged "
        << "(export with training=torch.onnx.TrainingMode.TRAINING)\n";
  if (set.possiblyConstant)
    out << set.possiblyConstant << " trained tensor(s) hold a single number (e.g. " << set.possiblyConstantExample
        << "): an exporter's literal (a scale, an exponent) written as an initializer would train; hold such "
        << "tensors fixed with --frozen NAME, or list the module's buffers (tools/cleave_onnx.py)\n";
  if (set.exporterFolds)
    out << set.exporterFolds << " initializer(s) are values onnxscript's optimizer folded: those made of constants "
        << "and buffers stay fixed, one folded from a single parameter (a transposed weight) trains in its place; "
        << "export with torch.onnx.export(..., dynamo=True, optimize=False) to train exactly the module's parameters\n";
  if (set.mergesSplit)
    out << set.mergesSplit << " parameter(s) that the exporter's optimizer merged by value (fresh LayerNorm "
        << "weights, zero biases) train apart, each its own tensor as in the module\n";
}

Json planTimingJson(const runtime::StepTiming& timing, int ranks) {
  double compute = 0.0;
  for (std::size_t i = 0; i < timing.forwardSeconds.size(); ++i)
    compute += timing.forwardSeconds[i] + timing.backwardSeconds[i];
  // The schedule's bubble (idle share of ranks x the schedule's wall time), as the simulator's.
  const double bubble = timing.scheduleSeconds > 0 ? 1.0 - compute / (ranks * timing.scheduleSeconds) : 0.0;
  auto counts = [](const std::vector<double>& values) { return std::vector<std::int64_t>(values.begin(), values.end()); };
  return Json{{"seconds", timing.stepSeconds},
              {"schedule_seconds", timing.scheduleSeconds},
              {"stage_forward_s", timing.forwardSeconds},
              {"stage_backward_s", timing.backwardSeconds},
              {"stage_weight_s", timing.weightSeconds},
              {"rank_schedule_s", timing.rankScheduleSeconds},
              {"rank_wait_s", timing.rankWaitSeconds},
              {"rank_receives", counts(timing.rankReceives)},
              {"rank_transport_cpu_s", timing.rankTransportSeconds},
              {"rank_peak_step_bytes", counts(timing.rankPeakStepBytes)},
              {"rank_receive_buffer_peak_bytes", counts(timing.rankReceiveBufferPeakBytes)},
              {"rank_receive_buffer_held_bytes", counts(timing.rankReceiveBufferHeldBytes)},
              {"rank_replica_wait_s", timing.rankReplicaWaitSeconds},
              {"stage_forward_bytes", counts(timing.stageForwardBytes)},
              {"stage_backward_bytes", counts(timing.stageBackwardBytes)},
              {"stage_gradient_bytes", counts(timing.stageGradientBytes)},
              {"shape_headers", static_cast<std::int64_t>(timing.headersSent)},
              {"bubble", bubble},
              {"actions", actionTimeline(timing)}};
}

namespace {
// The step's measurements under --timing: a plan's gathered timing, or a model's wall seconds.
Json timingJson(const runtime::StepRecord& record, const StepLineStyle& style) {
  return record.planTiming ? planTimingJson(*record.planTiming, style.ranks) : Json{{"seconds", record.rate.seconds}};
}
} // namespace

Json stepJson(const runtime::StepRecord& record, const runtime::TrainableSet* trainable, const StepLineStyle& style) {
  const runtime::StepResult& result = record.result;
  Json json{{"step", record.step + 1}, {"loss", result.loss}, {"lr", result.lr}};
  if (trainable)
    json["trainable"] = trainableJson(*trainable);
  if (result.gradNorm)
    json["grad_norm"] = *result.gradNorm;
  if (result.skipped)
    json["skipped"] = true;
  if (record.evalLoss)
    json["eval_loss"] = *record.evalLoss;
  if (style.withRate) {
    json["rows_per_s"] = record.rate.rowsPerSecond;
    if (record.rate.tokensPerSecond > 0.0)
      json["tokens_per_s"] = record.rate.tokensPerSecond;
    if (record.rate.flopsPerSecond)
      json["flops_per_s"] = *record.rate.flopsPerSecond;
  }
  if (style.timing)
    json.update(timingJson(record, style));
  return json;
}

void printStep(const runtime::StepRecord& record, const runtime::TrainableSet* trainable, const StepLineStyle& style,
               std::ostream& out) {
  if (style.json) {
    out << toJsonText(stepJson(record, trainable, style)) << "\n"; // one line per step
    out.flush();
    return;
  }
  if (trainable)
    printTrainable(*trainable, out);
  const runtime::StepResult& result = record.result;
  out << "step " << record.step + 1 << "/" << style.steps << ": loss " << result.loss;
  if (style.scheduledLr)
    out << ", lr " << result.lr;
  if (result.gradNorm)
    out << ", grad norm " << *result.gradNorm;
  if (result.skipped)
    out << ", skipped (not finite)";
  if (record.evalLoss)
    out << ", held-out loss " << *record.evalLoss;
  if (style.withRate)
    printRate(record, style, out);
  if (style.timing) {
    const Json timing = timingJson(record, style);
    out << " (" << timing["seconds"].get<double>() * 1e3 << " ms"
        << (timing.contains("bubble") ? ", bubble " + std::to_string(timing["bubble"].get<double>()) : std::string())
        << ")";
  }
  out << "\n";
  out.flush();
}

std::string formatEta(double seconds) {
  const auto whole = static_cast<long long>(seconds + 0.5);
  char text[32];
  if (whole < 60)
    std::snprintf(text, sizeof text, "%llds", whole);
  else if (whole < 3600)
    std::snprintf(text, sizeof text, "%lldm%02llds", whole / 60, whole % 60);
  else
    std::snprintf(text, sizeof text, "%lldh%02lldm", whole / 3600, whole / 60 % 60);
  return text;
}

} // namespace cleave::report
