// runtime/training/token_stream.h - token ids as language-model trainers keep them, read in
// place: a flat binary of uint16 or uint32 ids (nanoGPT's train.bin: no header, native
// little-endian), or a folder of 1-D integer .npy shards taken in file-name order as one stream.
//
// Guarantees: the files are memory-mapped, never read whole; opening touches only the .npy
// headers, and `read` touches only the pages of the ids it copies, so a stream of any size costs
// no anonymous memory beyond the caller's buffer (the mapped pages are the page cache's). The
// stream's id k is the k-th id of the file, or of the shards concatenated. A shard folder is read
// without following links (a link is refused), so no id comes from outside the folder given.
// An id read at or above `vocabulary` (when set) or below 0 is an InvalidArgument naming its
// position and value.
// Complexity: open O(shards) (O(1) for a file); read O(count + log shards).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/enum_table.h"
#include "base/expected.h"
#include "base/mapped_file.h"
#include "ir/types.h"

namespace cleave::runtime {

// How `--data` holds its tokens: a flat binary of uint16 or uint32 ids, or a folder of .npy shards.
enum class TokenFormat : std::uint8_t { Uint16, Uint32, NpyShards };
inline constexpr auto kTokenFormats = enumTable<TokenFormat>(
    {{TokenFormat::Uint16, "uint16"}, {TokenFormat::Uint32, "uint32"}, {TokenFormat::NpyShards, "npy"}});

class TokenStream {
public:
  // Fails: NotFound (no such file or folder), InvalidArgument (a size that is not a whole number of
  // ids, a shard that is not a 1-D integer array, a link in a shard folder, no shards), ParseError
  // (a damaged .npy header).
  static Expected<TokenStream> open(const std::string& path, TokenFormat format);

  std::int64_t size() const { return starts_.back(); }
  const std::string& path() const { return path_; }
  // "1048576 uint16 ids" or "3 .npy shards, 1048576 ids".
  std::string describe() const;

  // Ids [start, start + count) into `out` (count elements); `vocabulary` > 0 bounds them.
  // Fails: InvalidArgument (out of the stream, or an id out of [0, vocabulary)).
  Status read(std::int64_t start, std::int64_t count, std::int64_t* out, std::int64_t vocabulary) const;

private:
  struct Shard {
    std::shared_ptr<const MappedFile> file;
    const char* data = nullptr; // the ids' first byte
    ir::DType dtype = ir::DType::U16;
  };
  static Expected<Shard> openShard(const std::string& path, TokenFormat format, std::int64_t& ids);
  std::string path_;
  TokenFormat format_ = TokenFormat::Uint16;
  std::vector<Shard> shards_;
  std::vector<std::int64_t> starts_{0}; // shard s holds ids [starts_[s], starts_[s + 1])
};

} // namespace cleave::runtime
