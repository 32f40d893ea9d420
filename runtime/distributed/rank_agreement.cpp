#include "runtime/distributed/rank_agreement.h"

#include <chrono>
#include <map>
#include <set>

#include "base/strings.h"

namespace cleave::runtime::distributed {

namespace {
// A value's type as plan.json has it: "f32[batch,64]" ("?" where a dim or the rank is unknown).
std::string formatValueType(const plan::PlanFileValue& value) {
  std::string text = value.kind == "tensor" ? value.dtype : value.kind + " " + value.dtype;
  if (!value.rankKnown)
    return text + "[?]";
  std::vector<std::string> dims;
  for (const plan::PlanFileDim& dim : value.shape)
    dims.push_back(dim.extent >= 0 ? std::to_string(dim.extent) : dim.symbol.empty() ? "?" : dim.symbol);
  return text + "[" + joinStrings(dims, ",") + "]";
}

// A term's value in a one-line verdict: long ones (a list of stages) cut short.
std::string shortened(const std::string& value) {
  constexpr std::size_t kShown = 120;
  return value.size() <= kShown ? value : value.substr(0, kShown) + "...";
}
} // namespace

void RankTerms::add(std::string what, std::string value) { terms_.emplace_back(std::move(what), std::move(value)); }

void RankTerms::append(const RankTerms& more) { terms_.insert(terms_.end(), more.terms_.begin(), more.terms_.end()); }

std::string RankTerms::encode() const {
  std::string text;
  for (const auto& [what, value] : terms_)
    for (const std::string* part : {&what, &value})
      text += std::to_string(part->size()) + ":" + *part;
  return text;
}

Expected<RankTerms> RankTerms::parse(const std::string& text) {
  RankTerms parsed;
  std::vector<std::string> parts;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t colon = text.find(':', at);
    std::size_t length = 0;
    if (colon == std::string::npos || colon == at || colon - at > 12 ||
        text.find_first_not_of("0123456789", at) != colon || (length = std::stoull(text.substr(at, colon - at))) > text.size() - colon - 1)
      return Error(ErrorCode::ParseError) << "a rank's terms are malformed at byte " << at;
    parts.push_back(text.substr(colon + 1, length));
    at = colon + 1 + length;
  }
  if (parts.size() % 2)
    return Error(ErrorCode::ParseError) << "a rank's terms end with a term without its value";
  for (std::size_t i = 0; i < parts.size(); i += 2)
    parsed.add(std::move(parts[i]), std::move(parts[i + 1]));
  return parsed;
}

RankTerms planTerms(const plan::PlanFile& plan, const std::vector<int>& stageRanks) {
  RankTerms terms;
  std::vector<std::string> names, placement;
  std::map<std::string, int> producer; // value -> the stage making it
  for (std::size_t s = 0; s < plan.submodules.size(); ++s) {
    const plan::PlanFileSubmodule& stage = plan.submodules[s];
    names.push_back(stage.name);
    placement.push_back(stage.name + " on rank " + std::to_string(s < stageRanks.size() ? stageRanks[s] : -1));
    for (const std::string& output : stage.outputs)
      producer.emplace(output, static_cast<int>(s));
  }
  terms.add("the plan's stages", joinStrings(names));
  terms.add("the stage placement", joinStrings(placement));
  std::map<std::string, std::vector<std::string>> crossing; // value -> its readers on other ranks
  for (std::size_t s = 0; s < plan.submodules.size(); ++s)
    for (const plan::PlanFileInput& input : plan.submodules[s].inputs) {
      auto made = producer.find(input.value);
      if (made == producer.end() || s >= stageRanks.size() || static_cast<std::size_t>(made->second) >= stageRanks.size() ||
          stageRanks[s] == stageRanks[static_cast<std::size_t>(made->second)])
        continue;
      crossing[input.value].push_back(plan.submodules[s].name);
    }
  std::map<std::string, const plan::PlanFileValue*> types;
  for (const plan::PlanFileValue& value : plan.values)
    types.emplace(value.name, &value);
  for (const auto& [value, readers] : crossing) {
    auto type = types.find(value);
    terms.add("the value '" + value + "' between ranks",
              (type == types.end() ? std::string("?") : formatValueType(*type->second)) + " from " +
                  plan.submodules[static_cast<std::size_t>(producer.at(value))].name + " to " + joinStrings(readers));
  }
  terms.add("the plan (plan.json's digest)", hexDigest(plan::formatPlanFile(plan)));
  return terms;
}

std::string firstDisagreement(const std::vector<RankTerms>& byRank) {
  if (byRank.empty())
    return {};
  const auto& reference = byRank[0].terms();
  for (std::size_t r = 1; r < byRank.size(); ++r) {
    std::map<std::string, std::string> theirs(byRank[r].terms().begin(), byRank[r].terms().end());
    std::set<std::string> ours;
    const std::string pair = "ranks 0 and " + std::to_string(r) + " disagree on ";
    for (const auto& [what, value] : reference) {
      ours.insert(what);
      auto found = theirs.find(what);
      if (found == theirs.end())
        return pair + what + ": " + shortened(value) + " on rank 0, none on rank " + std::to_string(r);
      if (found->second != value)
        return pair + what + ": " + shortened(value) + " on rank 0, " + shortened(found->second) + " on rank " +
               std::to_string(r);
    }
    for (const auto& [what, value] : byRank[r].terms())
      if (!ours.count(what))
        return pair + what + ": none on rank 0, " + shortened(value) + " on rank " + std::to_string(r);
  }
  return {};
}

Expected<double> agreeBeforeStart(Communicator& comm, const RankTerms& terms) {
  const auto started = std::chrono::steady_clock::now();
  CLEAVE_TRY(std::vector<std::string> texts, comm.exchangeText("terms", terms.encode()));
  std::vector<RankTerms> byRank;
  for (std::size_t r = 0; r < texts.size(); ++r) {
    Expected<RankTerms> parsed = RankTerms::parse(texts[r]);
    if (!parsed)
      return Error(ErrorCode::InvalidArgument) << "rank " << r << " is not a cleave of this version: "
                                               << parsed.error().message();
    byRank.push_back(std::move(*parsed));
  }
  if (std::string verdict = firstDisagreement(byRank); !verdict.empty())
    return Error(ErrorCode::InvalidArgument) << verdict
                                             << " (checked before the first message: every rank must run the same "
                                                "plan, schedule and options)";
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

} // namespace cleave::runtime::distributed
