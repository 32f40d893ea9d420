#include "base/json_writer.h"

#include <cassert>
#include <charconv>
#include <utility>

namespace cleave {

namespace {
// Printable ASCII other than '"' and '\\': written as it is, as nlohmann writes it.
bool plainAscii(std::string_view text) {
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f || c == '"' || c == '\\')
      return false;
  }
  return true;
}
} // namespace

void JsonWriter::indent() { out_.append(2 * levels_.size(), ' '); }

void JsonWriter::beforeValue() {
  if (levels_.empty())
    return;
  Level& level = levels_.back();
  if (level.object) {
    assert(level.keyPending && "a value in an object needs its key first");
    level.keyPending = false;
    return; // key() wrote the separator and indent
  }
  out_ += level.entries++ ? ",\n" : "\n";
  indent();
}

JsonWriter& JsonWriter::key(std::string_view name) {
  assert(!levels_.empty() && levels_.back().object && !levels_.back().keyPending);
  Level& level = levels_.back();
  out_ += level.entries++ ? ",\n" : "\n";
  indent();
  writeString(name);
  out_ += ": ";
  level.keyPending = true;
  return *this;
}

void JsonWriter::beginObject() {
  beforeValue();
  out_ += '{';
  levels_.push_back({true, 0, false});
}

void JsonWriter::beginArray() {
  beforeValue();
  out_ += '[';
  levels_.push_back({false, 0, false});
}

void JsonWriter::close(bool object) {
  assert(!levels_.empty() && levels_.back().object == object && !levels_.back().keyPending);
  const bool empty = levels_.back().entries == 0;
  levels_.pop_back();
  if (!empty) { // entries end on their own line; an empty container is {} or []
    out_ += '\n';
    indent();
  }
  out_ += object ? '}' : ']';
}

void JsonWriter::endObject() { close(true); }

void JsonWriter::endArray() { close(false); }

void JsonWriter::string(std::string_view text) {
  beforeValue();
  writeString(text);
}

void JsonWriter::writeString(std::string_view text) {
  if (plainAscii(text)) {
    out_ += '"';
    out_ += text;
    out_ += '"';
    return;
  }
  out_ += toJsonText(Json(std::string(text)));
}

void JsonWriter::integer(std::int64_t number) {
  beforeValue();
  char buffer[24];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, number);
  out_.append(buffer, end);
}

void JsonWriter::unsignedInteger(std::uint64_t number) {
  beforeValue();
  char buffer[24];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, number);
  out_.append(buffer, end);
}

void JsonWriter::number(double number) {
  beforeValue();
  out_ += toJsonText(Json(number));
}

void JsonWriter::boolean(bool value) {
  beforeValue();
  out_ += value ? "true" : "false";
}

void JsonWriter::null() {
  beforeValue();
  out_ += "null";
}

void JsonWriter::tree(const Json& value) {
  beforeValue();
  const std::string text = toJsonText(value, 2);
  const std::size_t depth = 2 * levels_.size();
  // A string never holds a raw newline (it is escaped), so every newline starts a line to indent.
  for (char c : text) {
    out_ += c;
    if (c == '\n')
      out_.append(depth, ' ');
  }
}

std::string JsonWriter::finish() {
  assert(levels_.empty() && "every container closed");
  out_ += '\n';
  return std::exchange(out_, {});
}

} // namespace cleave
