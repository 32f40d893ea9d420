// Fuzzes devices JSON (partition/devices.cpp) with inline profiles; accepted device sets are
// matched against a small model's nodes (computeDeviceSupport).
#include "fuzz/fuzz_target.h"
#include "gen/families.h"
#include "partition/devices.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const cleave::ir::Graph graph = *cleave::gen::generateFamily("linear_chain", 3);
  cleave::Expected<cleave::partition::DeviceSet> devices = cleave::partition::parseDevices(fuzzText(data, size), "fuzz.json");
  if (devices)
    (void)cleave::partition::computeDeviceSupport(graph, *devices);
  return 0;
}
