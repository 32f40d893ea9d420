#include "simplify/shape_folding.h"
#include "simplify/symbolic_reshape.h"

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
    outputs_.push_back("out");
  }
  ir::Graph build() {
    builder_.setOutputs(outputs_);
    return std::move(*std::move(builder_).finish());
  }
  void output(std::string name) { outputs_.push_back(std::move(name)); }
  void addNode(const ir::NodeSpec& node) { builder_.addNode(node); }
  void op(std::string type, std::vector<std::string> inputs, std::string out, DType dtype, std::vector<std::int64_t> dims,
          std::vector<ir::Attribute> attributes = {}) {
    ir::NodeSpec node = spec(std::move(type), std::move(inputs), std::move(out), dtype, std::move(dims));
    node.attributes = std::move(attributes);
    builder_.addNode(node);
  }
  // An op whose output type the graph does not know.
  void untyped(std::string type, std::vector<std::string> inputs, std::string out) {
    ir::NodeSpec node;
    node.opType = std::move(type);
    node.name = out;
    node.inputs = std::move(inputs);
    node.outputs.push_back({std::move(out), ir::ValueType()});
    builder_.addNode(node);
  }
  void float32(std::string name, std::vector<std::int64_t> dims, bool isBuffer) {
    ir::Parameter p;
    p.name = name;
    p.dtype = DType::F32;
    p.dims = dims;
    p.fixed = isBuffer ? ir::Fixed::Buffer : ir::Fixed::Trains;
    std::vector<float> values(static_cast<std::size_t>(dims.empty() ? 1 : dims[0]), 1.5f);
    p.bytes = static_cast<std::int64_t>(values.size() * 4);
    std::string bytes(values.size() * 4, '\0');
    std::memcpy(bytes.data(), values.data(), bytes.size());
    p.data = builder_.appendInlineData(bytes);
    builder_.addParameter(std::move(p), tensorType(DType::F32, std::move(dims)));
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
  ir::GraphBuilder builder_{ir::SourceFormat::Onnx};
  std::vector<std::string> outputs_;
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
  // Shape(x) is not static, so the batch's chain stays; x.size(1) is static and folds.
  EXPECT_EQ(plan.folded, 2u); // Gather(s, 1) and its Unsqueeze
  EXPECT_EQ(plan.foldedByOp.at("Gather"), 1u);
  ASSERT_EQ(plan.kept.size(), 6u);
  EXPECT_EQ(graph.opType(plan.kept[0]), "Shape");
  ASSERT_EQ(plan.constants.size(), 1u);
  EXPECT_EQ(graph.valueName(plan.constants[0].first), "tu");
  EXPECT_EQ(plan.constants[0].second.ints, (std::vector<std::int64_t>{3}));
}

TEST(ShapeFolding, ATrainedWeightNeverFoldsButABufferDoes) {
  for (bool isBuffer : {false, true}) {
    ViewGraph built;
    built.float32("w", {4}, isBuffer);
    built.op("Cast", {"w"}, "w64", DType::F64, {4}, {intAttribute("to", 11)});
    built.op("Cast", {"w64"}, "w32", DType::F32, {4}, {intAttribute("to", 1)});
    built.output("w32");
    ir::Graph graph = built.build();
    FoldPlan plan = planShapeFolding(graph);
    EXPECT_EQ(plan.foldedByOp.count("Cast") ? plan.foldedByOp.at("Cast") : 0u, isBuffer ? 2u : 0u);
  }
}

TEST(ShapeFolding, IdentityAndInferenceDropoutAreBypassed) {
  for (bool maskRead : {false, true}) {
    ViewGraph built;
    built.op("Identity", {"out"}, "same", DType::F32, {2, 3, 8});
    ir::NodeSpec dropout;
    dropout.opType = "Dropout";
    dropout.name = "drop";
    dropout.inputs = {"same"};
    dropout.outputs.push_back({"dropped", tensorType(DType::F32, {2, 3, 8})});
    dropout.outputs.push_back({"mask", tensorType(DType::Bool, {2, 3, 8})});
    built.addNode(dropout);
    built.op("Relu", {"dropped"}, "final", DType::F32, {2, 3, 8});
    built.output("final");
    if (maskRead)
      built.output("mask");
    ir::Graph graph = built.build();
    FoldPlan plan = planShapeFolding(graph);
    EXPECT_EQ(plan.bypassedByOp.count("Identity"), 1u);
    EXPECT_EQ(plan.bypassedByOp.count("Dropout"), maskRead ? 0u : 1u);
    Expected<ir::Graph> folded = applyFoldPlan(graph, plan);
    ASSERT_TRUE(folded) << folded.error().message();
    // The final Relu reads what the bypassed nodes passed on.
    const ir::NodeId relu = folded->producer(folded->findValue("final"));
    EXPECT_EQ(folded->valueName(folded->inputs(relu)[0]), maskRead ? "dropped" : "out");
    EXPECT_EQ(folded->findValue("same") == ir::kNoValue, true);
  }
}

