#include "runtime/distributed/message_name.h"

#include <gtest/gtest.h>

#include <set>

namespace cleave::runtime {
namespace {

TEST(MessageName, DistinctNamesGetDistinctTagsAndKeys) {
  const MessageSpace space{5, 3};
  std::set<std::uint32_t> tags;
  std::set<std::uint64_t> keys;
  std::size_t names = 0;
  for (std::uint64_t m = 0; m < 4; ++m)
    for (std::uint64_t value = 0; value < space.values; ++value)
      for (std::uint64_t reader = 0; reader < space.readers; ++reader)
        for (bool backward : {false, true}) {
          Expected<std::uint32_t> tag = messageTag(space, {m, value, reader, backward});
          ASSERT_TRUE(tag);
          tags.insert(*tag);
          // Keys name rows instead of microbatches: microbatch m has m + 1 rows here.
          const std::uint64_t key = messageShapeKey(space, {m, value, reader, backward}, static_cast<std::int64_t>(m + 1));
          EXPECT_NE(key, 0u);
          keys.insert(key);
          ++names;
        }
  EXPECT_EQ(tags.size(), names);
  EXPECT_EQ(keys.size(), names);
  // Two microbatches of the same rows share a key (their shapes are the same), not a tag.
  EXPECT_EQ(messageShapeKey(space, {0, 1, 2, true}, 8), messageShapeKey(space, {3, 1, 2, true}, 8));
}

TEST(MessageName, NamesPastTheTagsFailAndPastTheKeysHaveNone) {
  const MessageSpace space{1000, 10};
  EXPECT_TRUE(messageTag(space, {26843, 0, 0, false}));           // 26843 * 1000 * 10 * 2 < 2^29
  Expected<std::uint32_t> past = messageTag(space, {26844, 0, 0, false});
  ASSERT_FALSE(past);
  EXPECT_NE(past.error().message().find("message tags"), std::string::npos);
  EXPECT_FALSE(messageTag(space, {UINT64_MAX / 4, 0, 0, false})); // its position overflows
  EXPECT_EQ(messageShapeKey(space, {0, 0, 0, false}, INT64_MAX), 0u);
}

} // namespace
} // namespace cleave::runtime
