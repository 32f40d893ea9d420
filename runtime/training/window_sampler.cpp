#include "runtime/training/window_sampler.h"

namespace cleave::runtime {

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

Expected<WindowSampler> WindowSampler::create(Sampling kind, std::uint64_t seed, std::int64_t streamIds,
                                              std::int64_t length) {
  if (length < 1)
    return Error(ErrorCode::InvalidArgument) << "a window of " << length << " ids";
  if (streamIds < length + 1)
    return Error(ErrorCode::InvalidArgument) << "the token stream holds " << streamIds << " ids: fewer than one window of "
                                             << length << " inputs and their shifted targets (" << length + 1 << " ids)";
  WindowSampler sampler;
  sampler.kind_ = kind;
  sampler.seed_ = seed;
  sampler.streamIds_ = streamIds;
  sampler.length_ = length;
  sampler.windows_ = (streamIds - 1) / length;
  while ((std::int64_t{1} << (2 * sampler.halfBits_)) < sampler.windows_)
    ++sampler.halfBits_;
  return sampler;
}

std::uint64_t WindowSampler::permute(std::uint64_t epoch, std::uint64_t index) const {
  const std::uint64_t mask = (std::uint64_t{1} << halfBits_) - 1;
  const std::uint64_t key = mix(seed_ ^ mix(epoch + 0x5851f42d4c957f2dULL));
  do { // cycle-walking: a permutation of [0, 4^halfBits) restricted to [0, windows)
    std::uint64_t left = index >> halfBits_, right = index & mask;
    for (std::uint64_t round = 0; round < 6; ++round) {
      const std::uint64_t next = left ^ (mix(key ^ (round << 56) ^ right) & mask);
      left = right;
      right = next;
    }
    index = (left << halfBits_) | right;
  } while (index >= static_cast<std::uint64_t>(windows_));
  return index;
}

std::int64_t WindowSampler::start(std::int64_t row) const {
  const auto r = static_cast<std::uint64_t>(row);
  if (kind_ == Sampling::Random)
    return static_cast<std::int64_t>(mix(seed_ ^ mix(r)) % static_cast<std::uint64_t>(streamIds_ - length_));
  const auto windows = static_cast<std::uint64_t>(windows_);
  return static_cast<std::int64_t>(permute(r / windows, r % windows)) * length_;
}

std::string WindowSampler::describe() const {
  std::string what = kind_ == Sampling::Random ? "random windows"
                                               : "epochs of " + std::to_string(windows_) + " windows";
  return what + " of " + std::to_string(length_) + " ids, seed " + std::to_string(seed_);
}

} // namespace cleave::runtime