// pads computed from constants, then Shape of the Pad's output, whose type the graph does not know
// until the pads fold: a second round, with onnx's inference run anew, folds the Shape.
// Pads computed from constants, then Shape of the Pad's output, whose type the graph does not
// know: planning learns the Pad's dims from the folded pads (static_dims.h) and folds the Shape in
// the same round. A Tile is not among the ops planning follows: its Shape folds in a second round,
// with onnx's inference run anew.
TEST(ShapeFolding, AFoldThatMakesAShapeKnownFoldsItInTheSameRoundOrTheNext) {
  for (const std::string padOrTile : {"Pad", "Tile"}) {
    SCOPED_TRACE(padOrTile);
    const bool pad = padOrTile == "Pad";
    ir::GraphBuilder builder{ir::SourceFormat::Onnx};
    builder.modelInfo().opsetImports = {{"", 13}};
    builder.addInput("x", tensorType(DType::F32, {1, 2, 4, 4}));
    auto int64 = [&](std::string name, std::vector<std::int64_t> values) {
      ir::Parameter p;
      p.name = name;
      p.dtype = DType::I64;
      p.dims = {static_cast<std::int64_t>(values.size())};
      p.bytes = static_cast<std::int64_t>(values.size() * 8);
      std::string bytes(values.size() * 8, '\0');
      std::memcpy(bytes.data(), values.data(), bytes.size());
      p.data = builder.appendInlineData(bytes);
      builder.addParameter(std::move(p), tensorType(DType::I64, {static_cast<std::int64_t>(values.size())}));
    };
    int64("base", pad ? std::vector<std::int64_t>{0, 0, 1, 1, 0, 0, 1, 1} : std::vector<std::int64_t>{1, 1, 1, 1});
    int64("step", pad ? std::vector<std::int64_t>(8, 0) : std::vector<std::int64_t>{0, 0, 0, 1});
    ir::ValueType unknownRank;
    unknownRank.kind = ir::ValueKind::Tensor;
    unknownRank.dtype = DType::F32;
    auto op = [&](std::string type, std::vector<std::string> inputs, std::string out, ir::ValueType outType) {
      ir::NodeSpec node;
      node.opType = std::move(type);
      node.name = out;
      node.inputs = std::move(inputs);
      node.outputs.push_back({out, std::move(outType)});
      builder.addNode(node);
    };
    op("Add", {"base", "step"}, "amounts", tensorType(DType::I64, {pad ? 8 : 4}));
    op(padOrTile, {"x", "amounts"}, "grown", unknownRank);
    op("Shape", {"grown"}, "shape", tensorType(DType::I64, {4}));
    op("Reshape", {"grown", "shape"}, "same", unknownRank);
    op("Relu", {"same"}, "y", unknownRank);
    builder.setOutputs({"y"});
    ir::Graph graph = std::move(*std::move(builder).finish());

    FoldPlan once = planShapeFolding(graph);
    EXPECT_EQ(once.foldedByOp.count("Shape"), pad ? 1u : 0u);
    FoldPlan fixed = foldToFixedPoint(graph);
    EXPECT_EQ(fixed.rounds, pad ? 1u : 2u);
    EXPECT_EQ(fixed.foldedByOp.count("Shape"), 1u);
    ASSERT_EQ(fixed.constants.size(), 2u); // the amounts and the Reshape's shape
    const std::vector<std::int64_t> grown = pad ? std::vector<std::int64_t>{1, 2, 6, 6} : std::vector<std::int64_t>{1, 2, 4, 8};
    EXPECT_EQ(fixed.constants[1].second.ints, grown);
  }
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
  // Transpose with and without perm.
  std::optional<Constant> swapped = evaluate("Transpose", {&matrix});
  ASSERT_TRUE(swapped);
  EXPECT_EQ(swapped->dims, (std::vector<std::int64_t>{3, 2}));
  EXPECT_EQ(swapped->ints, (std::vector<std::int64_t>{1, 4, 2, 5, 3, 6}));
  ir::Attribute perm = intAttribute("perm", 0);
  perm.kind = ir::AttrKind::Ints;
  perm.ints = {0, 0};
  EXPECT_FALSE(evaluate("Transpose", {&matrix}, {perm}));
  // ScatterND: rows 1 and -2 (0) of a 2x3 replaced.
  const Constant rows = ints({2, 1}, {1, -2}), updates = ints({2, 3}, {7, 8, 9, 10, 11, 12});
  std::optional<Constant> scattered = evaluate("ScatterND", {&matrix, &rows, &updates});
  ASSERT_TRUE(scattered);
  EXPECT_EQ(scattered->ints, (std::vector<std::int64_t>{10, 11, 12, 7, 8, 9}));
  const Constant row5 = ints({1, 1}, {5}), oneRow = ints({1, 3}, {1, 1, 1});
  EXPECT_FALSE(evaluate("ScatterND", {&matrix, &row5, &oneRow}));
  const Constant pair = ints({2}, {4, 6});
  const Constant six = ints({}, {6});
  EXPECT_EQ(evaluate("Equal", {&pair, &six})->ints, (std::vector<std::int64_t>{0, 1}));
  // Trilu: a causal mask's upper triangle above the diagonal (k = 1), and the lower one (k = -1).
  Constant square;
  square.dtype = DType::F32;
  square.dims = {3, 3};
  square.reals = std::vector<double>(9, -1.0);
  const Constant one = ints({}, {1}), minusOne = ints({}, {-1});
  std::optional<Constant> above = evaluate("Trilu", {&square, &one});
  ASSERT_TRUE(above);
  EXPECT_EQ(above->reals, (std::vector<double>{0, -1, -1, 0, 0, -1, 0, 0, 0}));
  std::optional<Constant> below = evaluate("Trilu", {&square, &minusOne}, {intAttribute("upper", 0)});
  ASSERT_TRUE(below);
  EXPECT_EQ(below->reals, (std::vector<double>{0, 0, 0, -1, 0, 0, -1, -1, 0}));
  EXPECT_EQ(evaluate("Trilu", {&matrix})->ints, (std::vector<std::int64_t>{1, 2, 3, 0, 5, 6})); // 2x3, k = 0
  EXPECT_FALSE(evaluate("Trilu", {&pair})); // rank 1
}

