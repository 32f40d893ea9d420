// base/strings.h - string interning and small text helpers shared by every layer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cleave {

// Interns strings to dense uint32 ids; id 0 is always the empty string.
// A flat open-addressing table (linear probing, power-of-two size, load <= 1/2) whose slots keep
// part of the hash, so a probe touches the string bytes only on a likely match. Characters live
// in a chunked arena (chunks doubling from 4 KiB to 1 MiB): a view stays valid for the table's
// lifetime. Complexity: expected O(length) per intern or find; about 24 bytes per distinct string
// plus its characters.
class StringTable {
public:
  StringTable();
  StringTable(StringTable&&) noexcept = default;
  StringTable& operator=(StringTable&&) noexcept = default;

  std::uint32_t intern(std::string_view text);
  // The id of `text`, or UINT32_MAX when it was never interned.
  std::uint32_t find(std::string_view text) const;
  std::string_view str(std::uint32_t id) const { return views_[id]; }
  std::size_t size() const { return views_.size(); }
  void reserve(std::size_t count);
  // Bytes the arena holds for characters (used or not).
  std::size_t arenaBytes() const { return arenaBytes_; }

private:
  struct Slot {
    std::uint32_t idPlusOne = 0; // 0: empty
    std::uint32_t hashTag = 0;   // upper hash bits
  };
  static std::uint64_t hashOf(std::string_view text);
  std::string_view store(std::string_view text);
  void grow(std::size_t minSlots);

  std::vector<Slot> slots_;
  std::vector<std::string_view> views_;
  std::vector<std::unique_ptr<char[]>> chunks_;
  std::size_t chunkUsed_ = 0, chunkSize_ = 0, arenaBytes_ = 0;
};

// "1.5 KiB", "3.0 MiB": binary units with one decimal; plain bytes below 1 KiB.
std::string formatBytes(std::int64_t bytes);
// "604.2 k", "1.14 M", "3.20 G" + unit: SI prefixes with three significant digits ("12 FLOPs"
// below 1000, "0.25 ms" style small values are the caller's).
std::string formatSi(double value, std::string_view unit);
// The text up to its first newline: messages from other libraries made one line.
std::string_view firstLine(std::string_view text);
// "a, b, c"
std::string joinStrings(const std::vector<std::string>& parts, std::string_view separator = ", ");

// Splits on a single character; keeps empty fields.
std::vector<std::string_view> splitString(std::string_view text, char separator);

// `text` as a decimal integer when it is one whole (no sign but '-', no spaces), else none. O(text).
std::optional<std::int64_t> parseInteger(std::string_view text);

// A 64-bit FNV-1a digest of `text` as 16 hex digits: equal texts, equal digests (a fingerprint
// to compare across processes, not a cryptographic hash). O(text).
std::string hexDigest(std::string_view text);

// Shell-style glob with '*' (any run, including '.') and '?' (one character).
bool matchGlob(std::string_view pattern, std::string_view text);

} // namespace cleave
