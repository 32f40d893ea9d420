// Fuzzes support-profile JSON (support/profile.cpp); an accepted profile decides every node of a
// small transformer, which walks its rules (all_of / any_of, dtypes, ranks, attributes).
#include "fuzz/fuzz_target.h"
#include "gen/families.h"
#include "support/profile.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const cleave::ir::Graph graph = *cleave::gen::generateFamily("transformer", 1);
  cleave::Expected<cleave::support::Profile> profile = cleave::support::Profile::fromJson(fuzzText(data, size), "fuzz.json");
  if (profile)
    (void)cleave::support::decideAll(graph, *profile);
  return 0;
}
