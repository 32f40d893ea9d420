#include "plan/plan_file.h"

#include "base/json_writer.h"

#include <charconv>
#include <filesystem>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "base/file_io.h"
#include "base/json.h"

namespace cleave::plan {

namespace {
using json = nlohmann::ordered_json;

bool isCoreKey(std::string_view key) {
  return key == "schema" || key == "version" || key == "kind" || key == "model" || key == "submodules" ||
         key == "outputs" || key == "values";
}

Expected<std::vector<PlanFileInput>> readInputs(const json& list) {
  std::vector<PlanFileInput> inputs;
  for (const json& entry : list)
    inputs.push_back({entry.at("value").get<std::string>(), entry.at("from").get<std::string>()});
  return inputs;
}

Expected<PlanFileSubmodule> readSubmodule(const json& entry, const std::string& dir, const std::string& source) {
  PlanFileSubmodule sub;
  sub.name = entry.at("name").get<std::string>();
  std::string role = entry.at("role").get<std::string>();
  std::optional<SubmoduleRole> parsedRole = kSubmoduleRoles.parse(role);
  if (!parsedRole)
    return Error(ErrorCode::ParseError) << source << ": submodule '" << sub.name << "' has unknown role '" << role
                                        << "' (" << kSubmoduleRoles.choices() << ")";
  sub.role = *parsedRole;
  sub.devices = entry.value("devices", std::vector<std::int64_t>());
  if (entry.contains("file")) {
    sub.file = entry["file"].get<std::string>();
    CLEAVE_TRY(std::string resolved, resolveInsideFolder(dir, sub.file, source + ": submodule '" + sub.name + "' file"));
    (void)resolved;
  }
  CLEAVE_TRY(sub.inputs, readInputs(entry.at("inputs")));
  sub.outputs = entry.at("outputs").get<std::vector<std::string>>();
  sub.nodes = entry.value("nodes", std::vector<std::string>());
  return sub;
}

PlanFileValue readValue(const json& entry) {
  PlanFileValue value;
  value.name = entry.at("name").get<std::string>();
  value.kind = entry.at("kind").get<std::string>();
  value.dtype = entry.value("dtype", "");
  const json& shape = entry.value("shape", json());
  value.rankKnown = shape.is_array();
  for (const json& dim : value.rankKnown ? shape : json::array()) {
    PlanFileDim& d = value.shape.emplace_back();
    if (dim.is_string())
      d.symbol = dim.get<std::string>();
    else if (!dim.is_null())
      d.extent = dim.get<std::int64_t>();
  }
  const json& bytes = entry.value("bytes", json());
  value.bytes = bytes.is_null() ? -1 : bytes.get<std::int64_t>();
  return value;
}

Expected<PlanFile> readDocument(const json& doc, const std::string& dir, const std::string& source) {
  if (!doc.is_object() || doc.value("schema", "") != kPlanSchema)
    return Error(ErrorCode::ParseError) << source << ": not a cleave plan (schema '" << kPlanSchema << "' expected)";
  if (!doc.contains("version") || !doc["version"].is_number_integer() || doc["version"].get<int>() != kPlanSchemaVersion)
    return Error(ErrorCode::Unsupported) << source << ": plan schema version " << toJsonText(doc.value("version", json()))
                                         << " is not supported (cleave reads version " << kPlanSchemaVersion << ")";
  PlanFile plan;
  std::string kind = doc.value("kind", std::string(planKindName(PlanKind::Split)));
  std::optional<PlanKind> parsedKind = kPlanKinds.parse(kind);
  if (!parsedKind)
    return Error(ErrorCode::ParseError) << source << ": unknown plan kind '" << kind << "'";
  plan.kind = *parsedKind;
  plan.model = doc.value("model", "");
  for (const auto& [key, value] : doc.items())
    if (!isCoreKey(key))
      plan.extra[key] = value;
  if (!doc.contains("submodules") || !doc["submodules"].is_array())
    return Error(ErrorCode::ParseError) << source << ": no 'submodules' list";
  for (const json& entry : doc["submodules"]) {
    CLEAVE_TRY(PlanFileSubmodule sub, readSubmodule(entry, dir, source));
    plan.submodules.push_back(std::move(sub));
  }
  CLEAVE_TRY(plan.outputs, readInputs(doc.value("outputs", json::array())));
  for (const json& entry : doc.value("values", json::array()))
    plan.values.push_back(readValue(entry));
  if (Status verified = verifyPlanFile(plan); !verified)
    return std::move(verified.error().withContext(source));
  return plan;
}

// report::valueJson's form of a plan value.
void writeValue(JsonWriter& out, const PlanFileValue& value) {
  out.beginObject();
  out.key("name").string(value.name);
  out.key("kind").string(value.kind);
  if (value.kind == "tensor") {
    out.key("dtype").string(value.dtype);
    out.key("shape");
    if (value.rankKnown) {
      out.beginArray();
      for (const PlanFileDim& dim : value.shape)
        if (dim.extent >= 0)
          out.integer(dim.extent);
        else if (dim.symbol.empty())
          out.null();
        else
          out.string(dim.symbol);
      out.endArray();
    } else {
      out.null();
    }
  }
  out.key("bytes");
  if (value.bytes >= 0)
    out.integer(value.bytes);
  else
    out.null();
  out.endObject();
}
} // namespace

PlanFileValue describeValue(const ir::Graph& graph, ir::ValueId value) {
  PlanFileValue out;
  out.name = graph.valueName(value);
  out.kind = ir::valueKindName(graph.valueKind(value));
  if (graph.valueKind(value) == ir::ValueKind::Tensor) {
    out.dtype = ir::dtypeName(graph.dtype(value));
    out.rankKnown = graph.rankKnown(value);
    for (const ir::DimEntry& dim : out.rankKnown ? graph.dims(value) : std::span<const ir::DimEntry>())
      out.shape.push_back({dim.extent >= 0 ? dim.extent : -1,
                           dim.extent < 0 && dim.symbol != 0 ? std::string(graph.symbolName(dim.symbol)) : ""});
  }
  out.bytes = graph.bytes(value);
  return out;
}

Status verifyPlanFile(const PlanFile& plan) {
  // Hashed: a million-node split's plan has 80k submodules.
  std::unordered_set<std::string_view> names;
  std::unordered_map<std::string_view, std::unordered_set<std::string_view>> made; // submodule -> its outputs
  for (const PlanFileSubmodule& sub : plan.submodules) {
    if (sub.name.empty() || !names.insert(sub.name).second)
      return Error(ErrorCode::InvalidGraph) << "submodule name '" << sub.name << "' is empty or repeated";
    for (const PlanFileInput& input : sub.inputs)
      if (input.from != "input" && !made[input.from].count(input.value))
        return Error(ErrorCode::InvalidGraph) << "submodule '" << sub.name << "' reads '" << input.value << "' from '"
                                              << input.from << "', which no earlier submodule of that name makes";
    made[sub.name].insert(sub.outputs.begin(), sub.outputs.end());
  }
  for (const PlanFileInput& output : plan.outputs)
    if (output.from != "input" && !made[output.from].count(output.value))
      return Error(ErrorCode::InvalidGraph) << "output '" << output.value << "' comes from '" << output.from
                                            << "', which does not make it";
  return {};
}

Expected<PlanFile> parsePlanFile(std::string_view text, const std::string& dir, const std::string& source) {
  CLEAVE_TRY(json doc, parseOrderedJsonInput(text, source));
  return guardJson(source, [&]() { return readDocument(doc, dir, source); });
}

Expected<PlanFile> readPlan(const std::string& dir) {
  std::string path = (std::filesystem::path(dir) / "plan.json").string();
  CLEAVE_TRY(std::string text, readFile(path));
  return parsePlanFile(text, dir, path);
}

namespace {
void writeStrings(JsonWriter& out, const std::vector<std::string>& strings) {
  out.beginArray();
  for (const std::string& text : strings)
    out.string(text);
  out.endArray();
}

void writeInputs(JsonWriter& out, const std::vector<PlanFileInput>& inputs) {
  out.beginArray();
  for (const PlanFileInput& input : inputs) {
    out.beginObject();
    out.key("value").string(input.value);
    out.key("from").string(input.from);
    out.endObject();
  }
  out.endArray();
}

void writeSubmodule(JsonWriter& out, const PlanFileSubmodule& sub) {
  out.beginObject();
  out.key("name").string(sub.name);
  out.key("role").string(kSubmoduleRoles.name(sub.role));
  if (!sub.devices.empty()) {
    out.key("devices").beginArray();
    for (std::int64_t device : sub.devices)
      out.integer(device);
    out.endArray();
  }
  if (!sub.file.empty())
    out.key("file").string(sub.file);
  writeInputs(out.key("inputs"), sub.inputs);
  writeStrings(out.key("outputs"), sub.outputs);
  writeStrings(out.key("nodes"), sub.nodes);
  out.endObject();
}
} // namespace

// Streamed (base/json_writer.h): a million-node plan is tens of megabytes of JSON.
std::string formatPlanFile(const PlanFile& plan) {
  std::size_t expected = 4096 + 128 * plan.values.size();
  for (const PlanFileSubmodule& sub : plan.submodules)
    for (const std::string& node : sub.nodes)
      expected += node.size() + 12; // indent, quotes, comma, newline
  JsonWriter out(expected);
  out.beginObject();
  out.key("schema").string(kPlanSchema);
  out.key("version").integer(kPlanSchemaVersion);
  out.key("kind").string(planKindName(plan.kind));
  out.key("model").string(plan.model);
  for (const auto& [key, value] : plan.extra.items())
    out.key(key).tree(value);
  out.key("submodules").beginArray();
  for (const PlanFileSubmodule& sub : plan.submodules)
    writeSubmodule(out, sub);
  out.endArray();
  writeInputs(out.key("outputs"), plan.outputs);
  if (!plan.values.empty()) {
    out.key("values").beginArray();
    for (const PlanFileValue& value : plan.values)
      writeValue(out, value);
    out.endArray();
  }
  out.endObject();
  return out.finish();
}

bool isPlanDirectory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec) && std::filesystem::exists(std::filesystem::path(path) / "plan.json", ec);
}

Expected<std::map<std::int64_t, std::string>> deviceBackends(const PlanFile& plan, const std::string& dir) {
  std::map<std::int64_t, std::string> names;
  if (!plan.extra.contains("device_backends"))
    return names;
  const Json& entries = plan.extra["device_backends"];
  auto bad = [&] {
    return Error(ErrorCode::ParseError) << dir << "/plan.json: device_backends: expected {\"LOGICAL_ID\": \"BACKEND\", ...}";
  };
  if (!entries.is_object())
    return bad();
  for (const auto& [id, backend] : entries.items()) {
    std::int64_t logicalId = 0;
    auto [end, error] = std::from_chars(id.data(), id.data() + id.size(), logicalId);
    if (!backend.is_string() || error != std::errc() || end != id.data() + id.size())
      return bad();
    names[logicalId] = backend.get<std::string>();
  }
  return names;
}

} // namespace cleave::plan
