#include "runtime/training/sequence_lengths.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "base/strings.h"
#include "runtime/training/window_sampler.h"

namespace cleave::runtime {

namespace {
std::optional<std::int64_t> positive(std::string_view text) {
  std::optional<std::int64_t> value = parseInteger(text);
  return value && *value >= 1 ? value : std::nullopt;
}
} // namespace

Expected<SequenceLengths> SequenceLengths::parse(std::string_view spec, std::uint64_t seed) {
  SequenceLengths lengths;
  lengths.seed_ = seed;
  auto bad = [&] {
    return Error(ErrorCode::InvalidArgument) << "--seq-lens " << spec
                                             << ": give lengths taken in turn (64,128,96) or a bucketing rule "
                                                "MIN-MAX/STEP (32-128/32: one of 32, 64, 96, 128 drawn per group)";
  };
  if (const std::size_t dash = spec.find('-'); dash != std::string_view::npos) {
    const std::size_t slash = spec.find('/', dash);
    std::optional<std::int64_t> low = positive(spec.substr(0, dash));
    std::optional<std::int64_t> high = positive(spec.substr(dash + 1, slash == std::string_view::npos ? spec.npos : slash - dash - 1));
    std::optional<std::int64_t> step = slash == std::string_view::npos ? std::optional<std::int64_t>(1) : positive(spec.substr(slash + 1));
    if (!low || !high || !step || *low > *high || (*high - *low) % *step != 0 || (*high - *low) / *step >= 1 << 20)
      return bad();
    for (std::int64_t length = *low; length <= *high; length += *step)
      lengths.choices_.push_back(length);
    lengths.drawn_ = true;
    return lengths;
  }
  for (std::string_view part : splitString(spec, ',')) {
    std::optional<std::int64_t> length = positive(part);
    if (!length)
      return bad();
    lengths.choices_.push_back(*length);
  }
  return lengths;
}

std::int64_t SequenceLengths::lengthOf(std::int64_t row) const {
  const auto group = static_cast<std::uint64_t>(row / rowsPerLength_);
  const std::uint64_t pick = drawn_ ? mix(seed_ ^ mix(group + 0x2545f4914f6cdd1dULL)) : group;
  return choices_[pick % choices_.size()];
}

std::int64_t SequenceLengths::longest() const { return *std::max_element(choices_.begin(), choices_.end()); }

double SequenceLengths::meanLength() const {
  return static_cast<double>(std::accumulate(choices_.begin(), choices_.end(), std::int64_t{0})) /
         static_cast<double>(choices_.size());
}

std::string SequenceLengths::describe() const {
  std::string text;
  if (drawn_) {
    text = "lengths " + std::to_string(choices_.front()) + " to " + std::to_string(choices_.back()) +
           (choices_.size() > 1 ? " by " + std::to_string(choices_[1] - choices_[0]) : std::string()) + ", drawn (seed " +
           std::to_string(seed_) + ")";
  } else {
    std::vector<std::string> listed;
    for (std::int64_t length : choices_)
      listed.push_back(std::to_string(length));
    text = "lengths " + joinStrings(listed) + " in turn";
  }
  return text + ", one per " + std::to_string(rowsPerLength_) + " row(s)";
}

} // namespace cleave::runtime
