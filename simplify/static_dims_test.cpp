#include "simplify/static_dims.h"

#include <gtest/gtest.h>

#include <map>

#include "ir/builder.h"

namespace cleave::simplify {
namespace {
using ir::DType;
using Dims = std::vector<std::int64_t>;

// One op node on inputs of the given dims and integer constants; its output dims by
// staticOutputDims, the constants found by name.
class OneOp {
public:
  explicit OneOp(std::int64_t opset = 17) : opset_(opset) { builder_.modelInfo().opsetImports = {{"", opset}}; }
  OneOp& input(std::string name, Dims dims) {
    builder_.addInput(name, ir::ValueType::tensor(DType::F32, std::move(dims)));
    return *this;
  }
  OneOp& ints(std::string name, Dims values) {
    Constant c;
    c.dtype = DType::I64;
    c.dims = {static_cast<std::int64_t>(values.size())};
    c.ints = std::move(values);
    constants_[name] = c;
    builder_.addInput(name, ir::ValueType::tensor(DType::I64, c.dims));
    return *this;
  }
  std::optional<Dims> dims(std::string type, std::vector<std::string> inputs, std::vector<ir::Attribute> attributes = {}) {
    ir::NodeSpec node;
    node.opType = std::move(type);
    node.name = "op";
    node.inputs = std::move(inputs);
    node.outputs.push_back({"y", ir::ValueType()});
    node.attributes = std::move(attributes);
    builder_.addNode(node);
    builder_.setOutputs({"y"});
    Expected<ir::Graph> graph = std::move(builder_).finish();
    if (!graph)
      return std::nullopt;
    DimsSources sources{[&](ir::ValueId value) -> std::optional<Dims> {
                          if (!graph->rankKnown(value))
                            return std::nullopt;
                          Dims dims;
                          for (const ir::DimEntry& dim : graph->dims(value))
                            dims.push_back(dim.extent);
                          return dims;
                        },
                        [&](ir::ValueId value) -> const Constant* {
                          auto found = constants_.find(std::string(graph->valueName(value)));
                          return found == constants_.end() ? nullptr : &found->second;
                        }};
    return staticOutputDims(*graph, graph->producer(graph->findValue("y")), opset_, sources);
  }

private:
  std::int64_t opset_;
  ir::GraphBuilder builder_{ir::SourceFormat::Onnx};
  std::map<std::string, Constant> constants_;
};

ir::Attribute integer(std::string name, std::int64_t value) {
  ir::Attribute a;
  a.name = std::move(name);
  a.kind = ir::AttrKind::Int;
  a.intValue = value;
  return a;
}

ir::Attribute integers(std::string name, Dims values) {
  ir::Attribute a;
  a.name = std::move(name);
  a.kind = ir::AttrKind::Ints;
  a.ints = std::move(values);
  return a;
}

TEST(StaticDims, OpsFollowTheOnnxSpec) {
  EXPECT_EQ(OneOp().input("a", {2, 1, 5}).input("b", {3, 1}).dims("Add", {"a", "b"}), (Dims{2, 3, 5}));
  EXPECT_EQ(OneOp().input("a", {2, 4}).input("b", {3, 1}).dims("Add", {"a", "b"}), std::nullopt);
  EXPECT_EQ(OneOp().input("a", {7, 2, 3}).input("b", {3, 4}).dims("MatMul", {"a", "b"}), (Dims{7, 2, 4}));
  EXPECT_EQ(OneOp().input("a", {3}).input("b", {5, 3, 4}).dims("MatMul", {"a", "b"}), (Dims{5, 4}));
  // Reshape: 0 copies, -1 takes the rest; with allowzero, 0 is an extent.
  EXPECT_EQ(OneOp().input("x", {2, 3, 8}).ints("t", {0, -1, 4}).dims("Reshape", {"x", "t"}), (Dims{2, 6, 4}));
  EXPECT_EQ(OneOp().input("x", {2, 3, 8}).ints("t", {5, -1}).dims("Reshape", {"x", "t"}), std::nullopt);
  EXPECT_EQ(OneOp().input("x", {0, 3}).ints("t", {0, 3}).dims("Reshape", {"x", "t"}, {integer("allowzero", 1)}),
            (Dims{0, 3}));
  EXPECT_EQ(OneOp().input("x", {2, 3, 4}).dims("Transpose", {"x"}), (Dims{4, 3, 2}));
  EXPECT_EQ(OneOp().input("x", {2, 3, 4}).dims("Transpose", {"x"}, {integers("perm", {0, 2, 1})}), (Dims{2, 4, 3}));
  // Pad: pads as an input (negative ones crop); opset 18's axes.
  EXPECT_EQ(OneOp().input("x", {1, 3, 7, 7}).ints("p", {0, 0, 1, -1, 0, 0, 0, 2}).dims("Pad", {"x", "p"}),
            (Dims{1, 3, 8, 8}));
  EXPECT_EQ(OneOp(18).input("x", {1, 3, 7, 7}).ints("p", {1, 2, 3, 4}).ints("a", {-1, 2}).dims(
                "Pad", {"x", "p", "", "a"}),
            (Dims{1, 3, 13, 11})); // axis 3 grows by 1 + 3, axis 2 by 2 + 4
  // Slice: clamped ends, negative steps, the spec's [-1, dim - 1] end for them.
  EXPECT_EQ(OneOp().input("x", {10, 4}).ints("s", {2}).ints("e", {INT64_MAX}).ints("a", {0}).dims(
                "Slice", {"x", "s", "e", "a"}),
            (Dims{8, 4}));
  EXPECT_EQ(OneOp().input("x", {10, 4}).ints("s", {-1}).ints("e", {INT64_MIN}).ints("a", {0}).ints("k", {-3}).dims(
                "Slice", {"x", "s", "e", "a", "k"}),
            (Dims{4, 4}));
  EXPECT_EQ(OneOp().input("x", {10}).ints("s", {5}).ints("e", {2}).dims("Slice", {"x", "s", "e"}), (Dims{0}));
  EXPECT_EQ(OneOp().input("a", {2, 3}).input("b", {2, 5}).dims("Concat", {"a", "b"}, {integer("axis", -1)}),
            (Dims{2, 8}));
  EXPECT_EQ(OneOp().input("x", {3, 4}).ints("a", {-1, 0}).dims("Unsqueeze", {"x", "a"}), (Dims{1, 3, 4, 1}));
  EXPECT_EQ(OneOp(11).input("x", {3, 4}).dims("Unsqueeze", {"x"}, {integers("axes", {1})}), (Dims{3, 1, 4}));
  EXPECT_EQ(OneOp().input("x", {1, 3, 1}).dims("Squeeze", {"x"}), (Dims{3}));
  EXPECT_EQ(OneOp().input("x", {1, 3, 1}).ints("a", {1}).dims("Squeeze", {"x", "a"}), std::nullopt); // not 1
  EXPECT_EQ(OneOp().input("x", {3, 1}).ints("s", {2, 1, 4}).dims("Expand", {"x", "s"}), (Dims{2, 3, 4}));
  EXPECT_EQ(OneOp().input("x", {5, 6, 7}).input("i", {2, 3}).dims("Gather", {"x", "i"}, {integer("axis", 1)}),
            (Dims{5, 2, 3, 7}));
  EXPECT_EQ(OneOp().input("x", {2, 3, 4}).dims("Flatten", {"x"}, {integer("axis", 2)}), (Dims{6, 4}));
  EXPECT_EQ(OneOp().input("x", {2, 3, 4}).dims("ReduceMean", {"x"}, {integers("axes", {-1}), integer("keepdims", 0)}),
            (Dims{2, 3}));
  EXPECT_EQ(OneOp().input("x", {2, 3, 4}).ints("a", {1}).dims("ReduceSum", {"x", "a"}), (Dims{2, 1, 4}));
  EXPECT_EQ(OneOp().input("x", {2, 3}).dims("Softmax", {"x"}), (Dims{2, 3}));
  EXPECT_EQ(OneOp().input("x", {2, 3}).dims("Resize", {"x"}), std::nullopt); // not followed
}

TEST(StaticDims, SizesThatOverflowAreNotLearned) {
  EXPECT_EQ(OneOp().input("x", {2, 3}).ints("t", {INT64_MAX, 4, -1}).dims("Reshape", {"x", "t"}), std::nullopt);
  EXPECT_EQ(OneOp().input("x", {2, 3}).ints("p", {0, INT64_MAX, 0, INT64_MAX}).dims("Pad", {"x", "p"}), std::nullopt);
  EXPECT_EQ(OneOp().input("x", {2, 3}).ints("s", {INT64_MAX, INT64_MAX}).dims("Expand", {"x", "s"}), std::nullopt);
  EXPECT_EQ(OneOp().input("x", {10}).ints("s", {-1}).ints("e", {INT64_MIN}).ints("a", {0}).ints("k", {INT64_MIN}).dims(
                "Slice", {"x", "s", "e", "a", "k"}),
            (Dims{1}));
}

TEST(StaticDims, AnOperandThatSetsASizeMustBeAConstant) {
  EXPECT_EQ(OneOp().input("x", {2, 3, 8}).input("t", {3}).dims("Reshape", {"x", "t"}), std::nullopt);
  EXPECT_EQ(OneOp().input("x", {2, 3}).input("p", {4}).dims("Pad", {"x", "p"}), std::nullopt);
}

} // namespace
} // namespace cleave::simplify
