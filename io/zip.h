// io/zip.h - the ZIP archives NumPy's .npz files are: read (stored or deflated members, as
// np.savez and np.savez_compressed write them) and write (stored members).
//
// Guarantees of readZip: members come from the central directory; every offset and size is
// checked against the archive before it is read; a deflated member inflates to exactly its
// declared size and both kinds must match their CRC-32; ZIP64, encryption and other compression
// methods are refused (Unsupported); anything malformed is a ParseError naming `what`. Members
// keep the archive's order. writeZip's output reads back with readZip and with Python's zipfile.
// Complexity: linear in the archive's size (inflating: in the members' sizes).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/expected.h"

namespace cleave::io {

struct ZipMember {
  std::string name;
  std::string data;
};

// Which members to read, by name (a .pt2 archive's JSON, not its weights); null: every one.
using ZipMemberFilter = std::function<bool(std::string_view name)>;

// `maxMemberBytes` bounds each inflated member (a small archive may claim a huge one); members
// `wanted` refuses are neither read nor checked (their directory entries are).
Expected<std::vector<ZipMember>> readZip(std::string_view archive, const std::string& what,
                                         std::size_t maxMemberBytes, const ZipMemberFilter& wanted = nullptr);
// Fails: Unsupported when a member or the archive needs ZIP64 (4 GiB or 65535 members).
Expected<std::string> writeZip(const std::vector<ZipMember>& members);

} // namespace cleave::io
