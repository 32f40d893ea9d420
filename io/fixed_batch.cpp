#include "io/fixed_batch.h"

#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "base/mapped_file.h"
#include "io/onnx.h"
#include "io/onnx_inference.h"

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
bool targetAdapts(const onnx::NodeProto& node, const std::vector<std::int64_t>& target) {
  bool allowZero = false;
  for (const onnx::AttributeProto& attr : node.attribute())
    if (attr.name() == "allowzero")
      allowZero = attr.i() != 0;
  for (std::int64_t extent : target)
    if (extent == -1 || (extent == 0 && !allowZero))
      return true;
  return false;
}

std::vector<BatchHolder> reshapesHoldingRows(const onnx::GraphProto& graph, const TypeMap& before, const TypeMap& after) {
  const auto constants = shapeConstants(graph);
  std::vector<BatchHolder> holders;
  std::vector<bool> staticBefore, staticAfter;
  for (const onnx::NodeProto& node : graph.node()) {
    if (node.op_type() != "Reshape" || (!node.domain().empty() && node.domain() != "ai.onnx") || node.input_size() < 2)
      continue;
    auto target = constants.find(node.input(1));
    if (target == constants.end() || targetAdapts(node, target->second))
      continue;
    const int rank = staticDims(before, node.input(0), staticBefore);
    if (rank < 0 || staticDims(after, node.input(0), staticAfter) != rank)
      continue;
    for (int d = 0; d < rank; ++d)
      if (staticBefore[d] && !staticAfter[d]) { // this dim follows the rows
        holders.push_back({node.name(), node.op_type(), target->second});
        break;
      }
  }
  return holders;
}
} // namespace

void freeTheRows(onnx::GraphProto& graph, FixedBatch& fixed) {
  std::unordered_set<std::string> initializers; // old exports list every initializer as an input too
  for (const onnx::TensorProto& tensor : graph.initializer())
    initializers.insert(tensor.name());
  for (onnx::ValueInfoProto& input : *graph.mutable_input()) {
    if (!input.type().has_tensor_type() || !input.type().tensor_type().has_shape() || initializers.count(input.name()))
      continue;
    onnx::TensorShapeProto* shape = input.mutable_type()->mutable_tensor_type()->mutable_shape();
    if (shape->dim_size() == 0 || !shape->dim(0).has_dim_value())
      continue;
    if (fixed.batch < 0)
      fixed.batch = shape->dim(0).dim_value();
    if (shape->dim(0).dim_value() != fixed.batch)
      continue;
    shape->mutable_dim(0)->set_dim_param(kRowsSymbol);
    fixed.batchedInputs.push_back(input.name());
  }
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
  onnx::ModelProto freed = model;
  freeTheRows(*freed.mutable_graph(), fixed);
  if (fixed.batchedInputs.empty())
    return FixedBatch{};
  CLEAVE_TRY(onnx::GraphProto typedBefore, inferTypesIsolated(model));
  CLEAVE_TRY(onnx::GraphProto typedAfter, inferTypesIsolated(freed));
  fixed.holders = reshapesHoldingRows(model.graph(), typesOf(typedBefore), typesOf(typedAfter));
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
