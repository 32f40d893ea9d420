#include "runtime/training/token_stream.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "base/strings.h"
#include "io/npy.h"

namespace cleave::runtime {
namespace fs = std::filesystem;

namespace {

// Id k of `data` (a shard's ids of `dtype`), widened to int64. Unaligned reads through memcpy:
// a .npy header need not leave the data aligned.
template <typename T> std::int64_t idAt(const char* data, std::int64_t k) {
  T id;
  std::memcpy(&id, data + k * static_cast<std::int64_t>(sizeof(T)), sizeof(T));
  return static_cast<std::int64_t>(id);
}

// Copies ids [first, first + count) of one shard into `out`, widened.
void widen(const char* data, ir::DType dtype, std::int64_t first, std::int64_t count, std::int64_t* out) {
  switch (dtype) {
  case ir::DType::U8: for (std::int64_t k = 0; k < count; ++k) out[k] = idAt<std::uint8_t>(data, first + k); break;
  case ir::DType::U16: for (std::int64_t k = 0; k < count; ++k) out[k] = idAt<std::uint16_t>(data, first + k); break;
  case ir::DType::I16: for (std::int64_t k = 0; k < count; ++k) out[k] = idAt<std::int16_t>(data, first + k); break;
  case ir::DType::U32: for (std::int64_t k = 0; k < count; ++k) out[k] = idAt<std::uint32_t>(data, first + k); break;
  case ir::DType::I32: for (std::int64_t k = 0; k < count; ++k) out[k] = idAt<std::int32_t>(data, first + k); break;
  default: for (std::int64_t k = 0; k < count; ++k) out[k] = idAt<std::int64_t>(data, first + k); break; // I64
  }
}

bool isTokenType(ir::DType dtype) {
  return dtype == ir::DType::U8 || dtype == ir::DType::U16 || dtype == ir::DType::I16 || dtype == ir::DType::U32 ||
         dtype == ir::DType::I32 || dtype == ir::DType::I64;
}

// The .npy regular files of `folder` in name order; a link among them is refused.
Expected<std::vector<std::string>> shardFiles(const std::string& folder) {
  std::vector<std::string> files;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, error)) {
    if (!entry.path().filename().string().ends_with(".npy"))
      continue;
    if (entry.symlink_status().type() != fs::file_type::regular)
      return Error(ErrorCode::InvalidArgument) << entry.path().string()
                                               << ": not a regular file (links are not followed)";
    files.push_back(entry.path().string());
  }
  if (error)
    return Error(ErrorCode::NotFound) << folder << ": " << error.message();
  if (files.empty())
    return Error(ErrorCode::InvalidArgument) << folder << ": no .npy token shards";
  std::sort(files.begin(), files.end());
  return files;
}

} // namespace

Expected<TokenStream::Shard> TokenStream::openShard(const std::string& path, TokenFormat format, std::int64_t& ids) {
  CLEAVE_TRY(std::shared_ptr<const MappedFile> file, MappedFile::open(path));
  Shard shard{file, file->bytes().data(), format == TokenFormat::Uint32 ? ir::DType::U32 : ir::DType::U16};
  if (format != TokenFormat::NpyShards) {
    const std::size_t width = static_cast<std::size_t>(ir::dtypeSize(shard.dtype));
    if (file->bytes().size() % width != 0)
      return Error(ErrorCode::InvalidArgument) << path << ": " << file->bytes().size() << " bytes is not a whole number of "
                                               << kTokenFormats.name(format) << " ids";
    ids = static_cast<std::int64_t>(file->bytes().size() / width);
    return shard;
  }
  CLEAVE_TRY(io::NpyArray array, io::parseNpy(file->bytes(), path));
  if (array.dims.size() != 1 || !isTokenType(array.dtype))
    return Error(ErrorCode::InvalidArgument) << path << ": a token shard is a 1-D array of integer ids; this one is "
                                             << ir::dtypeName(array.dtype) << " of " << array.dims.size() << " dims";
  shard.data = array.data.data();
  shard.dtype = array.dtype;
  ids = array.dims[0];
  return shard;
}

Expected<TokenStream> TokenStream::open(const std::string& path, TokenFormat format) {
  TokenStream stream;
  stream.path_ = path;
  stream.format_ = format;
  std::vector<std::string> files{path};
  if (format == TokenFormat::NpyShards) {
    CLEAVE_TRY(files, shardFiles(path));
  }
  for (const std::string& file : files) {
    std::int64_t ids = 0;
    CLEAVE_TRY(Shard shard, openShard(file, format, ids));
    stream.shards_.push_back(std::move(shard));
    stream.starts_.push_back(stream.starts_.back() + ids);
  }
  return stream;
}

std::string TokenStream::describe() const {
  if (format_ != TokenFormat::NpyShards)
    return std::to_string(size()) + " " + std::string(kTokenFormats.name(format_)) + " ids";
  return std::to_string(shards_.size()) + " .npy shard(s), " + std::to_string(size()) + " ids";
}

Status TokenStream::read(std::int64_t start, std::int64_t count, std::int64_t* out, std::int64_t vocabulary) const {
  if (start < 0 || count < 0 || start + count > size())
    return Error(ErrorCode::InvalidArgument) << path_ << ": ids [" << start << ", " << start + count
                                             << ") are outside its " << size() << " ids";
  std::size_t s = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), start) - starts_.begin()) - 1;
  for (std::int64_t done = 0; done < count; ++s) {
    const std::int64_t first = start + done - starts_[s], take = std::min(count - done, starts_[s + 1] - start - done);
    widen(shards_[s].data, shards_[s].dtype, first, take, out + done);
    done += take;
  }
  for (std::int64_t k = 0; k < count; ++k)
    if (out[k] < 0 || (vocabulary > 0 && out[k] >= vocabulary))
      return Error(ErrorCode::InvalidArgument) << path_ << ": token " << out[k] << " at id " << start + k
                                               << (out[k] < 0 ? " is negative" : " is at or above the model's vocabulary of ")
                                               << (out[k] < 0 ? std::string() : std::to_string(vocabulary));
  return {};
}

} // namespace cleave::runtime
