// report/timeline_svg.h - a pipeline schedule's timeline as SVG: one row per rank, time to the
// right, one box per action (forward, backward, backward-input, backward-weight, communication
// in distinct colours), labelled with its action string.
// Complexity: linear in the actions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cleave::report {

struct TimelineBox {
  std::uint32_t row = 0;
  std::string label; // "1F0"
  char kind = 'F';   // F, B, I, W, or C (communication)
  double start = 0.0, end = 0.0;
};

std::string renderTimelineSvg(const std::vector<TimelineBox>& boxes, std::uint32_t rows, double makespan,
                              const std::string& title);

} // namespace cleave::report
