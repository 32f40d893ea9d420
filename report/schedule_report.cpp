#include "report/schedule_report.h"

#include <sstream>

#include "report/timeline_svg.h"

namespace cleave::report {

namespace {
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

Json scheduleReportJson(const pipeline::Schedule& schedule, const std::optional<pipeline::SimulationResult>& simulation,
                        const std::optional<pipeline::TransportFit>& transports) {
  Json summary;
  summary["stages"] = schedule.stages;
  summary["ranks"] = schedule.ranks;
  summary["microbatches"] = schedule.microbatches;
  summary["placement"] = schedule.placement == pipeline::Placement::V ? "v" : "loop";
  summary["valid"] = true;
  Json ranks = Json::array();
  for (std::uint32_t r = 0; r < schedule.ranks; ++r) {
    Json actions = Json::array();
    for (const pipeline::Action& a : schedule.perRank[r])
      actions.push_back(pipeline::formatAction(a));
    ranks.push_back(std::move(actions));
  }
  summary["actions"] = std::move(ranks);
  if (simulation)
    summary["simulation"] = {{"makespan", simulation->makespan},
                             {"bubble_fraction", simulation->bubbleFraction},
                             {"busy", simulation->busy},
                             {"peak_activation_bytes", simulation->peakActivationBytes}};
  if (simulation && !simulation->peakReceiveBytes.empty())
    summary["simulation"]["peak_receive_bytes"] = simulation->peakReceiveBytes;
  if (simulation && simulation->spread) { // the plays with varying action times
    const pipeline::SpreadSummary& spread = *simulation->spread;
    summary["simulation"]["spread"] = {{"samples", spread.samples},
                                       {"mean_makespan", spread.meanMakespan},
                                       {"mean_bubble_fraction", spread.meanBubble},
                                       {"bubble_fraction_range", {spread.minBubble, spread.maxBubble}}};
  }
  if (transports) // "ok", or why not
    summary["transports"] = {{"buffered", "ok"},
                             {"rendezvous", transports->rendezvous.empty() ? "ok" : transports->rendezvous},
                             {"ordered_channels", transports->orderedChannels.empty() ? "ok" : transports->orderedChannels},
                             {"nccl_channel_streams", transports->ncclChannelStreams.empty() ? "ok" : transports->ncclChannelStreams},
                             {"nccl_pair_streams", transports->ncclPairStreams.empty() ? "ok" : transports->ncclPairStreams}};
  return summary;
}

std::string scheduleReportText(const pipeline::Schedule& schedule,
                               const std::optional<pipeline::SimulationResult>& simulation,
                               const std::optional<pipeline::TransportFit>& transports) {
  std::ostringstream text;
  text << schedule.stages << " stages on " << schedule.ranks << " ranks"
       << (schedule.placement == pipeline::Placement::V ? " in a V" : "") << ", " << schedule.microbatches
       << " microbatches: valid (no deadlock)\n";
  for (std::uint32_t r = 0; r < schedule.ranks; ++r) {
    text << "rank " << r << ":";
    for (const pipeline::Action& a : schedule.perRank[r])
      text << " " << pipeline::formatAction(a);
    text << "\n";
  }
  if (transports) {
    auto fit = [](const std::string& why) { return why.empty() ? std::string("ok") : "no: " + why; };
    text << "transports: buffered sends (cleave's Gloo runner) ok\n"
         << "  rendezvous sends (a send waits for its receive): " << fit(transports->rendezvous) << "\n"
         << "  ordered channels (untagged, NCCL): " << fit(transports->orderedChannels) << "\n"
         << "  NCCL as cleave issues it (a stream per channel, receives posted ahead in the sender's order): "
         << fit(transports->ncclChannelStreams) << "\n"
         << "  NCCL as PyTorch's pipelining issues it (a stream per rank pair, a batch per action): "
         << fit(transports->ncclPairStreams) << "\n";
  }
  if (!simulation)
    return text.str();
  text << "makespan " << simulation->makespan << ", bubble fraction " << simulation->bubbleFraction
       << (simulation->spread ? " (the first of the plays below)" : "") << "\n";
  if (const auto& spread = simulation->spread)
    text << "with varying action times, over " << spread->samples << " plays: mean makespan " << spread->meanMakespan
         << ", mean bubble fraction " << spread->meanBubble << " [" << spread->minBubble << ", " << spread->maxBubble
         << "]\n";
  for (std::uint32_t r = 0; r < schedule.ranks; ++r)
    text << "  rank " << r << ": busy " << simulation->busy[r] << ", peak activations "
         << simulation->peakActivationBytes[r] << " bytes"
         << (simulation->peakReceiveBytes.empty() ? std::string()
                                                   : ", peak receive buffers " + std::to_string(simulation->peakReceiveBytes[r]) + " bytes")
         << "\n";
  return text.str();
}

std::string scheduleTimelineSvg(const pipeline::Schedule& schedule, const pipeline::SimulationResult& simulation) {
  std::vector<TimelineBox> boxes;
  for (const pipeline::TimedAction& timed : simulation.timeline)
    boxes.push_back({timed.rank, pipeline::formatAction(timed.action), kindOf(timed.action.type), timed.start,
                     timed.end});
  std::string title = std::to_string(schedule.stages) + " stages, " + std::to_string(schedule.ranks) + " ranks, " +
                      std::to_string(schedule.microbatches) + " microbatches: makespan " +
                      std::to_string(simulation.makespan) + ", bubble " + std::to_string(simulation.bubbleFraction);
  return renderTimelineSvg(boxes, schedule.ranks, simulation.makespan, title);
}

} // namespace cleave::report
