#include "base/strings.h"

#include <cmath>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>

namespace cleave {

namespace {
// Chunks double from 4 KiB to 1 MiB: a small graph's names take a few KiB (a cut model loads one
// graph per submodel; SSD300 cut 49 ways held 49 MiB of chunks that were made 1 MiB and zeroed),
// a large one's still come in few allocations.
constexpr std::size_t kFirstChunkBytes = 4 << 10, kLargestChunkBytes = 1 << 20;
} // namespace

StringTable::StringTable() {
  slots_.resize(64);
  intern("");
}

std::uint64_t StringTable::hashOf(std::string_view text) {
  // FNV-1a over 8-byte words, then a final mix: fast for the short names graphs are made of.
  std::uint64_t hash = 1469598103934665603ull ^ text.size();
  std::size_t i = 0;
  for (; i + 8 <= text.size(); i += 8) {
    std::uint64_t word;
    std::memcpy(&word, text.data() + i, 8);
    hash = (hash ^ word) * 1099511628211ull;
  }
  for (; i < text.size(); ++i)
    hash = (hash ^ static_cast<unsigned char>(text[i])) * 1099511628211ull;
  hash ^= hash >> 29;
  hash *= 0xBF58476D1CE4E5B9ull;
  return hash ^ (hash >> 32);
}

std::string_view StringTable::store(std::string_view text) {
  if (text.empty())
    return {};
  if (chunks_.empty() || chunkUsed_ + text.size() > chunkSize_) {
    chunkSize_ = std::max(chunks_.empty() ? kFirstChunkBytes : std::min(2 * chunkSize_, kLargestChunkBytes), text.size());
    chunks_.push_back(std::make_unique_for_overwrite<char[]>(chunkSize_));
    arenaBytes_ += chunkSize_;
    chunkUsed_ = 0;
  }
  char* at = chunks_.back().get() + chunkUsed_;
  std::memcpy(at, text.data(), text.size());
  chunkUsed_ += text.size();
  return {at, text.size()};
}

void StringTable::grow(std::size_t minSlots) {
  std::size_t size = slots_.size();
  while (size < minSlots)
    size *= 2;
  if (size == slots_.size())
    return;
  std::vector<Slot> slots(size);
  std::size_t mask = size - 1;
  for (std::uint32_t id = 0; id < views_.size(); ++id) {
    std::uint64_t hash = hashOf(views_[id]);
    std::size_t at = hash & mask;
    while (slots[at].idPlusOne)
      at = (at + 1) & mask;
    slots[at] = Slot{id + 1, static_cast<std::uint32_t>(hash >> 32)};
  }
  slots_ = std::move(slots);
}

void StringTable::reserve(std::size_t count) {
  grow(count * 2);
  views_.reserve(count);
}

std::uint32_t StringTable::intern(std::string_view text) {
  std::uint64_t hash = hashOf(text);
  auto tag = static_cast<std::uint32_t>(hash >> 32);
  std::size_t mask = slots_.size() - 1;
  std::size_t at = hash & mask;
  while (slots_[at].idPlusOne) {
    if (slots_[at].hashTag == tag && views_[slots_[at].idPlusOne - 1] == text)
      return slots_[at].idPlusOne - 1;
    at = (at + 1) & mask;
  }
  auto id = static_cast<std::uint32_t>(views_.size());
  views_.push_back(store(text));
  slots_[at] = Slot{id + 1, tag};
  if (views_.size() * 2 > slots_.size())
    grow(slots_.size() * 2);
  return id;
}

std::uint32_t StringTable::find(std::string_view text) const {
  std::uint64_t hash = hashOf(text);
  auto tag = static_cast<std::uint32_t>(hash >> 32);
  std::size_t mask = slots_.size() - 1;
  for (std::size_t at = hash & mask; slots_[at].idPlusOne; at = (at + 1) & mask)
    if (slots_[at].hashTag == tag && views_[slots_[at].idPlusOne - 1] == text)
      return slots_[at].idPlusOne - 1;
  return UINT32_MAX;
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

std::string formatSi(double value, std::string_view unit) {
  static const char* kPrefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  if (!std::isfinite(value))
    return "? " + std::string(unit);
  double scaled = std::fabs(value);
  int prefix = 0;
  while (scaled >= 999.5 && prefix < 6) {
    scaled /= 1000.0;
    ++prefix;
  }
  char text[48];
  if (prefix == 0 && scaled == std::floor(scaled))
    std::snprintf(text, sizeof text, "%s%.0f %s", value < 0 ? "-" : "", scaled, std::string(unit).c_str());
  else
    std::snprintf(text, sizeof text, "%s%.*f %s%s", value < 0 ? "-" : "", scaled < 9.995 ? 2 : scaled < 99.95 ? 1 : 0,
                  scaled, kPrefixes[prefix], std::string(unit).c_str());
  return text;
}

std::string joinStrings(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (const std::string& part : parts) {
    if (!out.empty())
      out += separator;
    out += part;
  }
  return out;
}

std::string_view firstLine(std::string_view text) { return text.substr(0, text.find('\n')); }

std::optional<std::int64_t> parseInteger(std::string_view text) {
  std::int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size())
    return std::nullopt;
  return value;
}

std::string hexDigest(std::string_view text) {
  std::uint64_t digest = 0xcbf29ce484222325ULL; // FNV-1a's offset basis and prime
  for (unsigned char c : text)
    digest = (digest ^ c) * 0x100000001b3ULL;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(digest));
  return hex;
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
