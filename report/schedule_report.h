// report/schedule_report.h - what `cleave schedule` prints: the schedule rank by rank, and when
// simulated the makespan, bubble fraction, busy time and peak activations per rank, as text and
// JSON; for a schedule with its SEND/RECV actions, which transports it fits (buffered sends,
// rendezvous sends, ordered channels); the simulated timeline as SVG. Deterministic; O(actions).
#pragma once

#include <optional>
#include <string>

#include "base/json.h"
#include "pipeline/nccl_streams.h"
#include "pipeline/schedule_sim.h"

namespace cleave::report {

Json scheduleReportJson(const pipeline::Schedule& schedule, const std::optional<pipeline::SimulationResult>& simulation,
                        const std::optional<pipeline::TransportFit>& transports = std::nullopt);
std::string scheduleReportText(const pipeline::Schedule& schedule,
                               const std::optional<pipeline::SimulationResult>& simulation,
                               const std::optional<pipeline::TransportFit>& transports = std::nullopt);
std::string scheduleTimelineSvg(const pipeline::Schedule& schedule, const pipeline::SimulationResult& simulation);

} // namespace cleave::report
