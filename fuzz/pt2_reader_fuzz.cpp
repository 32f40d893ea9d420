// Fuzzes the torch.export .pt2 reader (io/pt2_reader.cpp: the zip archive, its versions and the
// program's JSON); accepted graphs are printed.
#include "fuzz/fuzz_target.h"
#include "io/pt2.h"
#include "ir/printer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cleave::Expected<cleave::ir::Graph> graph = cleave::io::parseExportedProgram(fuzzText(data, size), "fuzz.pt2");
  if (graph) {
    (void)cleave::ir::printGraph(*graph);
  }
  return 0;
}
