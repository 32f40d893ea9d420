// base/enum_table.h - one table per enum of user-facing names: parsing, printing, the list of
// choices for --help and error messages all read the same entries, so they cannot drift apart.
// Lookups are linear in the (small, constant) number of entries.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cleave {

template <typename E, std::size_t N> class EnumTable {
public:
  using Entry = std::pair<E, std::string_view>;
  constexpr explicit EnumTable(std::array<Entry, N> entries) : entries_(entries) {}

  std::optional<E> parse(std::string_view name) const {
    for (const auto& [value, entryName] : entries_)
      if (entryName == name)
        return value;
    return std::nullopt;
  }
  std::string_view name(E value) const {
    for (const auto& [entryValue, entryName] : entries_)
      if (entryValue == value)
        return entryName;
    return "?";
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& entry : entries_)
      out.emplace_back(entry.second);
    return out;
  }
  // "a, b or c"
  std::string choices() const {
    std::string out;
    for (std::size_t i = 0; i < N; ++i)
      out += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + std::string(entries_[i].second);
    return out;
  }

private:
  std::array<Entry, N> entries_;
};

// enumTable<Policy>({{Policy::EqualNodes, "equal_nodes"}, {Policy::Optimal, "optimal"}})
template <typename E, std::size_t N>
constexpr EnumTable<E, N> enumTable(const std::pair<E, std::string_view> (&entries)[N]) {
  std::array<std::pair<E, std::string_view>, N> copy{};
  for (std::size_t i = 0; i < N; ++i)
    copy[i] = entries[i];
  return EnumTable<E, N>(copy);
}

} // namespace cleave
