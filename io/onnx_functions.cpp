#include "io/onnx_functions.h"

#include <onnx/defs/schema.h>
#include <onnx/inliner/inliner.h>
#include <onnx/onnx_pb.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/isolated_call.h"
#include "io/protobuf_wire.h"

namespace cleave::io {
namespace {

// Field numbers of onnx.proto that the scan reads.
enum ModelField : std::uint32_t { kModelGraph = 7, kModelOpsetImport = 8, kModelFunctions = 25 };
enum OpsetField : std::uint32_t { kOpsetDomain = 1, kOpsetVersion = 2 };
enum GraphField : std::uint32_t { kGraphNode = 1 };
enum NodeField : std::uint32_t { kNodeOpType = 4, kNodeDomain = 7 };
enum FunctionField : std::uint32_t { kFunctionName = 1, kFunctionDomain = 10 };

using OpId = std::pair<std::string, std::string>; // domain ("" for ai.onnx), op type

std::string canonicalDomain(std::string_view domain) { return domain == "ai.onnx" ? std::string() : std::string(domain); }

// What expansion needs to know of a model: its opset per domain (opsetImportsOf), the ops its
// top-level nodes call, and its own functions. False when the bytes are malformed.
struct ModelCalls {
  std::map<std::string, std::int64_t> opsets;
  std::set<OpId> calledOps, localFunctions;
};

bool readDomainAndName(std::string_view message, std::uint32_t domainField, std::uint32_t nameField, OpId& id) {
  std::string_view domain, name;
  bool fine = forEachField(message, [&](std::uint32_t number, WireType type, WireReader& r, bool& ok) {
    if (number == domainField)
      return ok = readText(type, r, domain), true;
    if (number == nameField)
      return ok = readText(type, r, name), true;
    return false;
  });
  id = {canonicalDomain(domain), std::string(name)};
  return fine;
}

bool scanCalls(std::string_view model, ModelCalls& calls) {
  return forEachField(model, [&](std::uint32_t number, WireType type, WireReader& r, bool& ok) {
    std::string_view message;
    if (number != kModelGraph && number != kModelFunctions)
      return false;
    if (!(ok = readText(type, r, message)))
      return true;
    OpId id;
    if (number == kModelFunctions) {
      ok = readDomainAndName(message, kFunctionDomain, kFunctionName, id);
      calls.localFunctions.insert(std::move(id));
    } else {
      ok = forEachField(message, [&](std::uint32_t n, WireType t, WireReader& gr, bool& good) {
        std::string_view node;
        if (n != kGraphNode)
          return false;
        if ((good = readText(t, gr, node)) && (good = readDomainAndName(node, kNodeDomain, kNodeOpType, id)))
          calls.calledOps.insert(std::move(id));
        return true;
      });
    }
    return true;
  });
}

// Whether `op` at the model's opset is a function: one of the model's own, or a schema's.
bool callsFunction(const OpId& op, const ModelCalls& calls) {
  if (calls.localFunctions.count(op))
    return true;
  auto opset = calls.opsets.find(op.first);
  if (opset == calls.opsets.end())
    return false;
  const onnx::OpSchema* schema =
      onnx::OpSchemaRegistry::Schema(op.second, static_cast<int>(opset->second), op.first);
  return schema && (schema->HasFunction() || schema->HasContextDependentFunction());
}

// onnx's inliner types a context-dependent call's operands from the graph's inputs, outputs and
// value_info alone: each initializer gets a value_info entry, and so does the empty name of an
// optional operand left out (an Attention without its mask), with no type, which the function
// builders read as absent. The latter is dropped again after inlining (dropAbsentOperandType).
void declareOperandTypes(onnx::GraphProto& graph) {
  graph.add_value_info()->set_name("");
  std::set<std::string> declared;
  for (const auto* values : {&graph.input(), &graph.value_info()})
    for (const onnx::ValueInfoProto& value : *values)
      declared.insert(value.name());
  for (const onnx::TensorProto& initializer : graph.initializer()) {
    if (declared.count(initializer.name()))
      continue;
    onnx::ValueInfoProto* value = graph.add_value_info();
    value->set_name(initializer.name());
    onnx::TypeProto_Tensor* type = value->mutable_type()->mutable_tensor_type();
    type->set_elem_type(initializer.data_type());
    for (std::int64_t dim : initializer.dims())
      type->mutable_shape()->add_dim()->set_dim_value(dim);
  }
}

void dropAbsentOperandType(onnx::GraphProto& graph) {
  auto& values = *graph.mutable_value_info();
  for (int i = values.size(); i-- > 0;)
    if (values.Get(i).name().empty())
      values.DeleteSubrange(i, 1);
}

} // namespace

std::map<std::string, std::int64_t> opsetImportsOf(std::string_view model) {
  std::map<std::string, std::int64_t> opsets;
  forEachField(model, [&](std::uint32_t number, WireType type, WireReader& r, bool& fine) {
    std::string_view message;
    if (number != kModelOpsetImport || !(fine = readText(type, r, message)))
      return false;
    std::string_view domain;
    std::uint64_t version = 0;
    forEachField(message, [&](std::uint32_t n, WireType t, WireReader& orr, bool& good) {
      if (n == kOpsetDomain)
        return good = readText(t, orr, domain), true;
      if (n == kOpsetVersion && t == WireType::Varint)
        return good = orr.readVarint(version), true;
      return false;
    });
    opsets[canonicalDomain(domain)] = static_cast<std::int64_t>(version);
    return true;
  });
  return opsets;
}

namespace {
std::string namesOf(const std::vector<OpId>& ops) {
  std::string names;
  for (const OpId& op : ops)
    names += (names.empty() ? "" : ", ") + (op.first.empty() ? op.second : op.first + "::" + op.second);
  return names;
}

} // namespace

Expected<std::shared_ptr<const MappedFile>> expandFunctionNodes(const std::shared_ptr<const MappedFile>& file,
                                                               const ExpandFunctionFilter& wanted) {
  if (!wanted)
    return file;
  ModelCalls calls;
  calls.opsets = opsetImportsOf(file->bytes());
  if (!scanCalls(file->bytes(), calls))
    return Error(ErrorCode::ParseError) << "not a valid ONNX model (protobuf parse failed: truncated or corrupt file?)";
  std::vector<OpId> selected;
  for (const OpId& op : calls.calledOps)
    if (wanted(op.first, op.second) && callsFunction(op, calls))
      selected.push_back(op);
  if (selected.empty())
    return file;
  onnx::ModelProto model;
  if (!model.ParseFromArray(file->bytes().data(), static_cast<int>(file->bytes().size())))
    return Error(ErrorCode::ParseError) << "not a valid ONNX model (protobuf parse failed: truncated or corrupt file?)";
  (void)onnx::OpSchemaRegistry::Instance(); // initialized before the fork, not in the child
  Expected<std::string> expanded = runIsolated("onnx's function inliner", [&]() {
    declareOperandTypes(*model.mutable_graph());
    onnx::inliner::FunctionIdVector ids(selected.begin(), selected.end());
    std::unique_ptr<onnx::inliner::FunctionIdSet> toInline = onnx::inliner::FunctionIdSet::Create(std::move(ids));
    onnx::inliner::InlineSelectedFunctions(model, *toInline, onnx::OpSchemaRegistry::Instance());
    dropAbsentOperandType(*model.mutable_graph());
    return model.SerializeAsString();
  });
  if (!expanded)
    return Error(ErrorCode::Unsupported) << "cannot expand " << namesOf(selected) << " into their function bodies: "
                                         << expanded.error().message();
  return MappedFile::fromBytes(file->path(), *expanded);
}

} // namespace cleave::io
