#include "simplify/shape_folding.h"

#include <gtest/gtest.h>

#include <cstring>

#include "ir/builder.h"

namespace cleave::simplify {
namespace {
using ir::DType;

ir::ValueType tensorType(DType dtype, std::vector<std::int64_t> dims) { return ir::ValueType::tensor(dtype, dims); }

ir::Attribute intAttribute(std::string name, std::int64_t value) {
  ir::Attribute attribute;
  attribute.name = std::move(name);
  attribute.kind = ir::AttrKind::Int;
  attribute.intValue = value;
  return attribute;
}

// x.view(x.size(0), x.size(1), -1) as the TorchScript exporter writes it, then a Relu; `batch`
// names x's first dim when it is symbolic.
class ViewGraph {
public:
  explicit ViewGraph(std::string batch = "") {
    builder_.modelInfo().opsetImports = {{"", 13}};
    ir::ValueType x = tensorType(DType::F32, {2, 3, 8});
    if (!batch.empty())
      x.shape.dims[0] = ir::Dim{-1, batch};
    builder_.addInput("x", x);
    int64("zero", {}, {0});
    int64("one", {}, {1});
    int64("axes", {1}, {0});
    int64("rest", {1}, {-1});
    op("Shape", {"x"}, "s", DType::I64, {3});
    op("Gather", {"s", "zero"}, "b", DType::I64, {});
    op("Gather", {"s", "one"}, "t", DType::I64, {});
    op("Unsqueeze", {"b", "axes"}, "bu", DType::I64, {1});
    op("Unsqueeze", {"t", "axes"}, "tu", DType::I64, {1});
    ir::NodeSpec concat = spec("Concat", {"bu", "tu", "rest"}, "shape", DType::I64, {3});
    concat.attributes.push_back(intAttribute("axis", 0));
    builder_.addNode(concat);
    op("Reshape", {"x", "shape"}, "y", DType::F32, {2, 3, 8});
    op("Relu", {"y"}, "out", DType::F32, {2, 3, 8});
    builder_.setOutputs({"out"});
  }
  ir::Graph build() { return std::move(*std::move(builder_).finish()); }

private:
  static ir::NodeSpec spec(std::string type, std::vector<std::string> inputs, std::string out, DType dtype,
                           std::vector<std::int64_t> dims) {
    ir::NodeSpec node;
    node.opType = std::move(type);
    node.name = out;
    node.inputs = std::move(inputs);
    node.outputs.push_back({out, tensorType(dtype, std::move(dims))});
    return node;
  }
  void op(std::string type, std::vector<std::string> inputs, std::string out, DType dtype, std::vector<std::int64_t> dims) {
    builder_.addNode(spec(std::move(type), std::move(inputs), std::move(out), dtype, std::move(dims)));
  }
  void int64(std::string name, std::vector<std::int64_t> dims, std::vector<std::int64_t> values) {
    ir::Parameter p;
    p.name = name;
    p.dtype = DType::I64;
    p.dims = dims;
    p.bytes = static_cast<std::int64_t>(values.size() * 8);
    std::string bytes(values.size() * 8, '\0');
    std::memcpy(bytes.data(), values.data(), bytes.size());
    p.data = builder_.appendInlineData(bytes);
    builder_.addParameter(std::move(p), tensorType(DType::I64, std::move(dims)));
  }
  ir::GraphBuilder builder_{ir::SourceFormat::Onnx};
};

TEST(ShapeFolding, AStaticViewFoldsToOneConstantShape) {
  ir::Graph graph = ViewGraph().build();
  FoldPlan plan = planShapeFolding(graph);
  EXPECT_EQ(plan.folded, 6u); // Shape, two Gathers, two Unsqueezes, Concat
  EXPECT_EQ(plan.removed, 6u);
  EXPECT_EQ(plan.foldedByOp.at("Gather"), 2u);
  ASSERT_EQ(plan.kept.size(), 2u);
  EXPECT_EQ(graph.opType(plan.kept[0]), "Reshape");
  EXPECT_EQ(graph.opType(plan.kept[1]), "Relu");
  ASSERT_EQ(plan.constants.size(), 1u);
  EXPECT_EQ(graph.valueName(plan.constants[0].first), "shape");
  EXPECT_EQ(plan.constants[0].second.ints, (std::vector<std::int64_t>{2, 3, -1}));
  EXPECT_EQ(plan.constants[0].second.dims, (std::vector<std::int64_t>{3}));

  Expected<ir::Graph> folded = applyFoldPlan(graph, plan);
  ASSERT_TRUE(folded) << folded.error().message();
  std::size_t ops = 0;
  for (std::uint32_t n = 0; n < folded->numNodes(); ++n)
    ops += folded->kind(ir::NodeId{n}) == ir::NodeKind::Op;
  EXPECT_EQ(ops, 2u);
  ir::ValueId shape = folded->findValue("shape");
  ASSERT_NE(shape, ir::kNoValue);
  ir::NodeId producer = folded->producer(shape);
  ASSERT_EQ(folded->kind(producer), ir::NodeKind::Parameter);
  Expected<std::string> bytes = folded->readParameterData(folded->parameters(producer)[0]);
  ASSERT_TRUE(bytes);
  std::vector<std::int64_t> values(3);
  ASSERT_EQ(bytes->size(), 24u);
  std::memcpy(values.data(), bytes->data(), 24);
  EXPECT_EQ(values, (std::vector<std::int64_t>{2, 3, -1}));
  // The interface is unchanged, and folding again changes nothing.
  EXPECT_EQ(folded->valueName(folded->graphOutputs()[0]), "out");
  EXPECT_FALSE(planShapeFolding(*folded).changes());
}

TEST(ShapeFolding, ASymbolicBatchKeepsTheChainThatReadsIt) {
  ir::Graph graph = ViewGraph("batch").build();
  FoldPlan plan = planShapeFolding(graph);
  // Shape(x) is not static, so nothing downstream of it folds.
  EXPECT_EQ(plan.folded, 0u);
  EXPECT_FALSE(plan.changes());
  EXPECT_EQ(plan.kept.size(), 8u);
}

Constant ints(std::vector<std::int64_t> dims, std::vector<std::int64_t> values, DType dtype = DType::I64) {
  Constant c;
  c.dtype = dtype;
  c.dims = std::move(dims);
  c.ints = std::move(values);
  return c;
}

std::optional<Constant> evaluate(std::string_view type, std::vector<const Constant*> inputs,
                                 std::vector<ir::Attribute> attributes = {}, std::int64_t opset = 13) {
  std::optional<std::vector<Constant>> out = evaluateOp({type, opset, attributes, std::move(inputs), 1}, 1024);
  if (!out)
    return std::nullopt;
  return out->front();
}

TEST(ShapeFolding, OpsFollowTheOnnxSpec) {
  const Constant a = ints({3}, {7, -7, 9}), b = ints({}, {2});
  EXPECT_EQ(evaluate("Div", {&a, &b})->ints, (std::vector<std::int64_t>{3, -3, 4})); // truncation
  EXPECT_EQ(evaluate("Mod", {&a, &b})->ints, (std::vector<std::int64_t>{1, 1, 1}));  // the divisor's sign
  const Constant zero = ints({}, {0});
  EXPECT_FALSE(evaluate("Div", {&a, &zero}));
  // Slice: negative step from the end, clamped bounds.
  const Constant data = ints({5}, {10, 11, 12, 13, 14});
  const Constant starts = ints({1}, {-1}), ends = ints({1}, {INT64_MIN}), axes = ints({1}, {0}), steps = ints({1}, {-2});
  EXPECT_EQ(evaluate("Slice", {&data, &starts, &ends, &axes, &steps})->ints, (std::vector<std::int64_t>{14, 12, 10}));
  const Constant from1 = ints({1}, {1}), huge = ints({1}, {INT64_MAX});
  EXPECT_EQ(evaluate("Slice", {&data, &from1, &huge})->ints, (std::vector<std::int64_t>{11, 12, 13, 14}));
  // Gather along axis 1 with a negative index.
  const Constant matrix = ints({2, 3}, {1, 2, 3, 4, 5, 6}), last = ints({}, {-1});
  std::optional<Constant> column = evaluate("Gather", {&matrix, &last}, {intAttribute("axis", 1)});
  ASSERT_TRUE(column);
  EXPECT_EQ(column->dims, (std::vector<std::int64_t>{2}));
  EXPECT_EQ(column->ints, (std::vector<std::int64_t>{3, 6}));
  const Constant outside = ints({}, {5});
  EXPECT_FALSE(evaluate("Gather", {&data, &outside}));
  // Unsqueeze and Squeeze read their axes from an attribute before opset 13.
  ir::Attribute axesAttribute = intAttribute("axes", 0);
  axesAttribute.kind = ir::AttrKind::Ints;
  axesAttribute.ints = {0, 1};
  std::optional<Constant> unsqueezed = evaluate("Unsqueeze", {&b}, {axesAttribute}, 11);
  ASSERT_TRUE(unsqueezed);
  EXPECT_EQ(unsqueezed->dims, (std::vector<std::int64_t>{1, 1}));
  // Range, Reshape with 0 and -1, Cast from float truncating toward zero, Where broadcasting.
  const Constant s = ints({}, {1}), limit = ints({}, {8}), delta = ints({}, {3});
  EXPECT_EQ(evaluate("Range", {&s, &limit, &delta})->ints, (std::vector<std::int64_t>{1, 4, 7}));
  const Constant target = ints({2}, {0, -1});
  EXPECT_EQ(evaluate("Reshape", {&matrix, &target})->dims, (std::vector<std::int64_t>{2, 3}));
  Constant reals;
  reals.dtype = DType::F32;
  reals.dims = {2};
  reals.reals = {2.9, -2.9};
  std::optional<Constant> truncated = evaluate("Cast", {&reals}, {intAttribute("to", 7)});
  ASSERT_TRUE(truncated);
  EXPECT_EQ(truncated->ints, (std::vector<std::int64_t>{2, -2}));
  const Constant condition = ints({2}, {1, 0}, DType::Bool), left = ints({}, {5}), right = ints({2}, {8, 9});
  EXPECT_EQ(evaluate("Where", {&condition, &left, &right})->ints, (std::vector<std::int64_t>{5, 9}));
  const Constant pair = ints({2}, {4, 6});
  const Constant six = ints({}, {6});
  EXPECT_EQ(evaluate("Equal", {&pair, &six})->ints, (std::vector<std::int64_t>{0, 1}));
}

TEST(ShapeFolding, BytesRoundTripInEveryHeldDType) {
  for (DType dtype : {DType::I64, DType::I32, DType::I8, DType::U8, DType::Bool}) {
    Constant c = ints({3}, {1, dtype == DType::U8 || dtype == DType::Bool ? 0 : -1, 1}, dtype);
    std::optional<Constant> back = constantFromBytes(dtype, c.dims, c.bytes());
    ASSERT_TRUE(back) << ir::dtypeName(dtype);
    EXPECT_EQ(*back, c) << ir::dtypeName(dtype);
  }
  EXPECT_FALSE(constantFromBytes(DType::F16, {1}, "\0\0"));
  EXPECT_FALSE(constantFromBytes(DType::I64, {2}, "12345678"));
}

} // namespace
} // namespace cleave::simplify
