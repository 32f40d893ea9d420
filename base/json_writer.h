// base/json_writer.h - JSON text written as it is produced, for the documents that grow with the
// model (plan.json, a split's report): a tree of nlohmann values costs an allocation per value
// and, built with JSON_DIAGNOSTICS (which the readers need for their error paths), a parent
// pointer fix-up on every move; a 1M-node split spent 6 s there.
//
// Guarantees: the text is byte for byte what dumpJson (base/json.h) writes for the same values in
// the same order: two-space indentation, ", " nowhere, "key": value, empty containers as {} and [],
// numbers as nlohmann prints them, strings escaped alike (invalid UTF-8 replaced by U+FFFD). Keys
// are written in call order (as ordered_json keeps them). Misuse (a key outside an object, a
// value where a key is due, an unclosed container at finish) is a programming error, checked by
// assertions in debug builds.
// Complexity: linear in the text written; plain ASCII strings are copied without a JSON value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"

namespace cleave {

class JsonWriter {
public:
  // `expectedBytes`: room reserved up front, so a document of tens of megabytes is not copied at
  // each doubling of its buffer (a guess; any value is correct).
  explicit JsonWriter(std::size_t expectedBytes = 0) { out_.reserve(expectedBytes); }
  void beginObject();
  void endObject();
  void beginArray();
  void endArray();
  // Inside an object: the next value's key.
  JsonWriter& key(std::string_view name);
  void string(std::string_view text);
  void integer(std::int64_t number);
  void unsignedInteger(std::uint64_t number);
  void number(double number); // as nlohmann prints a double (17 significant digits at most, 1.0 for one)
  void boolean(bool value);
  void null();
  // A value already built as a tree (small parts: a settings object, remarks), re-indented to fit.
  void tree(const Json& value);
  // The document with dumpJson's final newline; the writer is empty afterwards.
  std::string finish();

private:
  void beforeValue(); // the comma, newline and indent a value needs where it goes
  void indent();
  void close(bool object); // the container's closing bracket, on its own line unless it is empty
  void writeString(std::string_view text); // quoted and escaped
  struct Level {
    bool object = false;
    std::size_t entries = 0;
    bool keyPending = false;
  };
  std::string out_;
  std::vector<Level> levels_;
};

} // namespace cleave
