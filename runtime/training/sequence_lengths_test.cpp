#include "runtime/training/sequence_lengths.h"

#include <gtest/gtest.h>

#include <set>

namespace cleave::runtime {
namespace {

TEST(SequenceLengths, AListIsTakenInTurnOneLengthPerGroupOfRows) {
  Expected<SequenceLengths> lengths = SequenceLengths::parse("64,128,96", 0);
  ASSERT_TRUE(lengths);
  lengths->groupRows(4); // a step's batch of 4 rows
  std::vector<std::int64_t> got;
  for (std::int64_t row = 0; row < 16; ++row)
    got.push_back(lengths->lengthOf(row));
  EXPECT_EQ(got, (std::vector<std::int64_t>{64, 64, 64, 64, 128, 128, 128, 128, 96, 96, 96, 96, 64, 64, 64, 64}));
  EXPECT_EQ(lengths->longest(), 128);
  EXPECT_DOUBLE_EQ(lengths->meanLength(), 96.0);
  EXPECT_EQ(lengths->describe(), "lengths 64, 128, 96 in turn, one per 4 row(s)");
}

TEST(SequenceLengths, ABucketingRuleDrawsItsLengthsFromTheSeedAlone) {
  Expected<SequenceLengths> first = SequenceLengths::parse("32-128/32", 7), again = SequenceLengths::parse("32-128/32", 7),
                            other = SequenceLengths::parse("32-128/32", 8);
  ASSERT_TRUE(first && again && other);
  std::set<std::int64_t> seen;
  bool differs = false;
  for (std::int64_t row = 0; row < 64; ++row) {
    EXPECT_EQ(first->lengthOf(row), again->lengthOf(row));
    differs |= first->lengthOf(row) != other->lengthOf(row);
    seen.insert(first->lengthOf(row));
  }
  EXPECT_TRUE(differs);
  EXPECT_EQ(seen, (std::set<std::int64_t>{32, 64, 96, 128}));
  EXPECT_EQ(first->longest(), 128);
}

TEST(SequenceLengths, MalformedRulesFailNamingTheSpec) {
  for (const char* spec : {"", "0,8", "8,,16", "16-8/4", "8-16/3", "a-b", "8-16/0", "-8"}) {
    Expected<SequenceLengths> parsed = SequenceLengths::parse(spec, 0);
    ASSERT_FALSE(parsed) << spec;
    EXPECT_NE(parsed.error().message().find("--seq-lens"), std::string::npos);
  }
}

} // namespace
} // namespace cleave::runtime
