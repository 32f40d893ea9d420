// cli/cmd_schedule.cpp - `cleave schedule --kind K --stages S --microbatches M [--ranks R]
// [--csv FILE] [--from-csv FILE] [--simulate] [--svg FILE]`: generate (or read), validate,
// simulate and draw a pipeline schedule; rendering is report/schedule_report.h.
#include <algorithm>
#include <sstream>

#include "base/file_io.h"
#include "base/strings.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "pipeline/nccl_streams.h"
#include "report/schedule_report.h"

namespace cleave::cli {

namespace {
struct ScheduleFlags {
  pipeline::ScheduleKind kind = pipeline::ScheduleKind::OneFOneB;
  std::string csvOut, csvIn, svgPath, costsText = "1,2,1,1", actionCostsText;
  std::uint32_t stages = 0, microbatches = 0, ranks = 0;
  double latency = 0.0, sendCost = 0.0, receiveCost = 0.0, costSpread = 0.0, pairCost = 0.0;
  std::uint32_t samples = 200;
  // Per microbatch: one value for every stage, or one per stage.
  std::vector<std::int64_t> activationBytes{1}, inputBytes{0}, droppedBytes{0}, backwardBytes{0},
      gradientBytes{0};
  double replay = 0.0;
  pipeline::Recompute recompute = pipeline::Recompute::None;
  bool simulate = false, comm = false, json = false;
  std::string messageBytesText; // --message-bytes
};

// A time for --simulate: finite and non-negative, its default shown.
void addTimeOption(CLI::App& app, const std::string& name, double& value, const std::string& help) {
  app.add_option(name, value, help)->check(kFinite)->check(CLI::Range(0.0, 1e15))->capture_default_str();
}

void describe(CLI::App& app, ScheduleFlags& flags) {
  app.description("Generate, validate and simulate a pipeline schedule (GPipe, 1F1B, interleaved 1F1B, looped BFS, "
                  "zero bubble, and the V schedules ZB-V and DualPipeV, whose 2R stages sit in a V: rank r holds "
                  "stages r and 2R - 1 - r); read and write PyTorch-style action CSVs; draw the timeline.");
  addEnumOption(app, "--kind", flags.kind, pipeline::kScheduleKinds, "schedule");
  app.add_option("--stages", flags.stages, "pipeline stages (a multiple of the ranks)");
  app.add_option("--microbatches", flags.microbatches, "microbatches per step");
  app.add_option("--ranks", flags.ranks, "ranks (default: one per stage)");
  app.add_option("--from-csv", flags.csvIn, "read the schedule from a CSV instead of generating it");
  app.add_option("--csv", flags.csvOut, "write the schedule as CSV (one line per rank)");
  app.add_flag("--comm", flags.comm,
               "include the SEND/RECV actions (and report which transports the schedule fits: buffered sends, "
               "rendezvous sends, ordered channels, NCCL as cleave's trainer and as PyTorch's pipelining issue "
               "messages there)");
  app.add_flag("--simulate", flags.simulate,
               "time the schedule: makespan, bubble fraction, peak activations per rank");
  app.add_option("--costs", flags.costsText,
                 "F,B or F,B,I,W time units per microbatch for --simulate: one set for every stage, or one per "
                 "stage separated by ';'")
      ->capture_default_str();
  app.add_option("--action-costs", flags.actionCostsText,
                 "for --simulate: single actions' own times, in place of their stage's cost (a replay of a measured "
                 "run), as ACTION=TIME pairs separated by ',' (e.g. 0F1=2.5,1B0=13)");
  addTimeOption(app, "--pair-cost", flags.pairCost,
                 "for --simulate: DualPipe's F&B, the time of a forward and another stage's full backward overlapped: a "
                 "rank's F directly followed by such a B plays as one block this long, started once both have their "
                 "inputs (0: one after the other)");
  app.add_option("--cost-spread", flags.costSpread,
                 "for --simulate: actions' times vary around their cost (a lognormal factor with median 1 and this "
                 "coefficient of variation, per action); reports the mean and range of the bubble over --samples plays")
      ->check(kFinite)
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  app.add_option("--samples", flags.samples, "plays averaged with --cost-spread (seeds 1..N)")
      ->check(CLI::Range(1u, 100000u))
      ->capture_default_str();
  addTimeOption(app, "--transfer-latency", flags.latency, "time per cross-rank transfer for --simulate");
  addTimeOption(app, "--send-cost", flags.sendCost,
                 "for --simulate: the sending rank's own time per cross-rank message (a transport that writes "
                 "on the caller's thread, as Gloo's TCP one); not counted as compute in the bubble");
  addTimeOption(app, "--receive-cost", flags.receiveCost,
                 "for --simulate: the receiving rank's own time per cross-rank message, before the action reading it "
                 "(a transport whose own thread reads the socket, on a core the rank computes on); not counted as "
                 "compute in the bubble");
  app.add_option("--message-bytes", flags.messageBytesText,
                 "for --simulate, each rank's peak of receive-buffer bytes as cleave train holds them (reused once "
                 "read; posted two compute actions ahead, in each sender's order): the plan's messages as "
                 "FROM>TO:BYTES per microbatch, e.g. 0>1:4096,1>2:4096,0>3:24 (a gradient goes back with the same "
                 "bytes; stages on one rank send none)");
  addEnumOption(app, "--recompute", flags.recompute, pipeline::kRecomputeKinds,
                "for --simulate, activation recomputation as cleave train runs it: none (a forward holds "
                "--activation-bytes until its backward), stage (it holds --input-bytes; the backward first runs the "
                "forward again, adding --activation-bytes while it runs) or selective (it holds all but "
                "--dropped-bytes; the backward first replays those, taking --replay-cost)");
  auto addBytesOption = [&](const std::string& name, std::vector<std::int64_t>& bytes, const std::string& help) {
    app.add_option(name, bytes, help + " (one value for every stage, or one per stage separated by ',')")
        ->delimiter(',')
        ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40))
        ->capture_default_str();
  };
  addBytesOption("--activation-bytes", flags.activationBytes,
                 "bytes a stage's forward holds per microbatch until its backward (measured: cleave train --timing "
                 "--json's stage_forward_bytes, from a run without recomputation)");
  addBytesOption("--input-bytes", flags.inputBytes,
                 "with --recompute stage: what a stage's forward holds, its inputs (measured: stage_forward_bytes of a "
                 "run with stage recomputation)");
  addBytesOption("--dropped-bytes", flags.droppedBytes,
                 "with --recompute selective: the part of --activation-bytes its segments drop and make again "
                 "(measured: the stage_forward_bytes without recomputation less those with selective)");
  addBytesOption("--backward-bytes", flags.backwardBytes,
                 "bytes a stage's backward holds while it runs, above what it recomputes (measured: "
                 "stage_backward_bytes, from a run without recomputation)");
  addBytesOption("--gradient-bytes", flags.gradientBytes,
                 "a stage's parameters' gradients, made by its first backward (B or W) and kept to the step's end "
                 "(measured: stage_gradient_bytes)");
  addTimeOption(app, "--replay-cost", flags.replay,
                "with --recompute selective: the time a backward (or I) spends replaying the dropped segments");
  app.add_option("--svg", flags.svgPath, "write the simulated timeline as SVG (implies --simulate)");
  addJsonFlag(app, flags.json);
}