TEST(ShapeFolding, AnExpandThatKeepsItsInputsDimsIsBypassedAndATrainedInputStays) {
  ViewGraph built;
  built.float32("token", {8}, /*isBuffer=*/false);
  built.int64("keep", {2}, {1, 1});
  built.int64("grow", {2}, {2, 8});
  built.op("Expand", {"token", "keep"}, "same", DType::F32, {1, 8});
  built.op("Expand", {"token", "grow"}, "rows", DType::F32, {2, 8});
  built.op("Add", {"same", "rows"}, "sum", DType::F32, {2, 8});
  built.output("sum");
  ir::Graph graph = built.build();
  FoldPlan plan = planShapeFolding(graph);
  // [8] broadcast with [1, 1] is [1, 8]: a new dim, so not bypassed either.
  EXPECT_TRUE(plan.bypassedByOp.empty());
  ViewGraph flat;
  flat.float32("token", {8}, false);
  flat.int64("keep", {1}, {1});
  flat.op("Expand", {"token", "keep"}, "same", DType::F32, {8});
  flat.op("Neg", {"same"}, "negated", DType::F32, {8});
  flat.output("negated");
  ir::Graph kept = flat.build();
  plan = planShapeFolding(kept);
  EXPECT_EQ(plan.bypassedByOp, (std::map<std::string, std::size_t>{{"Expand", 1}}));
  Expected<ir::Graph> folded = applyFoldPlan(kept, plan);
  ASSERT_TRUE(folded) << folded.error().message();
  EXPECT_EQ(folded->valueName(folded->inputs(folded->producer(folded->findValue("negated")))[0]), "token");
  EXPECT_NE(folded->findNode("token"), ir::NodeId{UINT32_MAX}); // still the trained parameter, not a folded copy
}

