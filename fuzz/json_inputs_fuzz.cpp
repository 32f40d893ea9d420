// Fuzzes the smaller JSON inputs, chosen by the first byte: pipeline split specs
// (pipeline/stages.cpp), JSON tensor files (io/tensor_file.cpp) and node latencies
// (partition/latency.cpp, against a small model).
#include "fuzz/fuzz_target.h"
#include "gen/families.h"
#include "io/tensor_file.h"
#include "partition/latency.h"
#include "pipeline/stages.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const cleave::ir::Graph graph = *cleave::gen::generateFamily("linear_chain", 3);
  if (size == 0)
    return 0;
  std::string_view text = fuzzText(data + 1, size - 1);
  switch (data[0] % 3) {
  case 0: (void)cleave::pipeline::parseSplitSpec(text, "fuzz.json"); break;
  case 1: (void)cleave::io::parseTensorFile(text, "fuzz.json"); break;
  default: (void)cleave::partition::parseLatencies(graph, text, "fuzz.json"); break;
  }
  return 0;
}
