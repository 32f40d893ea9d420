#include "support/profile.h"

#include <gtest/gtest.h>

#include "testing/test_graphs.h"

namespace cleave::support {
namespace {
using cleave::testing::TestGraph;

Profile parse(const std::string& text) {
  Expected<Profile> profile = Profile::fromJson(text, "p.json");
  EXPECT_TRUE(profile) << (profile ? "" : profile.error().message());
  return profile ? std::move(*profile) : Profile();
}

ir::Graph mixedGraph() {
  ir::NodeSpec cast;
  cast.opType = "Cast";
  cast.name = "cast";
  cast.inputs = {"x"};
  cast.outputs = {{"h", ir::ValueType::tensor(ir::DType::F16, {4, 4})}};
  cast.scope = "head.proj";
  return TestGraph().input("x").node(cast).op("Relu", "relu", {"h"}).op("MatMul", "mm", {"relu", "x"})
      .output({"mm"}).build();
}

TEST(Profile, AListOfOpNamesAcceptsAnyDtype) {
  Profile profile = parse(R"({"ops": ["Relu", "MatMul"]})");
  ir::Graph g = mixedGraph();
  EXPECT_TRUE(profile.decide(g, g.findNode("relu")).supported);
  Decision cast = profile.decide(g, g.findNode("cast"));
  EXPECT_FALSE(cast.supported);
  EXPECT_EQ(cast.reason, Reason::UnsupportedOp);
  EXPECT_NE(cast.detail.find("Cast"), std::string::npos);
  EXPECT_EQ(profile.decide(g, g.findNode("x")).reason, Reason::NotCallable);
}

TEST(Profile, PositionalDtypesFollowOperatorSupport) {
  Profile profile = parse(R"({"ops": {"MatMul": {"inputs": [["f32"], ["f16"]]}, "Relu": {"inputs": [null]}}})");
  ir::Graph g = mixedGraph();
  Decision mm = profile.decide(g, g.findNode("mm"));
  EXPECT_FALSE(mm.supported);
  EXPECT_EQ(mm.reason, Reason::UnsupportedDtype);
  EXPECT_NE(mm.detail.find("input 1 (%x) is f32, allowed: f16"), std::string::npos);
  EXPECT_TRUE(profile.decide(g, g.findNode("relu")).supported);
}

TEST(Profile, DenyAndForceListsWinOverOps) {
  Profile profile = parse(R"({"ops": ["Cast", "Relu", "MatMul"], "deny": ["mm"], "force_cpu": ["head.*"]})");
  ir::Graph g = mixedGraph();
  EXPECT_EQ(profile.decide(g, g.findNode("mm")).reason, Reason::Denied);
  EXPECT_EQ(profile.decide(g, g.findNode("cast")).reason, Reason::Forced);
  EXPECT_TRUE(profile.decide(g, g.findNode("relu")).supported);
}

TEST(Profile, CombinatorsComposeProfiles) {
  Profile anyOf = parse(R"({"any_of": [{"ops": ["Relu"]}, {"ops": ["MatMul"]}]})");
  Profile allOf = parse(R"({"all_of": [{"ops": ["Relu", "MatMul"]}, {"ops": ["MatMul"]}]})");
  ir::Graph g = mixedGraph();
  EXPECT_TRUE(anyOf.decide(g, g.findNode("relu")).supported);
  EXPECT_TRUE(anyOf.decide(g, g.findNode("mm")).supported);
  EXPECT_FALSE(anyOf.decide(g, g.findNode("cast")).supported);
  EXPECT_FALSE(allOf.decide(g, g.findNode("relu")).supported);
  EXPECT_TRUE(allOf.decide(g, g.findNode("mm")).supported);
}

TEST(Profile, RankAndAttributePredicates) {
  ir::NodeSpec conv;
  conv.opType = "Conv";
  conv.name = "conv";
  conv.inputs = {"x"};
  conv.outputs = {{"y", ir::ValueType::tensor(ir::DType::F32, {4, 4})}};
  ir::Attribute group;
  group.name = "group";
  group.intValue = 2;
  conv.attributes = {group};
  ir::Graph g = TestGraph().input("x", {1, 2, 3, 4, 5}).node(conv).output({"y"}).build();
  EXPECT_EQ(parse(R"({"ops": {"Conv": {"max_rank": 4}}})").decide(g, g.findNode("conv")).reason,
            Reason::UnsupportedRank);
  EXPECT_EQ(parse(R"({"ops": {"Conv": {"attrs": {"group": [1]}}}})").decide(g, g.findNode("conv")).reason,
            Reason::UnsupportedAttribute);
  EXPECT_TRUE(parse(R"({"ops": {"Conv": {"attrs": {"group": [1, 2]}}}})").decide(g, g.findNode("conv")).supported);
  Decision big = parse(R"({"ops": {"Conv": {"max_elements": 100}}})").decide(g, g.findNode("conv"));
  EXPECT_EQ(big.reason, Reason::UnsupportedShape);
  EXPECT_NE(big.detail.find("120 elements, max 100"), std::string::npos);
  EXPECT_TRUE(parse(R"({"ops": {"Conv": {"max_elements": 120, "static_shapes": true}}})").decide(g, g.findNode("conv")).supported);
}

TEST(Profile, StaticShapePredicateRejectsSymbolicDims) {
  ir::GraphBuilder builder;
  ir::ValueType dynamic = ir::ValueType::tensor(ir::DType::F32, {4});
  dynamic.shape.dims[0] = ir::Dim{-1, "batch"};
  builder.addInput("x", dynamic);
  ir::NodeSpec relu;
  relu.name = "relu";
  relu.opType = "Relu";
  relu.inputs = {"x"};
  relu.outputs = {{"y", dynamic}};
  builder.addNode(relu);
  builder.setOutputs({"y"});
  Expected<ir::Graph> g = std::move(builder).finish();
  ASSERT_TRUE(g);
  Decision decision = parse(R"({"ops": {"Relu": {"static_shapes": true}}})").decide(*g, g->findNode("relu"));
  EXPECT_EQ(decision.reason, Reason::UnsupportedShape);
  EXPECT_NE(decision.detail.find("[batch]"), std::string::npos);
}

TEST(Profile, CustomPredicatesAnswerFirst) {
  Profile profile = parse(R"({"ops": ["Relu", "MatMul", "Cast"]})");
  profile.addCustomPredicate("no-matmul", [](const ir::Graph& graph, ir::NodeId node) -> std::optional<Decision> {
    if (graph.opType(node) == "MatMul")
      return Decision{false, Reason::UnsupportedOp, ""};
    return std::nullopt;
  });
  ir::Graph g = mixedGraph();
  Decision mm = profile.decide(g, g.findNode("mm"));
  EXPECT_FALSE(mm.supported);
  EXPECT_EQ(mm.reason, Reason::Custom);
  EXPECT_NE(mm.detail.find("no-matmul"), std::string::npos);
  EXPECT_TRUE(profile.decide(g, g.findNode("relu")).supported);
}

TEST(Profile, MalformedProfilesNameTheLocation) {
  auto error = [](const std::string& text) {
    Expected<Profile> profile = Profile::fromJson(text, "p.json");
    EXPECT_FALSE(profile);
    return profile ? std::string() : profile.error().message();
  };
  EXPECT_NE(error(R"({"ops": {"Conv": {"inputs": [["f33"]]}}})").find("p.json: ops.Conv.inputs[0][0]: unknown dtype"),
            std::string::npos);
  EXPECT_NE(error(R"({"ops": [1]})").find("ops[0]: expected an op name"), std::string::npos);
  EXPECT_NE(error(R"({"opz": []})").find("opz: unknown key"), std::string::npos);
  EXPECT_NE(error(R"({"deny": ["x"]})").find("lists no ops"), std::string::npos);
  EXPECT_NE(error("{\"ops\": [\n\"Relu\",\n").find("invalid JSON"), std::string::npos);
  EXPECT_NE(error(R"({"ops": {"Conv": {"max_rank": -1}}})").find("ops.Conv.max_rank"), std::string::npos);
}

} // namespace
} // namespace cleave::support
