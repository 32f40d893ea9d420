// base/mapped_file.h - a read-only memory mapping of a whole file.
// Pages are read from disk only when touched, so a reader can skip large regions (ONNX weights)
// for free and come back to them later through the same mapping.
// Complexity: O(1) to map (one mmap); a page costs a disk read only when first touched.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "base/expected.h"

namespace cleave {

class MappedFile {
public:
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view bytes() const { return {static_cast<const char*>(data_), size_}; }
  const std::string& path() const { return path_; }
  // Lets the pages touched so far leave this process's resident memory, for a reader that has
  // copied out what it needs (the executor, its parameters): a file's pages come back from the
  // file if touched again, so the bytes stay the same; an in-memory copy (fromBytes) is kept as
  // it is. O(pages).
  void releaseResidentPages() const;
  // The same for the pages of bytes [offset, offset + length) (widened to whole pages): a reader
  // copying out one region after another keeps one region resident at a time, not the file.
  void releaseResidentPages(std::size_t offset, std::size_t length) const;

  // Fails: NotFound (cannot open), InvalidArgument (not a regular file), ParseError (empty file),
  // IoError (mmap failed).
  static Expected<std::shared_ptr<const MappedFile>> open(const std::string& path);
  // An anonymous mapping holding a copy of `bytes` (a model built in memory, such as a subgraph
  // body); `name` stands in for the path in messages. Fails: IoError (mmap failed), ParseError
  // (empty).
  static Expected<std::shared_ptr<const MappedFile>> fromBytes(std::string name, std::string_view bytes);

private:
  MappedFile(std::string path, void* data, std::size_t size, bool fromFile)
      : path_(std::move(path)), data_(data), size_(size), fromFile_(fromFile) {}
  std::string path_;
  void* data_;
  std::size_t size_;
  bool fromFile_; // a file's pages (releasable), not an anonymous copy
};

} // namespace cleave
