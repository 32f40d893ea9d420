// report/memory_svg.h - an SVG bar chart of memory per device: one row per device, its capacity
// as the frame and one box per partition on it, sized by the partition's bytes.
// Complexity: linear in devices and partitions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cleave::report {

struct DeviceMemoryRow {
  std::string label;                                             // "dev_0 (id 0)"
  std::int64_t capacityBytes = 0;
  std::vector<std::pair<std::string, std::int64_t>> partitions; // (name, bytes), in order
};

// Deterministic text; names are XML-escaped.
std::string renderMemorySvg(const std::vector<DeviceMemoryRow>& rows);

} // namespace cleave::report
