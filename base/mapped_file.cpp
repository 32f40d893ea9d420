#include "base/mapped_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file_io.h"

namespace cleave {

MappedFile::~MappedFile() { ::munmap(data_, size_); }

Expected<std::shared_ptr<const MappedFile>> MappedFile::open(const std::string& path) {
  CLEAVE_TRY(RegularFile file, RegularFile::open(path));
  if (file.size() == 0)
    return Error(ErrorCode::ParseError) << "'" << path << "' is empty";
  auto size = static_cast<std::size_t>(file.size());
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file.fd(), 0);
  if (data == MAP_FAILED)
    return Error(ErrorCode::IoError) << "cannot map '" << path << "': " << std::strerror(errno);
  return std::shared_ptr<const MappedFile>(new MappedFile(path, data, size, true));
}

Expected<std::shared_ptr<const MappedFile>> MappedFile::fromBytes(std::string name, std::string_view bytes) {
  if (bytes.empty())
    return Error(ErrorCode::ParseError) << name << ": empty";
  void* data = ::mmap(nullptr, bytes.size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED)
    return Error(ErrorCode::IoError) << name << ": cannot map " << bytes.size() << " bytes";
  std::memcpy(data, bytes.data(), bytes.size());
  return std::shared_ptr<const MappedFile>(new MappedFile(std::move(name), data, bytes.size(), false));
}

void MappedFile::releaseResidentPages() const { releaseResidentPages(0, size_); }

void MappedFile::releaseResidentPages(std::size_t offset, std::size_t length) const {
  if (!fromFile_ || offset >= size_)
    return;
  // A private, never written file mapping: dropped pages are read again from the file. The range
  // widens to whole pages (a neighbour's page dropped too is only read again).
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t begin = offset / page * page, end = std::min(size_, offset + std::min(length, size_ - offset));
  ::madvise(static_cast<char*>(data_) + begin, end - begin, MADV_DONTNEED);
}

} // namespace cleave
