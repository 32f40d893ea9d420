// Fuzzes the FX-graph JSON reader (io/fx_reader.cpp); accepted graphs are printed.
#include "fuzz/fuzz_target.h"
#include "io/fx.h"
#include "ir/printer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cleave::Expected<cleave::ir::Graph> graph = cleave::io::parseFxGraph(fuzzText(data, size), "fuzz.fx.json");
  if (graph) {
    (void)cleave::ir::printGraph(*graph);
  }
  return 0;
}
