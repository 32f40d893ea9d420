#include "io/fixed_batch.h"

#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "base/mapped_file.h"
#include "io/onnx.h"
#include "io/onnx_inference.h"
#include "ir/graph.h"

namespace cleave::io {

namespace {
constexpr const char* kRowsSymbol = "cleave_rows";

using TypeMap = std::unordered_map<std::string, onnx::TypeProto>;

TypeMap typesOf(const onnx::GraphProto& graph) {
  TypeMap types;
  for (const auto* list : {&graph.input(), &graph.value_info(), &graph.output()})
    for (const onnx::ValueInfoProto& info : *list)
      if (info.has_type())
        types[info.name()] = info.type();
  return types;
}

// Whether dim d of `name`'s tensor type is static, or -1 when the type says nothing of it.
int staticDims(const TypeMap& types, const std::string& name, std::vector<bool>& isStatic) {
  auto found = types.find(name);
  if (found == types.end() || !found->second.has_tensor_type() || !found->second.tensor_type().has_shape())
    return -1;
  isStatic.clear();
  for (const onnx::TensorShapeProto_Dimension& dim : found->second.tensor_type().shape().dim())
    isStatic.push_back(dim.has_dim_value());
  return static_cast<int>(isStatic.size());
}

// Small int64 constants by value name: initializers and Constant nodes' `value`.
std::optional<std::vector<std::int64_t>> int64Values(const onnx::TensorProto& tensor) {
  if (tensor.data_type() != onnx::TensorProto::INT64)
    return std::nullopt;
  if (tensor.has_data_location() && tensor.data_location() == onnx::TensorProto::EXTERNAL)
    return std::nullopt;
  std::vector<std::int64_t> values(tensor.int64_data().begin(), tensor.int64_data().end());
  if (tensor.has_raw_data()) {
    const std::string& raw = tensor.raw_data();
    values.resize(raw.size() / sizeof(std::int64_t));
    std::memcpy(values.data(), raw.data(), values.size() * sizeof(std::int64_t));
  }
  return values;
}

std::map<std::string, std::vector<std::int64_t>> shapeConstants(const onnx::GraphProto& graph) {
  std::map<std::string, std::vector<std::int64_t>> constants;
  for (const onnx::TensorProto& tensor : graph.initializer())
    if (auto values = int64Values(tensor))
      constants[tensor.name()] = std::move(*values);
  for (const onnx::NodeProto& node : graph.node())
    if (node.op_type() == "Constant" && node.output_size() == 1)
      for (const onnx::AttributeProto& attr : node.attribute())
        if (attr.name() == "value" && attr.has_t())
          if (auto values = int64Values(attr.t()))
            constants[node.output(0)] = std::move(*values);
  return constants;
}


// Whether Reshape's constant target can follow the rows: -1 infers a dim, 0 copies one (unless
// allowzero says 0 is an extent).
bool targetAdapts(std::span<const std::int64_t> target, bool allowZero) {
  for (std::int64_t extent : target)
    if (extent == -1 || (extent == 0 && !allowZero))
      return true;
  return false;
}

bool targetAdapts(const onnx::NodeProto& node, const std::vector<std::int64_t>& target) {
  bool allowZero = false;
  for (const onnx::AttributeProto& attr : node.attribute())
    if (attr.name() == "allowzero")
      allowZero = attr.i() != 0;
  return targetAdapts(target, allowZero);
}

bool isDefaultDomain(std::string_view domain) { return domain.empty() || domain == "ai.onnx"; }

// Whether Reshape `node` of the graph as read may hold the rows: its target is a constant (the
// reader made Constant nodes parameters) that neither infers nor copies a dim, or one it cannot
// read. O(the target's bytes).
bool mayHoldRows(const ir::Graph& g, ir::NodeId node) {
  auto inputs = g.inputs(node);
  if (inputs.size() < 2 || inputs[1] == ir::kNoValue || g.kind(g.producer(inputs[1])) != ir::NodeKind::Parameter)
    return false;
  const ir::ParamId param = g.parameters(g.producer(inputs[1]))[0];
  Expected<std::string> bytes = g.readParameterData(param);
  if (g.parameter(param).dtype != ir::DType::I64 || !bytes)
    return true;
  std::vector<std::int64_t> target(bytes->size() / sizeof(std::int64_t));
  std::memcpy(target.data(), bytes->data(), target.size() * sizeof(std::int64_t));
  const ir::Attribute* allowZero = g.findAttribute(node, "allowzero");
  return !targetAdapts(target, allowZero && allowZero->kind == ir::AttrKind::Int && allowZero->intValue != 0);
}

// The Reshapes whose target is a constant that can hold the rows: the only nodes that may. O(N log C).
std::vector<std::pair<const onnx::NodeProto*, std::vector<std::int64_t>>> rigidReshapes(const onnx::GraphProto& graph) {
  const auto constants = shapeConstants(graph);
  std::vector<std::pair<const onnx::NodeProto*, std::vector<std::int64_t>>> rigid;
  for (const onnx::NodeProto& node : graph.node()) {
    if (node.op_type() != "Reshape" || !isDefaultDomain(node.domain()) || node.input_size() < 2)
      continue;
    auto target = constants.find(node.input(1));
    if (target != constants.end() && !targetAdapts(node, target->second))
      rigid.emplace_back(&node, target->second);
  }
  return rigid;
}

std::vector<BatchHolder> reshapesHoldingRows(
    const std::vector<std::pair<const onnx::NodeProto*, std::vector<std::int64_t>>>& rigid, const TypeMap& before,
    const TypeMap& after) {
  std::vector<BatchHolder> holders;
  std::vector<bool> staticBefore, staticAfter;
  for (const auto& [nodePointer, target] : rigid) {
    const onnx::NodeProto& node = *nodePointer;
    const int rank = staticDims(before, node.input(0), staticBefore);
    if (rank < 0 || staticDims(after, node.input(0), staticAfter) != rank)
      continue;
    for (int d = 0; d < rank; ++d)
      if (staticBefore[d] && !staticAfter[d]) { // this dim follows the rows
        holders.push_back({node.name(), node.op_type(), target});
        break;
      }
  }
  return holders;
}
} // namespace

namespace {
// The graph inputs (not initializers) whose static dim 0 is the batch (fixed.batch, or the first
// such input's dim 0 when it is -1), into fixed.batchedInputs.
void findBatchedInputs(const onnx::GraphProto& graph, FixedBatch& fixed) {
  std::unordered_set<std::string> initializers; // old exports list every initializer as an input too
  for (const onnx::TensorProto& tensor : graph.initializer())
    initializers.insert(tensor.name());
  for (const onnx::ValueInfoProto& input : graph.input()) {
    if (!input.type().has_tensor_type() || !input.type().tensor_type().has_shape() || initializers.count(input.name()))
      continue;
    const onnx::TensorShapeProto& shape = input.type().tensor_type().shape();
    if (shape.dim_size() == 0 || !shape.dim(0).has_dim_value())
      continue;
    if (fixed.batch < 0)
      fixed.batch = shape.dim(0).dim_value();
    if (shape.dim(0).dim_value() == fixed.batch)
      fixed.batchedInputs.push_back(input.name());
  }
}
} // namespace

void freeTheRows(onnx::GraphProto& graph, FixedBatch& fixed) {
  findBatchedInputs(graph, fixed);
  const std::unordered_set<std::string> batched(fixed.batchedInputs.begin(), fixed.batchedInputs.end());
  for (onnx::ValueInfoProto& input : *graph.mutable_input())
    if (batched.count(input.name()))
      input.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_param(kRowsSymbol);
  graph.clear_value_info(); // inferred anew, from the free rows
  for (onnx::ValueInfoProto& output : *graph.mutable_output())
    if (output.type().has_tensor_type())
      output.mutable_type()->mutable_tensor_type()->clear_shape();
}

Expected<FixedBatch> findFixedBatch(const std::string& path, std::int64_t batch) {
  CLEAVE_TRY(std::shared_ptr<const MappedFile> file, MappedFile::open(path));
  onnx::ModelProto model;
  std::string stripped;
  if (!withoutLargeInitializerData(file->bytes(), stripped) ||
      !model.ParseFromArray(stripped.data(), static_cast<int>(stripped.size())))
    return Error(ErrorCode::ParseError) << path << ": not a valid ONNX model";
  std::string().swap(stripped);
  for (const onnx::OperatorSetIdProto& opset : model.opset_import())
    if ((opset.domain().empty() || opset.domain() == "ai.onnx") && opset.version() < kMinOnnxOpset)
      return FixedBatch{}; // converted on reading, never exported with folded shapes: nothing to find
  CLEAVE_CHECK(checkBeforeInference(model.graph(), {}));
  FixedBatch fixed;
  fixed.batch = batch;
  findBatchedInputs(model.graph(), fixed);
  if (fixed.batchedInputs.empty())
    return FixedBatch{};
  // Without a Reshape that could hold them, the rows are free: no inference needed (a model of
  // a million elementwise nodes is analysed in the time of one read).
  const auto rigid = rigidReshapes(model.graph());
  if (rigid.empty())
    return fixed;
  onnx::ModelProto freed = model;
  FixedBatch freedRows{fixed.batch, {}, {}};
  freeTheRows(*freed.mutable_graph(), freedRows);
  CLEAVE_TRY(onnx::GraphProto typedBefore, inferTypesIsolated(model));
  CLEAVE_TRY(onnx::GraphProto typedAfter, inferTypesIsolated(freed));
  fixed.holders = reshapesHoldingRows(rigid, typesOf(typedBefore), typesOf(typedAfter));
  return fixed;
}

Expected<FixedBatch> findFixedBatch(const std::string& path, const ir::Graph& asRead) {
  FixedBatch fixed;
  for (std::uint32_t n = 0; n < asRead.numNodes(); ++n) {
    const ir::NodeId node{n};
    if (asRead.kind(node) != ir::NodeKind::Input)
      continue;
    const ir::Shape& shape = asRead.valueType(asRead.outputs(node)[0]).shape;
    if (!shape.rankKnown || shape.dims.empty() || !shape.dims[0].isKnown())
      continue;
    if (fixed.batch < 0)
      fixed.batch = shape.dims[0].extent;
    if (shape.dims[0].extent == fixed.batch)
      fixed.batchedInputs.emplace_back(asRead.valueName(asRead.outputs(node)[0]));
  }
  if (fixed.batchedInputs.empty() || asRead.modelInfo().convertedFromOpset > 0)
    return FixedBatch{};
  for (std::uint32_t n = 0; n < asRead.numNodes(); ++n) {
    const ir::NodeId node{n};
    if (asRead.kind(node) == ir::NodeKind::Op && asRead.opType(node) == "Reshape" &&
        isDefaultDomain(asRead.opDomain(node)) && mayHoldRows(asRead, node))
      return findFixedBatch(path); // a Reshape that may hold them: the whole analysis
  }
  return fixed;
}

std::string describeFixedBatch(const FixedBatch& fixed) {
  if (fixed.holders.empty())
    return "the batch is free";
  const BatchHolder& first = fixed.holders.front();
  std::ostringstream out;
  out << "node '" << first.node << "' (" << first.opType << ") has the constant shape [";
  for (std::size_t i = 0; i < first.shape.size(); ++i)
    out << (i ? ", " : "") << first.shape[i];
  out << "], which holds the exported batch of " << fixed.batch;
  if (fixed.holders.size() > 1)
    out << " (as do " << fixed.holders.size() - 1 << " more nodes)";
  out << ": only whole batches of " << fixed.batch << " rows can run; export with a dynamic batch axis "
      << "(torch.onnx.export(..., dynamic_axes={'" << fixed.batchedInputs.front() << "': {0: 'batch'}})) "
      << "or with the microbatch's rows";
  return out.str();
}

} // namespace cleave::io
