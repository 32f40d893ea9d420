#include "base/json.h"

namespace cleave {

namespace {
// The deepest nesting of arrays and objects in `text`, stopping early past `limit`. Brackets
// inside strings do not count.
int nestingDepth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool inString = false, escaped = false;
  for (char c : text) {
    if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit)
        return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// nlohmann's what(): "[json.exception.type_error.302] (/a/0/b) type must be string, but is array".
std::string describe(const std::exception& e) {
  std::string message = e.what();
  if (message.rfind("[json.exception.", 0) == 0)
    if (std::size_t close = message.find("] "); close != std::string::npos)
      message.erase(0, close + 2);
  if (!message.empty() && message.front() == '(')
    if (std::size_t close = message.find(") "); close != std::string::npos)
      message = message.substr(1, close - 1) + ": " + message.substr(close + 2);
  return message;
}

template <typename Json> Expected<Json> parseBounded(std::string_view text, std::string_view source) {
  if (nestingDepth(text, kMaxJsonDepth) > kMaxJsonDepth)
    return Error(ErrorCode::ParseError) << source << ": JSON nested deeper than " << kMaxJsonDepth << " levels";
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return Error(ErrorCode::ParseError) << source << ": invalid JSON: " << describe(e);
  }
}
} // namespace

Expected<nlohmann::json> parseJsonInput(std::string_view text, std::string_view source) {
  return parseBounded<nlohmann::json>(text, source);
}

Expected<nlohmann::ordered_json> parseOrderedJsonInput(std::string_view text, std::string_view source) {
  return parseBounded<nlohmann::ordered_json>(text, source);
}

Error jsonReadError(const std::exception& e, std::string_view source) {
  return Error(ErrorCode::ParseError) << source << ": " << describe(e);
}

Expected<std::int64_t> jsonInteger(const nlohmann::json& value, std::string_view source, std::string_view field,
                                   std::int64_t min, std::int64_t max) {
  auto fail = [&]() {
    std::string found = value.is_number() ? toJsonText(value) : std::string("a value of type ") + value.type_name();
    return Error(ErrorCode::ParseError) << source << ": " << field << ": expected an integer in [" << min << ", "
                                        << max << "], found " << found;
  };
  std::int64_t v = 0;
  if (value.is_number_unsigned()) {
    auto u = value.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(max))
      return fail();
    v = static_cast<std::int64_t>(u);
  } else if (value.is_number_integer()) {
    v = value.get<std::int64_t>();
  } else {
    return fail();
  }
  if (v < min || v > max)
    return fail();
  return v;
}

std::string dumpJson(const Json& json) { return toJsonText(json, 2) + "\n"; }

} // namespace cleave
