// base/json.h - reading JSON input safely, and writing JSON text that never throws.
//
// Guarantees:
//  - parseJsonInput refuses documents nested deeper than kMaxJsonDepth (a linear pre-scan, before
//    any parser recursion) and reports syntax errors with the source name and byte offset.
//  - Every target is built with JSON_DIAGNOSTICS (CMake), so nlohmann's type errors carry the JSON
//    path of the offending field. guardJson runs a reader's body and turns any nlohmann exception
//    into an Error "SOURCE: /devices/0/name: type must be string, but is array" (ParseError): a
//    field of the wrong type is a one-line error, never a crash.
//  - jsonInteger reads an integer field within explicit bounds (no silent float truncation,
//    wrap-around or out-of-range conversion).
//  - toJsonText / dumpJson write strings that are not valid UTF-8 (names taken from a model) with U+FFFD in
//    place of the bad bytes instead of throwing.
//  - Documents that grow with the model (plan.json, a split's report) are not built as trees but
//    streamed by base/json_writer.h, byte for byte as dumpJson writes them: with diagnostics on, a
//    tree pays a parent fix-up on every move, which made a 1M-node split's output cost seconds.
// Cost: linear in the text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "base/expected.h"

namespace cleave {

inline constexpr int kMaxJsonDepth = 256;

// Fails: ParseError (syntax, or nesting deeper than kMaxJsonDepth).
Expected<nlohmann::json> parseJsonInput(std::string_view text, std::string_view source);
// The same keeping every object's keys in file order (for readers that write the document back).
Expected<nlohmann::ordered_json> parseOrderedJsonInput(std::string_view text, std::string_view source);

// The Error for a nlohmann exception raised while reading `source`.
Error jsonReadError(const std::exception& e, std::string_view source);

// Runs `body` (returning Expected<T> or Status); a nlohmann exception becomes a ParseError naming
// `source` and the JSON path.
template <typename Body> auto guardJson(std::string_view source, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const nlohmann::json::exception& e) {
    return jsonReadError(e, source);
  }
}

// `value` as an integer in [min, max]. Fails: ParseError naming `source` and `field`.
Expected<std::int64_t> jsonInteger(const nlohmann::json& value, std::string_view source, std::string_view field,
                                   std::int64_t min, std::int64_t max);

// JSON text (indent < 0: compact) with invalid UTF-8 replaced, never throwing.
template <typename AnyJson> std::string toJsonText(const AnyJson& json, int indent = -1) {
  return json.dump(indent, ' ', false, AnyJson::error_handler_t::replace);
}

// The JSON cleave writes: ordered_json keeps insertion order, so every file and report cleave
// writes is byte-for-byte deterministic.
using Json = nlohmann::ordered_json;
// Two-space indented JSON and a final newline.
std::string dumpJson(const Json& json);

} // namespace cleave
