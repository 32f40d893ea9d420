#include "report/timeline_svg.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace cleave::report {

namespace {
std::string number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f", value);
  return buffer;
}
const char* colorOf(char kind) {
  switch (kind) {
  case 'F': return "#4e79a7";
  case 'B': return "#59a14f";
  case 'I': return "#8cd17d";
  case 'W': return "#f28e2b";
  default: return "#bab0ac";
  }
}
} // namespace

std::string renderTimelineSvg(const std::vector<TimelineBox>& boxes, std::uint32_t rows, double makespan,
                              const std::string& title) {
  constexpr double kLabel = 70, kWidth = 1000, kRow = 26, kTop = 30;
  double scale = makespan > 0 ? kWidth / makespan : 1.0;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << number(kLabel + kWidth + 20) << "\" height=\""
      << number(kTop + kRow * rows + 30) << "\" font-family=\"monospace\" font-size=\"10\">\n";
  std::string escaped;
  for (char c : title)
    escaped += c == '<' ? std::string("&lt;") : c == '&' ? std::string("&amp;") : std::string(1, c);
  svg << "<text x=\"10\" y=\"18\" font-size=\"12\">" << escaped << "</text>\n";
  for (std::uint32_t r = 0; r < rows; ++r)
    svg << "<text x=\"10\" y=\"" << number(kTop + kRow * r + 16) << "\">rank " << r << "</text>\n";
  for (const TimelineBox& box : boxes) {
    double x = kLabel + box.start * scale, w = std::max((box.end - box.start) * scale, 0.5);
    double y = kTop + kRow * box.row;
    svg << "<rect x=\"" << number(x) << "\" y=\"" << number(y) << "\" width=\"" << number(w) << "\" height=\""
        << number(kRow - 4) << "\" fill=\"" << colorOf(box.kind) << "\" stroke=\"#ffffff\"><title>" << box.label << " ["
        << number(box.start) << ", " << number(box.end) << ")</title></rect>\n";
    if (w >= 6.0 * static_cast<double>(box.label.size()))
      svg << "<text x=\"" << number(x + 2) << "\" y=\"" << number(y + 15) << "\" fill=\"#ffffff\">" << box.label
          << "</text>\n";
  }
  svg << "<text x=\"" << number(kLabel) << "\" y=\"" << number(kTop + kRow * rows + 20) << "\">0</text>\n";
  svg << "<text x=\"" << number(kLabel + kWidth - 40) << "\" y=\"" << number(kTop + kRow * rows + 20) << "\">"
      << number(makespan) << "</text>\n";
  svg << "</svg>\n";
  return svg.str();
}

} // namespace cleave::report
