#include "base/strings.h"

#include <cstdio>

namespace cleave {

std::uint32_t StringTable::intern(std::string_view text) {
  if (auto it = ids_.find(text); it != ids_.end())
    return it->second;
  auto id = static_cast<std::uint32_t>(strings_.size());
  const std::string& stored = strings_.emplace_back(text);
  ids_.emplace(std::string_view(stored), id);
  return id;
}

std::uint32_t StringTable::find(std::string_view text) const {
  auto it = ids_.find(text);
  return it == ids_.end() ? UINT32_MAX : it->second;
}

std::string formatBytes(std::int64_t bytes) {
  if (bytes < 0)
    return "?";
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024)
    return std::to_string(bytes) + " B";
  double scaled = static_cast<double>(bytes);
  int unit = -1;
  while (scaled >= 1024.0 && unit < 3) {
    scaled /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", scaled, kUnits[unit]);
  return text;
}

std::vector<std::string_view> splitString(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    std::size_t end = text.find(separator, start);
    if (end == std::string_view::npos) {
      parts.push_back(text.substr(start));
      return parts;
    }
    parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
}

bool matchGlob(std::string_view pattern, std::string_view text) {
  // Iterative matcher with single backtrack point: O(|pattern| * |text|) worst case.
  std::size_t p = 0, t = 0, starP = std::string_view::npos, starT = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      starP = p++;
      starT = t;
    } else if (starP != std::string_view::npos) {
      p = starP + 1;
      t = ++starT;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*')
    ++p;
  return p == pattern.size();
}

} // namespace cleave
