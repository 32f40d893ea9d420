// Fuzzes NumPy tensor files, chosen by the first byte: .npy headers (io/npy.cpp) and .npz zip
// archives (io/zip.cpp, each member then read as .npy), as `cleave run --inputs` reads them.
#include "fuzz/fuzz_target.h"
#include "io/npy.h"
#include "io/zip.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0)
    return 0;
  std::string_view bytes = fuzzText(data + 1, size - 1);
  if (data[0] % 2 == 0) {
    (void)cleave::io::parseNpy(bytes, "fuzz.npy");
    return 0;
  }
  auto members = cleave::io::readZip(bytes, "fuzz.npz", std::size_t(1) << 24);
  if (members)
    for (const cleave::io::ZipMember& member : *members)
      (void)cleave::io::parseNpy(member.data, member.name);
  return 0;
}