// x [batch, 3, 8] viewed as (x.size(0), 3, 2, -1): the target's first element is batch, so the
// view is [batch, 3, 2, 4], and its last dim, read back, folds (as in a static export).
TEST(ShapeFolding, AViewThatCopiesASymbolicBatchHasKnownDimsAndTheirReadsFold) {
  ViewGraph built("batch");
  built.int64("three_two_rest", {3}, {3, 2, -1});
  built.int64("last", {}, {-1});
  built.op("Concat", {"bu", "three_two_rest"}, "heads", DType::I64, {4}, {intAttribute("axis", 0)});
  built.untyped("Reshape", {"x", "heads"}, "split");
  built.untyped("Shape", {"split"}, "split_shape");
  built.untyped("Gather", {"split_shape", "last"}, "width");
  built.output("width");
  built.output("split");
  ir::Graph graph = built.build();
  const auto refined = reshapeTypesFromSymbols(graph, {});
  ASSERT_EQ(refined.size(), 1u);
  EXPECT_EQ(graph.valueName(refined[0].first), "split");
  EXPECT_EQ(ir::formatShape(refined[0].second.shape), "[batch,3,2,4]");
  auto widthFolded = [&](const FoldPlan& plan) -> std::optional<Constant> {
    for (const auto& [value, constant] : plan.constants)
      if (graph.valueName(value) == "width")
        return constant;
    return std::nullopt;
  };
  EXPECT_FALSE(widthFolded(planShapeFolding(graph))); // onnx's inference alone: unknown
  std::optional<Constant> width = widthFolded(foldToFixedPoint(graph));
  ASSERT_TRUE(width);
  EXPECT_EQ(width->ints, (std::vector<std::int64_t>{4}));
  // A symbol elsewhere than in the data is still that size; a -1 the numbers do not divide stays
  // unknown.
  ViewGraph other("batch");
  other.int64("rest_three", {2}, {-1, 3});
  other.op("Concat", {"tu", "bu", "rest_three"}, "swapped", DType::I64, {4}, {intAttribute("axis", 0)});
  other.untyped("Reshape", {"x", "swapped"}, "moved");
  other.output("moved");
  ir::Graph moved = other.build();
  const auto movedTypes = reshapeTypesFromSymbols(moved, {});
  ASSERT_EQ(movedTypes.size(), 1u);
  EXPECT_EQ(ir::formatShape(movedTypes[0].second.shape), "[3,batch,?,3]");
}

// A view whose target folds: the export's types did not know its dims; the retyped folded graph
// does (what split's shape prologue reads).
TEST(ShapeFolding, TheRetypedFoldedGraphKnowsWhatTheFoldsMadeKnown) {
  ViewGraph built;
  built.untyped("Reshape", {"x", "shape"}, "view");
  built.untyped("Neg", {"view"}, "negated");
  built.output("negated");
  ir::Graph graph = built.build();
  FoldPlan plan = foldToFixedPoint(graph);
  Expected<ir::Graph> plain = applyFoldPlan(graph, plan), retyped = applyFoldPlanRetyped(graph, plan);
  ASSERT_TRUE(plain && retyped);
  EXPECT_FALSE(plain->rankKnown(plain->findValue("negated")));
  EXPECT_EQ(ir::formatShape(retyped->valueType(retyped->findValue("negated")).shape), "[2,3,8]");
  EXPECT_EQ(retyped->numNodes(), plain->numNodes());
}

TEST(ShapeFolding, ACastToTheDtypeItHasIsBypassedAndAnotherStays) {
  ViewGraph built;
  built.op("Cast", {"out"}, "same", DType::F32, {2, 3, 8}, {intAttribute("to", 1)});  // float32 to float32
  built.op("Cast", {"same"}, "wider", DType::F64, {2, 3, 8}, {intAttribute("to", 11)}); // to float64
  built.op("Neg", {"wider"}, "final", DType::F64, {2, 3, 8});
  built.output("final");
  ir::Graph graph = built.build();
  FoldPlan plan = planShapeFolding(graph);
  EXPECT_EQ(plan.bypassedByOp, (std::map<std::string, std::size_t>{{"Cast", 1}}));
  Expected<ir::Graph> folded = applyFoldPlan(graph, plan);
  ASSERT_TRUE(folded) << folded.error().message();
  const ir::NodeId wider = folded->producer(folded->findValue("wider"));
  EXPECT_EQ(folded->valueName(folded->inputs(wider)[0]), "out");
  EXPECT_EQ(folded->findValue("same"), ir::kNoValue);
}

