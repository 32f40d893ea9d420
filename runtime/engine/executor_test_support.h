// runtime/engine/executor_test_support.h - what the runtime's unit tests share: attribute and node
// builders, a chain of ONNX nodes, float parameters, and running one node on an executor.
// Test code only (GoogleTest's EXPECT in runOne).
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "ir/builder.h"
#include "runtime/engine/executor.h"

namespace cleave::runtime::test_support {

inline ir::Attribute ints(std::string name, std::vector<std::int64_t> values) {
  ir::Attribute a;
  a.name = std::move(name);
  a.kind = ir::AttrKind::Ints;
  a.ints = std::move(values);
  return a;
}
inline ir::Attribute integer(std::string name, std::int64_t value) {
  ir::Attribute a;
  a.name = std::move(name);
  a.kind = ir::AttrKind::Int;
  a.intValue = value;
  return a;
}
inline ir::Attribute text(std::string name, std::string value) {
  ir::Attribute a;
  a.name = std::move(name);
  a.kind = ir::AttrKind::String;
  a.text = std::move(value);
  return a;
}
inline ir::Attribute real(std::string name, double value) {
  ir::Attribute a;
  a.name = std::move(name);
  a.kind = ir::AttrKind::Float;
  a.floatValue = value;
  return a;
}

inline ir::NodeSpec spec(std::string op, std::vector<std::string> inputs, std::vector<ir::Attribute> attributes = {},
                  std::string name = "n") {
  ir::NodeSpec s;
  s.opType = std::move(op);
  s.name = std::move(name);
  s.inputs = std::move(inputs);
  s.outputs.push_back({"y", ir::ValueType()});
  s.attributes = std::move(attributes);
  return s;
}

// A graph of ONNX nodes (opset 17) over untyped inputs, each node's output named at its addition.
struct NodeChain {
  ir::GraphBuilder builder{ir::SourceFormat::Onnx};
  explicit NodeChain(std::initializer_list<const char*> inputs) {
    builder.modelInfo().opsetImports = {{"", 17}};
    for (const char* name : inputs)
      builder.addInput(name, ir::ValueType());
  }
  void add(ir::NodeSpec node, std::string output) {
    node.outputs[0].name = std::move(output);
    builder.addNode(node);
  }
  Expected<ir::Graph> finish(std::vector<std::string> outputs) && {
    builder.setOutputs(std::move(outputs));
    return std::move(builder).finish();
  }
};

// A float32 parameter named `name` holding `t`'s values (inline bytes).
inline void addFloatParameter(ir::GraphBuilder& builder, const std::string& name, const at::Tensor& t) {
  const at::Tensor dense = t.contiguous();
  ir::Parameter p;
  p.name = name;
  p.dtype = ir::DType::F32;
  p.dims = dense.sizes().vec();
  p.bytes = dense.numel() * 4;
  p.data = builder.appendInlineData(
      std::string(static_cast<const char*>(dense.data_ptr()), static_cast<std::size_t>(p.bytes)));
  builder.addParameter(std::move(p), ir::ValueType::tensor(ir::DType::F32, dense.sizes().vec()));
}

// One node reading graph inputs a, b, c... (untyped: the executor does not need types).
inline at::Tensor runOne(ir::NodeSpec node, const TensorMap& inputs, std::int64_t opset = 17) {
  ir::GraphBuilder builder(ir::SourceFormat::Onnx);
  builder.modelInfo().opsetImports = {{"", opset}};
  for (const auto& [name, tensor] : inputs)
    builder.addInput(name, ir::ValueType());
  builder.addNode(node);
  builder.setOutputs({"y"});
  Expected<ir::Graph> graph = std::move(builder).finish();
  EXPECT_TRUE(graph) << (graph ? "" : graph.error().message());
  Expected<std::unique_ptr<Executor>> executor = Executor::create(std::make_shared<const ir::Graph>(std::move(*graph)));
  EXPECT_TRUE(executor) << (executor ? "" : executor.error().message());
  Expected<TensorMap> outputs = (*executor)->run(inputs);
  EXPECT_TRUE(outputs) << (outputs ? "" : outputs.error().message());
  return outputs ? outputs->at("y") : at::Tensor();
}

inline at::Tensor longs(std::vector<std::int64_t> values) {
  return at::tensor(at::ArrayRef<std::int64_t>(values), at::TensorOptions().dtype(at::kLong));
}

} // namespace cleave::runtime::test_support
