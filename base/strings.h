// base/strings.h - string interning and small text helpers shared by every layer.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cleave {

// Interns strings to dense uint32 ids. Id 0 is always the empty string.
// Storage is a deque so the string_view keys stay valid as it grows.
class StringTable {
public:
  StringTable() { intern(""); }
  std::uint32_t intern(std::string_view text);
  // Returns the id of `text` or UINT32_MAX when it was never interned.
  std::uint32_t find(std::string_view text) const;
  const std::string& str(std::uint32_t id) const { return strings_[id]; }
  std::size_t size() const { return strings_.size(); }
  void reserve(std::size_t count) { ids_.reserve(count); }

private:
  std::deque<std::string> strings_;
  std::unordered_map<std::string_view, std::uint32_t> ids_;
};

// "1.5 KiB", "3.0 MiB": binary units with one decimal; plain bytes below 1 KiB.
std::string formatBytes(std::int64_t bytes);

// Splits on a single character; keeps empty fields.
std::vector<std::string_view> splitString(std::string_view text, char separator);

// Shell-style glob with '*' (any run, including '.') and '?' (one character).
bool matchGlob(std::string_view pattern, std::string_view text);

} // namespace cleave
