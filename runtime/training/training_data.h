// runtime/training/training_data.h - where a training run's rows come from: tensors held in memory
// (every model input, rows along dim 0: .npz, .json, a folder), or windows of a token stream
// (token_stream.h) that is never read whole.
//
// Rows are numbered across the run: row i of step s is s * batch + i, and a data-parallel
// replica r of R reads rows s * batch + r * (batch / R) onward (disjoint shares). `rows` depends on
// the row numbers alone, so every rank, a resumed run and a torch reference given the row numbers
// (or, for tokens, the window starts `--log` writes) read the same rows.
//   Tensors: row n is row n mod N of every tensor (the data wraps around).
//   Tokens: row n is the window window_sampler.h assigns it; the token input gets its first
//     `length` ids, the target input (if any) the same window shifted by one, both in the inputs'
//     declared integer type.
//   Ragged rows (--row-lengths): row n is the stored row the sampler picks for n (its index in
//     place of a window's start); a microbatch pads its rows to its longest.
// Guarantees: deterministic; token rows cost O(rows x length) memory, whatever the stream's size.
// Complexity: rows() O(count x row size) (+ log shards per token window).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/expected.h"
#include "ir/graph.h"
#include "runtime/engine/tensors.h"
#include "runtime/training/sequence_lengths.h"
#include "runtime/training/token_stream.h"
#include "runtime/training/window_sampler.h"

namespace cleave::runtime {

class TrainingData {
public:
  virtual ~TrainingData() = default;
  // Rows [first, first + count) of the run's sequence, as model inputs by name (rows along dim 0).
  // Fails (token rows under --seq-lens): rows of different lengths asked for as one rectangle.
  virtual Expected<TensorMap> rows(std::int64_t first, std::int64_t count) const = 0;
  // Those rows split into `microbatches` as splitMicrobatches splits a batch (torch.chunk's
  // sizes): by default rows() split; token rows whose lengths vary give each microbatch its own
  // rectangle of its own length. Fails: what rows() and splitMicrobatches fail with.
  virtual Expected<std::vector<TensorMap>> microbatches(std::int64_t first, std::int64_t count,
                                                        std::int64_t microbatches) const;
  // Each row's length where lengths vary (--seq-lens), else empty: what --log writes.
  virtual std::vector<std::int64_t> windowLengths(std::int64_t first, std::int64_t count) const;
  // Where those rows' windows start in the token stream (empty for tensors): what --log writes.
  virtual std::vector<std::int64_t> windowStarts(std::int64_t first, std::int64_t count) const = 0;
  // Tokens a row holds (its input's length; the mean over --seq-lens' lengths where they vary), 0
  // for tensors: tokens per second is rows x this.
  virtual std::int64_t tokensPerRow() const = 0;
  // What the rows are, without paths (a checkpoint records it: a resumed run on other data or
  // another sampler is refused): "12 rows of 2 tensor(s)", "tokens: 1048576 uint16 ids, random
  // windows of 256 ids, seed 0".
  virtual std::string describe() const = 0;
};

// Rows of in-memory tensors. Fails: InvalidArgument (a tensor without rows).
Expected<std::unique_ptr<TrainingData>> tensorRows(TensorMap data);

struct TokenDataOptions {
  TokenFormat format = TokenFormat::Uint16;
  Sampling sampling = Sampling::Random;
  std::uint64_t seed = 0;
  // The model inputs that get the window and its shifted copy (--token-inputs INPUT[,TARGET]);
  // empty: the model's integer inputs, when it has one or two (in input order).
  std::vector<std::string> inputs;
  std::optional<std::int64_t> length; // --seq-len; default: the token input's static dim 1
  // --seq-lens: rows' lengths vary (sequence_lengths.h; the run groups its rows per step or per
  // microbatch); windows are sampled at the longest and a row reads the first ids of its window.
  std::optional<SequenceLengths> lengths;
  LengthChange lengthChange = LengthChange::Step; // --seq-len-per: which rows share a length
  // --row-lengths: the stream holds ragged rows end to end (documents), this 1-D integer .npy
  // their lengths in ids. A training row is one of them (picked by the sampling: random rows, or
  // epochs visiting each once), its ids but the last the input and but the first the targets; each
  // microbatch is padded to its longest row, inputs with 0 and targets with -100 (cross_entropy's
  // ignore_index), so each is one rectangle of its own length.
  std::string rowLengths;
};

// Token windows of `path` for the model whose graph inputs are `inputNames`, typed by the graphs
// that read them (`graphs`: a model's, or a plan's stages). The model's vocabulary (checked on
// every id read) is the row count of the embedding table that Gathers the token input, when one
// does. Fails: what TokenStream::open and WindowSampler::create fail with; InvalidArgument (an
// input not integer or not [rows, length], an unknown name, no length known, inputs that do not
// say which take tokens).
Expected<std::unique_ptr<TrainingData>> tokenRows(const std::string& path, const TokenDataOptions& options,
                                                  const std::vector<std::string>& inputNames,
                                                  std::span<const ir::Graph* const> graphs);

// `--data PATH` for a model with graph inputs `inputNames` (typed by `graphs`): token windows when
// `tokens` is given (tokenRows), else in-memory tensors (runtime/model/tensor_files.h's formats).
// Fails: what those fail with; InvalidArgument for a .bin file without `tokens` (its ids' type
// cannot be guessed).
Expected<std::unique_ptr<TrainingData>> openTrainingData(const std::string& path,
                                                         const std::optional<TokenDataOptions>& tokens,
                                                         const std::vector<std::string>& inputNames,
                                                         std::span<const ir::Graph* const> graphs);

} // namespace cleave::runtime