// torch.export's flatten of a pooled [2, 4] as_strided: Gather(Reshape(x, [-1]), 0..7 as
// [2, 4, 1, 1]) read by a Reshape to [2, 4] is that Reshape of the flat x; indices out of order,
// or a reader that is not a Reshape, keep the Gather.
TEST(ShapeFolding, AGatherOfTheIdentityIndicesThatOnlyReshapesReadIsBypassed) {
  auto graphWith = [](std::vector<std::int64_t> order, bool reshapeReads) {
    ViewGraph built;
    built.float32("pooled", {8}, /*isBuffer=*/false);
    built.int64("order", {2, 4, 1, 1}, order);
    built.int64("rows", {2}, {2, 4});
    built.op("Gather", {"pooled", "order"}, "strided", DType::F32, {2, 4, 1, 1});
    if (reshapeReads)
      built.op("Reshape", {"strided", "rows"}, "viewed", DType::F32, {2, 4});
    else
      built.op("Neg", {"strided"}, "viewed", DType::F32, {2, 4, 1, 1});
    built.output("viewed");
    return built.build();
  };
  ir::Graph graph = graphWith({0, 1, 2, 3, 4, 5, 6, 7}, true);
  FoldPlan plan = planShapeFolding(graph);
  EXPECT_EQ(plan.bypassedByOp, (std::map<std::string, std::size_t>{{"Gather", 1}}));
  Expected<ir::Graph> folded = applyFoldPlan(graph, plan);
  ASSERT_TRUE(folded) << folded.error().message();
  EXPECT_EQ(folded->valueName(folded->inputs(folded->producer(folded->findValue("viewed")))[0]), "pooled");
  EXPECT_TRUE(planShapeFolding(graphWith({1, 0, 2, 3, 4, 5, 6, 7}, true)).bypassedByOp.empty());
  EXPECT_TRUE(planShapeFolding(graphWith({0, 1, 2, 3, 4, 5, 6, 7}, false)).bypassedByOp.empty());
}

// The same view with a symbolic batch, as torch.export writes it: the indices are
// Range(0, batch) * 24, unsqueezed, plus the constant offsets of the static dims. Affine, in
// order and with x's dims, so the Gather is x, read by a Reshape or any other op; a stride of 25
// is not.
TEST(ShapeFolding, AGatherBySymbolicBatchIndicesInOrderIsBypassed) {
  auto graphWith = [](std::int64_t batchStride, bool reshapeReads = true) {
    ViewGraph built("batch");
    built.int64("flat_shape", {1}, {-1});
    built.int64("stride", {}, {batchStride});
    built.int64("rows_axes", {2}, {1, 2});
    std::vector<std::int64_t> lanes(8), columns = {0, 8, 16};
    for (std::int64_t k = 0; k < 8; ++k)
      lanes[static_cast<std::size_t>(k)] = k;
    built.int64("columns", {1, 3, 1}, columns);
    built.int64("lanes", {1, 1, 8}, lanes);
    built.int64("view_shape", {2}, {-1, 24});
    built.op("Reshape", {"x", "flat_shape"}, "flat", DType::F32, {-1});
    built.op("Shape", {"x"}, "first", DType::I64, {1}, {intAttribute("start", 0), intAttribute("end", 1)});
    built.op("Squeeze", {"first"}, "rows", DType::I64, {});
    built.op("Range", {"zero", "rows", "one"}, "row_index", DType::I64, {-1});
    built.op("Mul", {"row_index", "stride"}, "row_start", DType::I64, {-1});
    built.op("Unsqueeze", {"row_start", "rows_axes"}, "row_start3", DType::I64, {-1, 1, 1});
    built.op("Add", {"row_start3", "columns"}, "partial", DType::I64, {-1, 3, 1});
    built.op("Add", {"partial", "lanes"}, "positions", DType::I64, {-1, 3, 8});
    built.op("Gather", {"flat", "positions"}, "strided", DType::F32, {-1, 3, 8});
    if (reshapeReads)
      built.op("Reshape", {"strided", "view_shape"}, "viewed", DType::F32, {-1, 24}, {intAttribute("allowzero", 1)});
    else
      built.op("Neg", {"strided"}, "viewed", DType::F32, {-1, 3, 8});
    built.output("viewed");
    return built.build();
  };
  // The indices have x's own dims: the Gather is x, whatever reads it.
  for (bool reshapeReads : {true, false}) {
    ir::Graph graph = graphWith(24, reshapeReads);
    FoldPlan plan = planShapeFolding(graph);
    EXPECT_EQ(plan.bypassedByOp, (std::map<std::string, std::size_t>{{"Gather", 1}}));
    Expected<ir::Graph> folded = applyFoldPlan(graph, plan);
    ASSERT_TRUE(folded) << folded.error().message();
    EXPECT_EQ(folded->valueName(folded->inputs(folded->producer(folded->findValue("viewed")))[0]), "x");
    EXPECT_EQ(folded->findValue("positions"), ir::kNoValue); // the index arithmetic goes with it
    EXPECT_EQ(folded->findValue("flat"), ir::kNoValue);      // and the flattening, now unread
  }
  EXPECT_TRUE(planShapeFolding(graphWith(25)).bypassedByOp.empty());
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
