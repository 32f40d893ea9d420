#include "io/fixed_parameters.h"

#include <fnmatch.h>

#include <algorithm>
#include <map>

#include "base/json.h"

namespace cleave::io {

namespace {
bool matchesAny(const std::vector<std::string>& patterns, const std::string& name, std::vector<bool>& matched) {
  bool any = false;
  for (std::size_t i = 0; i < patterns.size(); ++i)
    if (::fnmatch(patterns[i].c_str(), name.c_str(), 0) == 0)
      any = matched[i] = true;
  return any;
}

Status applyPatterns(ir::GraphBuilder& builder, const FixedPatterns& patterns) {
  std::vector<bool> frozenMatched(patterns.frozen.size()), trainableMatched(patterns.trainable.size());
  std::vector<std::string> freeze;
  for (const ir::Parameter& param : builder.parameters()) {
    if (!ir::isFloating(param.dtype) || param.isBuffer() || !param.aliasOf.empty())
      continue;
    const bool frozen = matchesAny(patterns.frozen, param.name, frozenMatched);
    const bool listed = matchesAny(patterns.trainable, param.name, trainableMatched);
    if (frozen || (!patterns.trainable.empty() && !listed))
      freeze.push_back(param.name);
  }
  for (std::size_t i = 0; i < patterns.frozen.size(); ++i)
    if (!frozenMatched[i])
      return Error(ErrorCode::InvalidArgument) << "--frozen '" << patterns.frozen[i] << "' matches no floating tensor that trains";
  for (std::size_t i = 0; i < patterns.trainable.size(); ++i)
    if (!trainableMatched[i])
      return Error(ErrorCode::InvalidArgument) << "--trainable '" << patterns.trainable[i]
                                               << "' matches no floating tensor that trains";
  for (const std::string& name : freeze)
    builder.markFixed(name, ir::Fixed::Frozen);
  return {};
}

// The model's own entry, if any.
Status applyEntry(ir::GraphBuilder& builder) {
  ir::ModelInfo& info = builder.modelInfo();
  const std::string* value = nullptr;
  for (const auto& [key, text] : info.metadata)
    if (key == kFixedParametersKey)
      value = &text;
  if (!value)
    return {};
  auto bad = [](std::string_view what) {
    return Error(ErrorCode::ParseError) << "metadata '" << kFixedParametersKey << "': " << what;
  };
  CLEAVE_TRY(nlohmann::json entry, parseJsonInput(*value, "metadata '" + std::string(kFixedParametersKey) + "'"));
  if (!entry.is_object() || entry.value("version", nlohmann::json()) != nlohmann::json(1))
    return bad("expected {\"version\": 1, \"buffers_listed\": BOOL, \"fixed\": {NAME: REASON}}");
  const nlohmann::json listed = entry.value("buffers_listed", nlohmann::json(false));
  const nlohmann::json fixed = entry.value("fixed", nlohmann::json::object());
  if (!listed.is_boolean() || !fixed.is_object())
    return bad("'buffers_listed' must be a boolean and 'fixed' an object");
  for (const auto& [name, reason] : fixed.items()) {
    std::optional<ir::Fixed> why = reason.is_string() ? ir::kFixedReasons.parse(reason.get<std::string>()) : std::nullopt;
    if (!why || *why == ir::Fixed::Trains)
      return bad("'" + name + "': the reason must be " + ir::kFixedReasons.choices() + " but 'trains'");
    builder.markFixed(name, *why); // a name the model lacks: folded away by its exporter
  }
  info.buffersListed = listed.get<bool>();
  if (const auto untrainable = entry.find("untrainable"); untrainable != entry.end()) {
    if (!untrainable->is_string())
      return bad("'untrainable' must be a string");
    info.untrainable = untrainable->get<std::string>();
  }
  return {};
}
} // namespace

std::unordered_set<std::string> listedFixedTensors(const ir::ModelInfo& info) {
  std::unordered_set<std::string> names;
  for (const auto& [key, text] : info.metadata) {
    if (key != kFixedParametersKey)
      continue;
    Expected<nlohmann::json> entry = parseJsonInput(text, kFixedParametersKey); // depth-checked
    if (!entry || !entry->is_object())
      continue;
    const auto fixed = entry->find("fixed");
    if (fixed != entry->end() && fixed->is_object())
      for (const auto& item : fixed->items())
        names.insert(item.key());
  }
  return names;
}

Status applyFixedParameters(ir::GraphBuilder& builder, const FixedPatterns& patterns) {
  CLEAVE_CHECK(applyEntry(builder));
  return applyPatterns(builder, patterns);
}

std::optional<std::string> fixedParametersEntry(const ir::Graph& graph) {
  std::map<std::string, std::string> fixed; // sorted: the same graph writes the same bytes
  for (std::uint32_t p = 0; p < graph.numParameters(); ++p) {
    const ir::Parameter& param = graph.parameter(ir::ParamId{p});
    // A Constant node and a running statistic are found again by the nodes that hold and read
    // them; a constant written as an initializer (the dynamo exporter's literal) is not.
    const bool foundAgain = param.fixed == ir::Fixed::RunningStatistic ||
                            (param.fixed == ir::Fixed::Constant && !param.sourceNode.empty());
    if (param.isBuffer() && !foundAgain)
      fixed.emplace(param.name, std::string(ir::kFixedReasons.name(param.fixed)));
  }
  const ir::ModelInfo& info = graph.modelInfo();
  if (fixed.empty() && !info.buffersListed && info.untrainable.empty())
    return std::nullopt;
  Json entry = {{"version", 1}, {"buffers_listed", info.buffersListed}, {"fixed", Json(fixed)}};
  if (!info.untrainable.empty())
    entry["untrainable"] = info.untrainable;
  return entry.dump();
}

} // namespace cleave::io
