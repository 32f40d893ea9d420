// runtime/training/sequence_lengths.h - token rows whose length changes from step to step or from
// microbatch to microbatch (--seq-lens), as packed or bucketed batches change it.
//
// A rule is a list of lengths taken in turn ("64,128,96") or a bucketing rule "MIN-MAX/STEP" that
// draws one of MIN, MIN + STEP, ..., MAX for each group of rows from (seed, group) alone. Rows are
// numbered across the run as training_data.h numbers them and grouped `rowsPerLength` at a time (a
// step's batch, or one microbatch's rows): every row of a group has the group's length, so each
// microbatch is one rectangle, and a row's length depends on its number, the rule and the seed
// alone (every rank, a resumed run and a torch reference given the rows agree).
// Guarantees: deterministic; lengths lie in [1, longest()].
// Complexity: lengthOf O(1).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/enum_table.h"
#include "base/expected.h"

namespace cleave::runtime {

// Which rows share a length: every step's batch, or every microbatch.
enum class LengthChange : std::uint8_t { Step, Microbatch };
inline constexpr auto kLengthChanges =
    enumTable<LengthChange>({{LengthChange::Step, "step"}, {LengthChange::Microbatch, "microbatch"}});

class SequenceLengths {
public:
  // Fails: Usage-style InvalidArgument naming the spec (not a list of positive lengths nor
  // MIN-MAX/STEP with 0 < MIN <= MAX and STEP dividing MAX - MIN).
  static Expected<SequenceLengths> parse(std::string_view spec, std::uint64_t seed);
  // Groups of `rows` rows share a length (>= 1).
  void groupRows(std::int64_t rows) { rowsPerLength_ = rows < 1 ? 1 : rows; }
  std::int64_t rowsPerLength() const { return rowsPerLength_; }

  std::int64_t lengthOf(std::int64_t row) const;
  std::int64_t longest() const;
  double meanLength() const; // over the choices: tokens per row on average
  // "lengths 64, 128, 96 in turn" / "lengths 32 to 128 by 32, drawn (seed 0)", per `rowsPerLength` rows.
  std::string describe() const;

private:
  std::vector<std::int64_t> choices_;
  bool drawn_ = false;
  std::uint64_t seed_ = 0;
  std::int64_t rowsPerLength_ = 1;
};

} // namespace cleave::runtime
