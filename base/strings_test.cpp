#include "base/strings.h"

#include <gtest/gtest.h>

namespace cleave {
namespace {

TEST(StringTable, InternReturnsTheSameIdForEqualText) {
  StringTable table;
  std::uint32_t a = table.intern("relu");
  std::uint32_t b = table.intern("conv");
  EXPECT_NE(a, b);
  EXPECT_EQ(table.intern("relu"), a);
  EXPECT_EQ(table.str(a), "relu");
  EXPECT_EQ(table.intern(""), 0u);
}

TEST(StringTable, FindDoesNotInsert) {
  StringTable table;
  table.intern("x");
  EXPECT_EQ(table.find("y"), UINT32_MAX);
  EXPECT_EQ(table.size(), 2u); // "" and "x"
}

TEST(StringTable, ViewsStayValidAcrossGrowth) {
  StringTable table;
  std::uint32_t first = table.intern("a-name-longer-than-the-small-string-buffer");
  std::string_view view = table.str(first);
  for (int i = 0; i < 200000; ++i)
    table.intern("value_" + std::to_string(i));
  EXPECT_EQ(view, "a-name-longer-than-the-small-string-buffer");
  for (int i = 0; i < 200000; i += 9973)
    EXPECT_EQ(table.str(table.find("value_" + std::to_string(i))), "value_" + std::to_string(i));
}

// A small table's characters take a few KiB, not a large fixed chunk (a cut model holds one
// table per submodel); a name longer than any chunk gets one of its own; views stay valid.
TEST(StringTable, ArenaGrowsWithItsStrings) {
  StringTable small;
  for (int i = 0; i < 100; ++i)
    small.intern("node_" + std::to_string(i));
  EXPECT_LE(small.arenaBytes(), 4096u);
  StringTable large;
  const std::string huge(3 << 20, 'x');
  std::uint32_t first = large.intern("first");
  std::size_t names = 0;
  for (int i = 0; i < 100000; ++i)
    names += large.str(large.intern("value_" + std::to_string(i))).size();
  std::uint32_t hugeId = large.intern(huge);
  EXPECT_EQ(large.str(hugeId), huge);
  EXPECT_EQ(large.str(first), "first");
  EXPECT_GE(large.arenaBytes(), names + huge.size());
  EXPECT_LE(large.arenaBytes(), 2 * names + huge.size() + (1u << 20));
}

TEST(StringTable, DistinguishesPrefixesAndEmbeddedZeros) {
  StringTable table;
  std::uint32_t a = table.intern(std::string_view("ab\0c", 4));
  std::uint32_t b = table.intern("ab");
  EXPECT_NE(a, b);
  EXPECT_EQ(table.find(std::string_view("ab\0c", 4)), a);
}

TEST(FormatBytes, UsesBinaryUnits) {
  EXPECT_EQ(formatBytes(0), "0 B");
  EXPECT_EQ(formatBytes(1023), "1023 B");
  EXPECT_EQ(formatBytes(1536), "1.5 KiB");
  EXPECT_EQ(formatBytes(3 * 1024 * 1024), "3.0 MiB");
  EXPECT_EQ(formatBytes(-1), "?");
}

TEST(FormatSi, UsesSiPrefixesWithThreeDigits) {
  EXPECT_EQ(formatSi(12, "FLOPs"), "12 FLOPs");
  EXPECT_EQ(formatSi(604169, "FLOPs"), "604 kFLOPs");
  EXPECT_EQ(formatSi(1137680, "FLOPs"), "1.14 MFLOPs");
  EXPECT_EQ(formatSi(169896000, "FLOPs"), "170 MFLOPs");
  EXPECT_EQ(formatSi(999.7, "QPS"), "1.00 kQPS");
  EXPECT_EQ(formatSi(12.5, "QPS"), "12.5 QPS");
  EXPECT_EQ(formatSi(-2500, "B/s"), "-2.50 kB/s");
}

TEST(JoinStrings, SeparatesParts) {
  EXPECT_EQ(joinStrings({}), "");
  EXPECT_EQ(joinStrings({"a", "b", "c"}), "a, b, c");
  EXPECT_EQ(joinStrings({"a", "b"}, " -> "), "a -> b");
}

TEST(SplitString, KeepsEmptyFields) {
  auto parts = splitString("/a//b", '/');
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[0], "");
  EXPECT_EQ(parts[2], "");
  EXPECT_EQ(parts[3], "b");
}

TEST(MatchGlob, StarsAndQuestionMarks) {
  EXPECT_TRUE(matchGlob("layer1.*", "layer1.0.conv1"));
  EXPECT_TRUE(matchGlob("*conv?", "layer1.0.conv1"));
  EXPECT_FALSE(matchGlob("layer2.*", "layer1.0.conv1"));
  EXPECT_TRUE(matchGlob("*", ""));
  EXPECT_FALSE(matchGlob("?", ""));
  EXPECT_TRUE(matchGlob("a*b*c", "aXXbYYc"));
  EXPECT_FALSE(matchGlob("a*b*c", "aXXbYY"));
}

TEST(FirstLine, StopsAtTheFirstNewline) {
  EXPECT_EQ(firstLine("shape mismatch\nException raised from ..."), "shape mismatch");
  EXPECT_EQ(firstLine("one line"), "one line");
  EXPECT_EQ(firstLine("\nafter"), "");
}

} // namespace
} // namespace cleave
