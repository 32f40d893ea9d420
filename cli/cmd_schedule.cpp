// cli/cmd_schedule.cpp - `cleave schedule --kind K --stages S --microbatches M [--ranks R]
// [--csv FILE] [--from-csv FILE] [--simulate] [--svg FILE]`: generate (or read), validate,
// simulate and draw a pipeline schedule.
#include <sstream>

#include "base/file_io.h"
#include "cli/commands.h"
#include "pipeline/schedule_sim.h"
#include "report/json_util.h"
#include "report/timeline_svg.h"

namespace cleave::cli {

namespace {
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

char kindOf(pipeline::ActionType type) {
  switch (type) {
  case pipeline::ActionType::Forward: return 'F';
  case pipeline::ActionType::Backward: return 'B';
  case pipeline::ActionType::BackwardInput: return 'I';
  case pipeline::ActionType::BackwardWeight: return 'W';
  default: return 'C';
  }
}
} // namespace

int runSchedule(const Args& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"Generate, validate and simulate a pipeline schedule (GPipe, 1F1B, interleaved 1F1B, looped BFS, "
               "zero bubble); read and write PyTorch-style action CSVs; draw the timeline.",
               "cleave schedule"};
  std::string kindName = "1f1b", csvOut, csvIn, svgPath, costsText = "1,2,1,1";
  std::uint32_t stages = 0, microbatches = 0, ranks = 0;
  double latency = 0.0;
  std::int64_t activationBytes = 1;
  bool simulate = false, comm = false, json = false;
  app.add_option("--kind", kindName, "gpipe, 1f1b, interleaved, looped_bfs or zero_bubble")->capture_default_str();
  app.add_option("--stages", stages, "pipeline stages (a multiple of the ranks)");
  app.add_option("--microbatches", microbatches, "microbatches per step");
  app.add_option("--ranks", ranks, "ranks (default: one per stage)");
  app.add_option("--from-csv", csvIn, "read the schedule from a CSV instead of generating it");
  app.add_option("--csv", csvOut, "write the schedule as CSV (one line per rank)");
  app.add_flag("--comm", comm, "include the SEND/RECV actions");
  app.add_flag("--simulate", simulate, "time the schedule: makespan, bubble fraction, peak activations per rank");
  app.add_option("--costs", costsText, "per stage F,B or F,B,I,W time units for --simulate")->capture_default_str();
  app.add_option("--transfer-latency", latency, "time per cross-rank transfer for --simulate")
      ->check(CLI::Range(0.0, 1e15))
      ->capture_default_str();
  app.add_option("--activation-bytes", activationBytes, "activation bytes a microbatch holds per stage")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--svg", svgPath, "write the simulated timeline as SVG (implies --simulate)");
  app.add_flag("--json", json, "print a JSON report");
  if (int code = parseArguments(app, args, out, err); code >= 0)
    return code;
  Expected<pipeline::Schedule> schedule = Error(ErrorCode::InvalidArgument);
  if (!csvIn.empty()) {
    Expected<std::string> text = readFile(csvIn);
    if (!text)
      return reportError("cleave schedule", text.error(), err);
    schedule = pipeline::parseCsv(*text, stages, microbatches);
    if (!schedule)
      return reportError("cleave schedule", schedule.error().withContext(csvIn), err);
  } else {
    std::optional<pipeline::ScheduleKind> kind = pipeline::parseScheduleKind(kindName);
    if (!kind) {
      err << "cleave schedule: usage error: unknown --kind '" << kindName
          << "' (gpipe, 1f1b, interleaved, looped_bfs, zero_bubble)\n";
      return kExitUsage;
    }
    if (stages == 0 || microbatches == 0) {
      err << "cleave schedule: usage error: --stages and --microbatches are required (or --from-csv)\n";
      return kExitUsage;
    }
    schedule = pipeline::generateSchedule(*kind, stages, microbatches, ranks ? ranks : stages);
    if (!schedule)
      return reportError("cleave schedule", schedule.error(), err);
  }
  if (comm && !schedule->hasCommunication())
    *schedule = pipeline::withCommunication(*schedule);
  if (Status valid = pipeline::validateSchedule(*schedule); !valid)
    return reportError("cleave schedule", valid.error(), err);
  report::Json summary;
  summary["stages"] = schedule->stages;
  summary["ranks"] = schedule->ranks;
  summary["microbatches"] = schedule->microbatches;
  summary["valid"] = true;
  report::Json ranksJson = report::Json::array();
  std::ostringstream text;
  text << schedule->stages << " stages on " << schedule->ranks << " ranks, " << schedule->microbatches
       << " microbatches: valid (no deadlock)\n";
  for (std::uint32_t r = 0; r < schedule->ranks; ++r) {
    report::Json actions = report::Json::array();
    text << "rank " << r << ":";
    for (const pipeline::Action& a : schedule->perRank[r]) {
      actions.push_back(pipeline::formatAction(a));
      text << " " << pipeline::formatAction(a);
    }
    text << "\n";
    ranksJson.push_back(std::move(actions));
  }
  summary["actions"] = std::move(ranksJson);
  if (simulate || !svgPath.empty()) {
    Expected<std::vector<double>> costs = parseCosts(costsText);
    if (!costs)
      return reportError("cleave schedule", costs.error(), err);
    pipeline::SimulationOptions options;
    pipeline::StageCosts stageCosts;
    stageCosts.forward = (*costs)[0];
    stageCosts.backward = (*costs)[1];
    stageCosts.backwardInput = costs->size() == 4 ? (*costs)[2] : (*costs)[1] / 2;
    stageCosts.backwardWeight = costs->size() == 4 ? (*costs)[3] : (*costs)[1] / 2;
    stageCosts.activationBytes = activationBytes;
    options.stages = {stageCosts};
    options.transferLatency = latency;
    Expected<pipeline::SimulationResult> result = pipeline::simulateSchedule(*schedule, options);
    if (!result)
      return reportError("cleave schedule", result.error(), err);
    summary["simulation"] = {{"makespan", result->makespan},
                             {"bubble_fraction", result->bubbleFraction},
                             {"busy", result->busy},
                             {"peak_activation_bytes", result->peakActivationBytes}};
    text << "makespan " << result->makespan << ", bubble fraction " << result->bubbleFraction << "\n";
    for (std::uint32_t r = 0; r < schedule->ranks; ++r)
      text << "  rank " << r << ": busy " << result->busy[r] << ", peak activations " << result->peakActivationBytes[r]
           << " bytes\n";
    if (!svgPath.empty()) {
      std::vector<report::TimelineBox> boxes;
      for (const pipeline::TimedAction& timed : result->timeline)
        boxes.push_back({timed.rank, pipeline::formatAction(timed.action), kindOf(timed.action.type), timed.start,
                         timed.end});
      std::string title = std::to_string(schedule->stages) + " stages, " + std::to_string(schedule->ranks) + " ranks, " +
                          std::to_string(schedule->microbatches) + " microbatches: makespan " +
                          std::to_string(result->makespan) + ", bubble " + std::to_string(result->bubbleFraction);
      if (Status written = writeFileAtomically(svgPath, report::renderTimelineSvg(boxes, schedule->ranks,
                                                                                 result->makespan, title));
          !written)
        return reportError("cleave schedule", written.error(), err);
    }
  }
  if (!csvOut.empty())
    if (Status written = writeFileAtomically(csvOut, pipeline::formatCsv(*schedule)); !written)
      return reportError("cleave schedule", written.error(), err);
  out << (json ? report::dumpJson(summary) : text.str());
  return kExitOk;
}

} // namespace cleave::cli