Expected<std::vector<double>> parseCosts(const std::string& text) {
  std::vector<double> costs;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    double value = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(value >= 0 && value <= 1e15)) // also NaN and inf
      return Error(ErrorCode::InvalidArgument) << "--costs '" << text << "': expected F,B[,I,W] non-negative numbers";
    costs.push_back(value);
  }
  if (costs.size() != 2 && costs.size() != 4)
    return Error(ErrorCode::InvalidArgument) << "--costs '" << text << "': expected F,B or F,B,I,W";
  return costs;
}

// "0F1=2.5,1B0=13" as (action, time) pairs.
Expected<std::vector<std::pair<pipeline::Action, double>>> parseActionCosts(const std::string& text) {
  std::vector<std::pair<pipeline::Action, double>> costs;
  for (std::string_view item : splitString(text, ',')) {
    const std::size_t equals = item.find('=');
    auto bad = [&] {
      return Error(ErrorCode::InvalidArgument) << "--action-costs '" << item << "': expected ACTION=TIME, as 0F1=2.5";
    };
    if (equals == std::string_view::npos)
      return bad();
    Expected<pipeline::Action> action = pipeline::parseAction(item.substr(0, equals));
    if (!action)
      return std::move(action.error().withContext("--action-costs"));
    const std::string number(item.substr(equals + 1));
    char* end = nullptr;
    const double value = std::strtod(number.c_str(), &end);
    if (number.empty() || *end != '\0' || !(value >= 0 && value <= 1e15)) // also NaN and inf
      return bad();
    costs.emplace_back(*action, value);
  }
  return costs;
}

// The schedule from --from-csv, or generated from --kind, --stages, --microbatches, --ranks.
Expected<pipeline::Schedule> obtainSchedule(const ScheduleFlags& flags) {
  if (!flags.csvIn.empty()) {
    CLEAVE_TRY(std::string text, readFile(flags.csvIn));
    Expected<pipeline::Schedule> parsed = pipeline::parseCsv(text, flags.stages, flags.microbatches);
    if (!parsed)
      return std::move(parsed.error().withContext(flags.csvIn));
    return parsed;
  }
  if (flags.stages == 0 || flags.microbatches == 0)
    return usageError() << "--stages and --microbatches are required (or --from-csv)";
  return pipeline::generateSchedule(flags.kind, flags.stages, flags.microbatches,
                                    flags.ranks ? flags.ranks : flags.stages);
}

// The per-stage value of a bytes option for `stages` stages: its one value, or its stage's.
Expected<std::int64_t> bytesOfStage(const std::vector<std::int64_t>& bytes, const char* name, std::size_t stage,
                                    std::size_t stages) {
  if (bytes.size() != 1 && bytes.size() != stages)
    return Error(ErrorCode::InvalidArgument) << name << ": " << bytes.size() << " values for " << stages
                                             << " stages (give one, or one per stage)";
  return bytes.size() == 1 ? bytes[0] : bytes[stage];
}

