// runtime/training/window_sampler.h - which window of a token stream each training row reads.
//
// A row is a window of `length` + 1 consecutive ids: the model's input is its first `length`,
// the targets its last `length` (the same window shifted by one). Rows are numbered across the
// run: row i of step s is s * batch + i (a data-parallel replica r of R reads rows
// s * batch + r * batch / R onward, so the replicas' shares are disjoint), and a row's window
// depends on its number, the seed and the stream's size alone: never on the ranks, the process,
// or what was read before, so a resumed run reads exactly the rows the uninterrupted run would.
//
//   Random (nanoGPT's get_batch): row i starts at uniform(i) mod (N - length), where uniform(i) is
//     splitmix64 of (seed, i): any offset, windows may overlap; the bias of the modulo is below
//     N / 2^64.
//   Epochs: the stream is cut into W = (N - 1) / length windows starting at 0, length, 2 length...
//     (ids past the last are never read); epoch e = i / W reads every window once, in the order of
//     a pseudo-random permutation of [0, W) keyed by (seed, e): a 6-round Feistel network over the
//     next power of 4, walking the cycle back into [0, W). O(1) memory for any W.
// Guarantees: deterministic; Epochs visits each window exactly once per epoch.
// Complexity: start() O(1) (Epochs: expected fewer than 4 Feistel passes, at most W).
#pragma once

#include <cstdint>
#include <string>

#include "base/enum_table.h"
#include "base/expected.h"

namespace cleave::runtime {

// splitmix64's finalizer: a bijective mix of 64 bits (the samplers' and sequence_lengths.h's draws).
std::uint64_t mix(std::uint64_t x);

enum class Sampling : std::uint8_t { Random, Epochs };
inline constexpr auto kSamplings = enumTable<Sampling>({{Sampling::Random, "random"}, {Sampling::Epochs, "epochs"}});

class WindowSampler {
public:
  // Fails: InvalidArgument (the stream holds fewer than length + 1 ids; length < 1).
  static Expected<WindowSampler> create(Sampling kind, std::uint64_t seed, std::int64_t streamIds, std::int64_t length);

  // The id where row `row`'s window starts.
  std::int64_t start(std::int64_t row) const;
  std::int64_t length() const { return length_; }
  Sampling kind() const { return kind_; }
  std::uint64_t seed() const { return seed_; }
  // "random windows of 256 ids, seed 0" / "epochs of 4095 windows of 256 ids, seed 0".
  std::string describe() const;

private:
  std::uint64_t permute(std::uint64_t epoch, std::uint64_t index) const;
  Sampling kind_ = Sampling::Random;
  std::uint64_t seed_ = 0;
  std::int64_t streamIds_ = 0, length_ = 1, windows_ = 1;
  int halfBits_ = 1; // Feistel halves' width: 4^halfBits_ >= windows_
};

} // namespace cleave::runtime
