// gen/families.h - synthetic model families for tests and benchmarks (`cleave gen`).
//
// chain, wide, linear_chain and diamonds rebuild the graphs of shared/bench/reference/graphs.py
// in ONNX form: same structure, sizes and dtypes, node names as torch.fx names them. transformer
// stacks pre-norm attention + MLP blocks. Every value is fully typed, weights are uniform random
// from a seeded generator, so the same call gives the same bytes.
// Complexity: O(N) nodes and O(N * width^2) parameter bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/expected.h"
#include "ir/graph.h"

namespace cleave::gen {

struct FamilyOptions {
  std::int64_t width = 0;   // 0: the family's default (graphs.py's defaults; 64 for transformer)
  std::int64_t heads = 4;   // transformer only
  std::int64_t sequence = 16; // transformer only
  std::int64_t batch = 0;   // 0: the family's default
  std::uint64_t seed = 0;
};

struct FamilyInfo {
  std::string_view name;
  std::string_view description; // what N counts
};
const std::vector<FamilyInfo>& listFamilies();

// Sizes a family may be asked for (a million-node chain is N = 200,000), so a typo cannot ask for
// hours of work; memory beyond the machine's is an allocation failure the CLI reports.
inline constexpr std::int64_t kMaxFamilyN = 5'000'000;
inline constexpr std::int64_t kMaxFamilySize = 65536; // width, heads, sequence, batch

// Fails: InvalidArgument for an unknown family, N outside [1, kMaxFamilyN] or bad sizes.
[[nodiscard]] Expected<ir::Graph> generateFamily(std::string_view family, std::int64_t n,
                                                 const FamilyOptions& options = {});

} // namespace cleave::gen
