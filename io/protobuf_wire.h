// io/protobuf_wire.h - a bounds-checked reader of the protobuf wire format, and the one writer
// cleave needs beside protobuf's own (a length-delimited field, for copying messages in part).
// Used to scan ONNX models without materializing protobuf messages: every read checks the end of
// its span, so truncated or corrupt input yields `false`, never an out-of-bounds access.
// Complexity: each read is O(its bytes); scanning a message is one pass over its span.
#pragma once

#include <cstdint>
#include <string_view>

namespace cleave::io {

enum class WireType : std::uint8_t { Varint = 0, Fixed64 = 1, Bytes = 2, Fixed32 = 5 };

class WireReader {
public:
  explicit WireReader(std::string_view bytes)
      : at_(reinterpret_cast<const std::uint8_t*>(bytes.data())), end_(at_ + bytes.size()) {}

  bool atEnd() const { return at_ == end_; }
  // Next field's number and wire type. False at a malformed tag.
  bool readTag(std::uint32_t& field, WireType& type) {
    std::uint64_t tag;
    if (!readVarint(tag) || (tag >> 3) == 0 || (tag >> 3) > 0x1FFFFFFF)
      return false;
    field = static_cast<std::uint32_t>(tag >> 3);
    auto raw = static_cast<std::uint8_t>(tag & 7);
    if (raw != 0 && raw != 1 && raw != 2 && raw != 5)
      return false; // groups (3, 4) do not occur in ONNX
    type = static_cast<WireType>(raw);
    return true;
  }
  bool readVarint(std::uint64_t& value) {
    value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ == end_)
        return false;
      std::uint8_t byte = *at_++;
      value |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
      if (!(byte & 0x80))
        return true;
    }
    return false;
  }
  bool readBytes(std::string_view& bytes) {
    std::uint64_t length;
    if (!readVarint(length) || length > static_cast<std::uint64_t>(end_ - at_))
      return false;
    bytes = {reinterpret_cast<const char*>(at_), static_cast<std::size_t>(length)};
    at_ += length;
    return true;
  }
  bool skip(WireType type) {
    std::uint64_t ignored;
    std::string_view bytes;
    switch (type) {
    case WireType::Varint: return readVarint(ignored);
    case WireType::Fixed64: return advance(8);
    case WireType::Fixed32: return advance(4);
    case WireType::Bytes: return readBytes(bytes);
    }
    return false;
  }
  // Reads a varint field or a packed run of them (both encodings are valid for repeated ints).
  template <typename Sink> bool readInts(WireType type, Sink&& sink) {
    std::uint64_t value;
    if (type == WireType::Varint) {
      if (!readVarint(value))
        return false;
      sink(static_cast<std::int64_t>(value));
      return true;
    }
    std::string_view packed;
    if (type != WireType::Bytes || !readBytes(packed))
      return false;
    WireReader inner(packed);
    while (!inner.atEnd()) {
      if (!inner.readVarint(value))
        return false;
      sink(static_cast<std::int64_t>(value));
    }
    return true;
  }
  const char* position() const { return reinterpret_cast<const char*>(at_); }

private:
  bool advance(std::size_t count) {
    if (count > static_cast<std::size_t>(end_ - at_))
      return false;
    at_ += count;
    return true;
  }
  const std::uint8_t* at_;
  const std::uint8_t* end_;
};

// Appends a length-delimited field (tag, length, bytes) to `out`.
inline void appendBytesField(std::string& out, std::uint32_t field, std::string_view bytes) {
  auto appendVarint = [&out](std::uint64_t value) {
    while (value >= 0x80) {
      out.push_back(static_cast<char>((value & 0x7F) | 0x80));
      value >>= 7;
    }
    out.push_back(static_cast<char>(value));
  };
  appendVarint((static_cast<std::uint64_t>(field) << 3) | static_cast<std::uint64_t>(WireType::Bytes));
  appendVarint(bytes.size());
  out.append(bytes);
}

// Calls visit(field, type, reader, ok) for each field of a message; `visit` consumes the field
// (setting ok false when it is malformed) or returns false to have it skipped. False when the
// message is malformed. O(message bytes) plus what `visit` does.
template <typename Visit> bool forEachField(std::string_view message, Visit&& visit) {
  WireReader reader(message);
  while (!reader.atEnd()) {
    std::uint32_t number;
    WireType type;
    if (!reader.readTag(number, type))
      return false;
    bool ok = true;
    if (!visit(number, type, reader, ok))
      ok = reader.skip(type);
    if (!ok)
      return false;
  }
  return true;
}

// Reads a length-delimited field as text/bytes; false if the field has another wire type.
inline bool readText(WireType type, WireReader& reader, std::string_view& out) {
  return type == WireType::Bytes && reader.readBytes(out);
}

} // namespace cleave::io
