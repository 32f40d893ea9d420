// Fuzzes the ONNX reader (io/onnx_reader.cpp): protobuf wire scanning, types, initializers,
// attributes, shape inference; accepted graphs are printed (every value and attribute visited).
#include "fuzz/fuzz_target.h"
#include "io/onnx.h"
#include "ir/printer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cleave::Expected<cleave::ir::Graph> graph = cleave::io::readOnnxBytes(fuzzText(data, size), "fuzz.onnx");
  if (graph) {
    (void)cleave::ir::printGraph(*graph);
  }
  return 0;
}