// Every stage's costs and bytes (one StageCosts for all when every option gives one value).
Expected<std::vector<pipeline::StageCosts>> stageCosts(const ScheduleFlags& flags, const pipeline::Schedule& schedule) {
  std::vector<std::vector<double>> costSets;
  for (std::string_view set : splitString(flags.costsText, ';')) {
    CLEAVE_TRY(std::vector<double> costs, parseCosts(std::string(set)));
    costSets.push_back(std::move(costs));
  }
  std::size_t count = costSets.size();
  for (const std::vector<std::int64_t>* bytes :
       {&flags.activationBytes, &flags.inputBytes, &flags.droppedBytes, &flags.backwardBytes, &flags.gradientBytes})
    count = std::max(count, bytes->size());
  if (count > 1)
    count = schedule.stages; // per stage (a wrong count is reported below, or by the simulator)
  if (costSets.size() != 1 && costSets.size() != count)
    return Error(ErrorCode::InvalidArgument) << "--costs: " << costSets.size() << " sets for " << count << " stages";
  std::vector<pipeline::StageCosts> stages;
  for (std::size_t i = 0; i < count; ++i) {
    const std::vector<double>& costs = costSets.size() == 1 ? costSets[0] : costSets[i];
    pipeline::StageCosts stage;
    stage.forward = costs[0];
    stage.backward = costs[1];
    stage.backwardInput = costs.size() == 4 ? costs[2] : costs[1] / 2;
    stage.backwardWeight = costs.size() == 4 ? costs[3] : costs[1] / 2;
    CLEAVE_TRY(stage.activationBytes, bytesOfStage(flags.activationBytes, "--activation-bytes", i, count));
    CLEAVE_TRY(stage.inputBytes, bytesOfStage(flags.inputBytes, "--input-bytes", i, count));
    CLEAVE_TRY(stage.droppedBytes, bytesOfStage(flags.droppedBytes, "--dropped-bytes", i, count));
    CLEAVE_TRY(stage.backwardBytes, bytesOfStage(flags.backwardBytes, "--backward-bytes", i, count));
    CLEAVE_TRY(stage.gradientBytes, bytesOfStage(flags.gradientBytes, "--gradient-bytes", i, count));
    stage.replay = flags.replay;
    stages.push_back(stage);
  }
  return stages;
}

Expected<pipeline::SimulationResult> simulate(const ScheduleFlags& flags, const pipeline::Schedule& schedule) {
  pipeline::SimulationOptions options;
  CLEAVE_TRY(options.stages, stageCosts(flags, schedule));
  options.recompute = flags.recompute;
  options.transferLatency = flags.latency;
  options.sendCost = flags.sendCost;
  options.receiveCost = flags.receiveCost;
  if (!flags.actionCostsText.empty()) {
    CLEAVE_TRY(options.actionCosts, parseActionCosts(flags.actionCostsText));
  }
  options.costSpread = flags.costSpread;
  options.pairCost = flags.pairCost;
  if (!flags.messageBytesText.empty()) {
    CLEAVE_TRY(options.messages, pipeline::parseStageEdges(flags.messageBytesText, schedule.stages));
  }
  Expected<pipeline::SimulationResult> result = flags.costSpread > 0
                                                    ? pipeline::simulateWithSpread(schedule, options, flags.samples)
                                                    : pipeline::simulateSchedule(schedule, options);
  if (!result)
    return std::move(
        result.error().withContext(flags.actionCostsText.empty() ? "--costs" : "--costs / --action-costs"));
  return result;
}

Status schedule(const ScheduleFlags& flags, std::ostream& out, std::ostream&) {
  CLEAVE_TRY(pipeline::Schedule schedule, obtainSchedule(flags));
  if (flags.comm && !schedule.hasCommunication())
    schedule = pipeline::withCommunication(schedule);
  CLEAVE_CHECK(pipeline::validateSchedule(schedule));
  std::optional<pipeline::TransportFit> transports;
  if (schedule.hasCommunication())
    transports = pipeline::checkTransports(schedule);
  std::optional<pipeline::SimulationResult> simulation;
  if (flags.simulate || !flags.svgPath.empty()) {
    CLEAVE_TRY(simulation, simulate(flags, schedule));
  }
  if (!flags.svgPath.empty())
    CLEAVE_CHECK(writeFileAtomically(flags.svgPath, report::scheduleTimelineSvg(schedule, *simulation)));
  if (!flags.csvOut.empty())
    CLEAVE_CHECK(writeFileAtomically(flags.csvOut, pipeline::formatCsv(schedule)));
  out << (flags.json ? dumpJson(report::scheduleReportJson(schedule, simulation, transports))
                     : report::scheduleReportText(schedule, simulation, transports));
  return {};
}
} // namespace

const Command kScheduleCommand{"schedule", "generate, validate and simulate pipeline schedules (GPipe, 1F1B, ...)",
                               parseThenRun<ScheduleFlags, describe, schedule>};

} // namespace cleave::cli
