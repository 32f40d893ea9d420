// Fuzzes the torch.export .pt2 reader (io/pt2_reader.cpp): a zip archive (its members, versions
// and program), or, for any other input, the program's JSON alone, which mutations of an archive
// rarely reach past its CRC checks. Accepted graphs are printed.
#include "fuzz/fuzz_target.h"
#include "io/pt2.h"
#include "ir/printer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes = fuzzText(data, size);
  cleave::Expected<cleave::ir::Graph> graph = bytes.starts_with("PK")
                                                  ? cleave::io::parseExportedProgram(bytes, "fuzz.pt2")
                                                  : cleave::io::parseExportedProgramJson(bytes, "fuzz.json");
  if (graph) {
    (void)cleave::ir::printGraph(*graph);
  }
  return 0;
}
