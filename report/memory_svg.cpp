#include "report/memory_svg.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "base/strings.h"

namespace cleave::report {

namespace {
std::string escapeXml(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
    case '<': out += "&lt;"; break;
    case '>': out += "&gt;"; break;
    case '&': out += "&amp;"; break;
    case '"': out += "&quot;"; break;
    default: out += c;
    }
  }
  return out;
}

std::string number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", value);
  return buffer;
}
} // namespace

std::string renderMemorySvg(const std::vector<DeviceMemoryRow>& rows) {
  constexpr double kLabelWidth = 160, kBarWidth = 560, kRowHeight = 34, kBarHeight = 22, kTop = 30;
  std::int64_t scale = 1;
  for (const DeviceMemoryRow& row : rows) {
    std::int64_t used = 0;
    for (const auto& [name, bytes] : row.partitions)
      used += bytes;
    scale = std::max({scale, row.capacityBytes, used});
  }
  double height = kTop + kRowHeight * static_cast<double>(rows.size()) + 10;
  double width = kLabelWidth + kBarWidth + 200;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << number(width) << "\" height=\"" << number(height)
      << "\" font-family=\"monospace\" font-size=\"12\">\n";
  svg << "<text x=\"10\" y=\"18\">memory per device (bar: capacity; boxes: partitions)</text>\n";
  static const char* kColors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"};
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const DeviceMemoryRow& row = rows[r];
    double y = kTop + kRowHeight * static_cast<double>(r);
    svg << "<text x=\"10\" y=\"" << number(y + 15) << "\">" << escapeXml(row.label) << "</text>\n";
    double capacity = kBarWidth * static_cast<double>(row.capacityBytes) / static_cast<double>(scale);
    svg << "<rect x=\"" << number(kLabelWidth) << "\" y=\"" << number(y) << "\" width=\"" << number(capacity)
        << "\" height=\"" << number(kBarHeight) << "\" fill=\"#eeeeee\" stroke=\"#333333\"/>\n";
    double x = kLabelWidth;
    std::int64_t used = 0;
    for (std::size_t p = 0; p < row.partitions.size(); ++p) {
      const auto& [name, bytes] = row.partitions[p];
      double w = kBarWidth * static_cast<double>(bytes) / static_cast<double>(scale);
      svg << "<rect x=\"" << number(x) << "\" y=\"" << number(y + 2) << "\" width=\"" << number(w) << "\" height=\""
          << number(kBarHeight - 4) << "\" fill=\"" << kColors[p % 8] << "\"><title>" << escapeXml(name) << ": "
          << formatBytes(bytes) << "</title></rect>\n";
      x += w;
      used += bytes;
    }
    svg << "<text x=\"" << number(kLabelWidth + kBarWidth + 10) << "\" y=\"" << number(y + 15) << "\">"
        << formatBytes(used) << " / " << formatBytes(row.capacityBytes) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

} // namespace cleave::report
