#include "base/json_writer.h"

#include <gtest/gtest.h>

namespace cleave {
namespace {

// Writes `value` through the writer's primitives (never tree()), as a streaming producer would.
void writeByHand(JsonWriter& out, const Json& value) {
  switch (value.type()) {
  case Json::value_t::object:
    out.beginObject();
    for (const auto& [key, child] : value.items()) {
      out.key(key);
      writeByHand(out, child);
    }
    out.endObject();
    break;
  case Json::value_t::array:
    out.beginArray();
    for (const Json& child : value)
      writeByHand(out, child);
    out.endArray();
    break;
  case Json::value_t::string: out.string(value.get<std::string>()); break;
  case Json::value_t::boolean: out.boolean(value.get<bool>()); break;
  case Json::value_t::number_integer: out.integer(value.get<std::int64_t>()); break;
  case Json::value_t::number_unsigned: out.unsignedInteger(value.get<std::uint64_t>()); break;
  case Json::value_t::number_float: out.number(value.get<double>()); break;
  default: out.null(); break;
  }
}

Json sample() {
  Json doc;
  doc["schema"] = "cleave.plan";
  doc["version"] = 2;
  doc["empty_object"] = Json::object();
  doc["empty_array"] = Json::array();
  doc["numbers"] = {0, -1, std::int64_t{-9007199254740993}, std::uint64_t{18446744073709551615ull}, 0.1, 1.0, 1e300,
                    -2.5e-8, 419430400.0};
  doc["flags"] = {true, false, nullptr};
  doc["strings"] = {"plain", "quote \" and \\ backslash", "tab\tnew\nline\x01", "caf\xc3\xa9", "bad \xff byte", ""};
  Json nested = Json::array();
  nested.push_back({{"name", "_run_on_acc_0"}, {"nodes", {"a", "b"}}, {"inner", {{"deep", Json::array({Json::object()})}}}});
  nested.push_back(Json::object());
  doc["submodules"] = nested;
  return doc;
}

TEST(JsonWriter, WritesWhatDumpJsonWrites) {
  const Json doc = sample();
  JsonWriter out;
  writeByHand(out, doc);
  EXPECT_EQ(out.finish(), dumpJson(doc));
}

TEST(JsonWriter, EmbeddedTreesAreIndentedToTheirDepth) {
  const Json doc = sample();
  JsonWriter out;
  out.beginObject();
  for (const auto& [key, child] : doc.items())
    out.key(key).tree(child);
  out.endObject();
  EXPECT_EQ(out.finish(), dumpJson(doc));
}

TEST(JsonWriter, TopLevelScalarsAndEmptyContainers) {
  JsonWriter scalar;
  scalar.string("x");
  EXPECT_EQ(scalar.finish(), "\"x\"\n");
  JsonWriter empty;
  empty.beginArray();
  empty.endArray();
  EXPECT_EQ(empty.finish(), "[]\n");
}

} // namespace
} // namespace cleave
