#include "io/zip.h"

#include <zlib.h>

#include <cstdint>
#include <limits>

namespace cleave::io {

namespace {
constexpr std::uint32_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50, kEndOfDirectory = 0x06054b50;
constexpr std::size_t kEndRecordSize = 22, kCentralSize = 46, kLocalSize = 30;

std::uint32_t le(std::string_view bytes, std::size_t at, int width) {
  std::uint32_t value = 0;
  for (int k = 0; k < width; ++k)
    value |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[at + k])) << (8 * k);
  return value;
}

void put(std::string& out, std::uint32_t value, int width) {
  for (int k = 0; k < width; ++k)
    out.push_back(static_cast<char>((value >> (8 * k)) & 0xff));
}

std::uint32_t crcOf(std::string_view data) {
  return static_cast<std::uint32_t>(
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
}

// The end-of-central-directory record: the last signature with a comment that reaches the end.
Expected<std::size_t> findEndRecord(std::string_view archive, const std::string& what) {
  if (archive.size() < kEndRecordSize)
    return Error(ErrorCode::ParseError) << what << ": not a zip archive (too short)";
  for (std::size_t at = archive.size() - kEndRecordSize + 1; at-- > 0;) {
    if (le(archive, at, 4) == kEndOfDirectory && at + kEndRecordSize + le(archive, at + 20, 2) == archive.size())
      return at;
    if (archive.size() - at > kEndRecordSize + 0xffff)
      break;
  }
  return Error(ErrorCode::ParseError) << what << ": not a zip archive (no end of central directory)";
}

Expected<std::string> inflateRaw(std::string_view compressed, std::size_t size, const std::string& what) {
  std::string out(size, '\0');
  z_stream stream{};
  if (inflateInit2(&stream, -MAX_WBITS) != Z_OK)
    return Error(ErrorCode::Unsupported) << "zlib's inflateInit2 failed";
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  stream.avail_in = static_cast<uInt>(compressed.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  int result = inflate(&stream, Z_FINISH);
  std::size_t produced = stream.total_out;
  inflateEnd(&stream);
  if (result != Z_STREAM_END || produced != size)
    return Error(ErrorCode::ParseError) << what << ": a deflated member does not inflate to its declared size";
  return out;
}

Expected<ZipMember> readMember(std::string_view archive, std::size_t entry, const std::string& what,
                               std::size_t maxMemberBytes) {
  std::uint32_t method = le(archive, entry + 10, 2), crc = le(archive, entry + 16, 4);
  std::uint32_t compressedSize = le(archive, entry + 20, 4), size = le(archive, entry + 24, 4);
  std::uint32_t nameLength = le(archive, entry + 28, 2), flags = le(archive, entry + 8, 2);
  std::size_t localAt = le(archive, entry + 42, 4);
  if (entry + kCentralSize + nameLength > archive.size())
    return Error(ErrorCode::ParseError) << what << ": a central directory entry runs past the archive";
  ZipMember member{std::string(archive.substr(entry + kCentralSize, nameLength)), {}};
  std::string where = what + ": member '" + member.name + "'";
  if (compressedSize == 0xffffffffu || size == 0xffffffffu || localAt == 0xffffffffu)
    return Error(ErrorCode::Unsupported) << where << " needs ZIP64";
  if (flags & 1)
    return Error(ErrorCode::Unsupported) << where << " is encrypted";
  if (size > maxMemberBytes)
    return Error(ErrorCode::InvalidArgument) << where << " inflates to " << size << " bytes, more than the limit "
                                             << maxMemberBytes;
  if (localAt + kLocalSize > archive.size() || le(archive, localAt, 4) != kLocalHeader)
    return Error(ErrorCode::ParseError) << where << ": no local header where the directory says";
  std::size_t dataAt = localAt + kLocalSize + le(archive, localAt + 26, 2) + le(archive, localAt + 28, 2);
  if (dataAt > archive.size() || compressedSize > archive.size() - dataAt)
    return Error(ErrorCode::ParseError) << where << " runs past the archive";
  std::string_view stored = archive.substr(dataAt, compressedSize);
  if (method == 0) {
    if (compressedSize != size)
      return Error(ErrorCode::ParseError) << where << ": stored sizes disagree";
    member.data = std::string(stored);
  } else if (method == 8) {
    CLEAVE_TRY(member.data, inflateRaw(stored, size, where));
  } else {
    return Error(ErrorCode::Unsupported) << where << " uses compression method " << method
                                         << " (stored and deflate are read)";
  }
  if (crcOf(member.data) != crc)
    return Error(ErrorCode::ParseError) << where << ": CRC-32 mismatch (corrupt archive)";
  return member;
}
} // namespace

Expected<std::vector<ZipMember>> readZip(std::string_view archive, const std::string& what,
                                         std::size_t maxMemberBytes, const ZipMemberFilter& wanted) {
  CLEAVE_TRY(std::size_t end, findEndRecord(archive, what));
  std::size_t count = le(archive, end + 10, 2), directoryAt = le(archive, end + 16, 4);
  if (count == 0xffff || directoryAt == 0xffffffffu)
    return Error(ErrorCode::Unsupported) << what << ": ZIP64 archives are not read";
  std::vector<ZipMember> members;
  std::size_t entry = directoryAt;
  for (std::size_t i = 0; i < count; ++i) {
    if (entry + kCentralSize > end || le(archive, entry, 4) != kCentralHeader)
      return Error(ErrorCode::ParseError) << what << ": central directory entry " << i << " is missing or corrupt";
    const std::size_t nameLength = le(archive, entry + 28, 2);
    if (entry + kCentralSize + nameLength > archive.size())
      return Error(ErrorCode::ParseError) << what << ": a central directory entry runs past the archive";
    if (!wanted || wanted(archive.substr(entry + kCentralSize, nameLength))) {
      CLEAVE_TRY(ZipMember member, readMember(archive, entry, what, maxMemberBytes));
      members.push_back(std::move(member));
    }
    entry += kCentralSize + le(archive, entry + 28, 2) + le(archive, entry + 30, 2) + le(archive, entry + 32, 2);
  }
  return members;
}

Expected<std::string> writeZip(const std::vector<ZipMember>& members) {
  if (members.size() >= 0xffff)
    return Error(ErrorCode::Unsupported) << "a zip archive of " << members.size() << " members needs ZIP64";
  std::string out, directory;
  for (const ZipMember& member : members) {
    if (member.data.size() >= 0xffffffffu || out.size() >= 0xffffffffu || member.name.size() > 0xffff)
      return Error(ErrorCode::Unsupported) << "zip member '" << member.name << "' needs ZIP64";
    std::uint32_t crc = crcOf(member.data), size = static_cast<std::uint32_t>(member.data.size());
    std::uint32_t localAt = static_cast<std::uint32_t>(out.size());
    auto common = [&](std::string& to) { // version needed .. name length, shared by both headers
      put(to, 20, 2);                    // version needed: 2.0
      put(to, 0, 2);                     // flags
      put(to, 0, 2);                     // method: stored
      put(to, 0, 2);                     // time
      put(to, (1 << 5) | 1, 2);          // date: 1980-01-01, so archives are byte-identical
      put(to, crc, 4);
      put(to, size, 4);
      put(to, size, 4);
      put(to, static_cast<std::uint32_t>(member.name.size()), 2);
    };
    put(out, kLocalHeader, 4);
    common(out);
    put(out, 0, 2); // extra length
    out += member.name;
    out += member.data;
    put(directory, kCentralHeader, 4);
    put(directory, 20, 2); // version made by
    common(directory);
    put(directory, 0, 2); // extra length
    put(directory, 0, 2); // comment length
    put(directory, 0, 2); // disk
    put(directory, 0, 2); // internal attributes
    put(directory, 0, 4); // external attributes
    put(directory, localAt, 4);
    directory += member.name;
  }
  if (out.size() + directory.size() >= 0xffffffffu)
    return Error(ErrorCode::Unsupported) << "the zip archive needs ZIP64";
  std::uint32_t directoryAt = static_cast<std::uint32_t>(out.size());
  out += directory;
  put(out, kEndOfDirectory, 4);
  put(out, 0, 2);
  put(out, 0, 2);
  put(out, static_cast<std::uint32_t>(members.size()), 2);
  put(out, static_cast<std::uint32_t>(members.size()), 2);
  put(out, static_cast<std::uint32_t>(directory.size()), 4);
  put(out, directoryAt, 4);
  put(out, 0, 2);
  return out;
}

} // namespace cleave::io
