#include "runtime/training/training_data.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>

#include <ATen/ATen.h>

#include "base/strings.h"
#include "runtime/model/microbatch.h"
#include "runtime/model/tensor_files.h"

namespace cleave::runtime {
namespace {

class TensorRows final : public TrainingData {
public:
  explicit TensorRows(TensorMap data, std::int64_t count) : data_(std::move(data)), count_(count) {}

  Expected<TensorMap> rows(std::int64_t first, std::int64_t count) const override {
    TensorMap rows;
    for (const auto& [name, tensor] : data_) {
      at::Tensor index = (at::arange(count, at::kLong) + first) % tensor.size(0);
      rows[name] = tensor.index_select(0, index);
    }
    return rows;
  }
  std::vector<std::int64_t> windowStarts(std::int64_t, std::int64_t) const override { return {}; }
  std::int64_t tokensPerRow() const override { return 0; }
  std::string describe() const override {
    return std::to_string(count_) + " rows of " + std::to_string(data_.size()) + " tensor(s)";
  }

private:
  TensorMap data_;
  std::int64_t count_; // the first tensor's rows (they may differ: each wraps on its own)
};

// Rows [first, first + count) in `microbatches` chunks of torch.chunk's sizes, each from
// data.rows() on its own (so each is a rectangle of its own length).
Expected<std::vector<TensorMap>> rowsByChunk(const TrainingData& data, std::int64_t first, std::int64_t count,
                                             std::int64_t microbatches) {
  const std::int64_t perChunk = (count + microbatches - 1) / microbatches; // at::chunk's sizes
  std::vector<TensorMap> chunks;
  for (std::int64_t at = 0; at < count; at += perChunk) {
    CLEAVE_TRY(TensorMap chunk, data.rows(first + at, std::min(perChunk, count - at)));
    chunks.push_back(std::move(chunk));
  }
  return chunks;
}

class TokenRows final : public TrainingData {
public:
  TokenRows(TokenStream stream, WindowSampler sampler, std::string input, std::string target, at::ScalarType inputType,
            at::ScalarType targetType, std::int64_t vocabulary, std::optional<SequenceLengths> lengths)
      : stream_(std::move(stream)), sampler_(sampler), input_(std::move(input)), target_(std::move(target)),
        inputType_(inputType), targetType_(targetType), vocabulary_(vocabulary), lengths_(std::move(lengths)) {}

  Expected<TensorMap> rows(std::int64_t first, std::int64_t count) const override {
    CLEAVE_TRY(const std::int64_t length, lengthOfRows(first, count));
    at::Tensor windows = at::empty({count, length + 1}, at::kLong);
    std::int64_t* ids = windows.data_ptr<std::int64_t>();
    for (std::int64_t r = 0; r < count; ++r)
      CLEAVE_CHECK(stream_.read(sampler_.start(first + r), length + 1, ids + r * (length + 1), vocabulary_));
    TensorMap rows;
    rows[input_] = windows.narrow(1, 0, length).to(inputType_).contiguous();
    if (!target_.empty())
      rows[target_] = windows.narrow(1, 1, length).to(targetType_).contiguous();
    return rows;
  }
  std::vector<std::int64_t> windowStarts(std::int64_t first, std::int64_t count) const override {
    std::vector<std::int64_t> starts;
    for (std::int64_t r = 0; r < count; ++r)
      starts.push_back(sampler_.start(first + r));
    return starts;
  }
  Expected<std::vector<TensorMap>> microbatches(std::int64_t first, std::int64_t count,
                                                std::int64_t microbatches) const override {
    if (!lengths_ || microbatches < 1 || count < microbatches)
      return TrainingData::microbatches(first, count, microbatches);
    return rowsByChunk(*this, first, count, microbatches);
  }
  std::vector<std::int64_t> windowLengths(std::int64_t first, std::int64_t count) const override {
    std::vector<std::int64_t> lengths;
    for (std::int64_t r = 0; lengths_ && r < count; ++r)
      lengths.push_back(lengths_->lengthOf(first + r));
    return lengths;
  }
  std::int64_t tokensPerRow() const override {
    return lengths_ ? static_cast<std::int64_t>(std::llround(lengths_->meanLength())) : sampler_.length();
  }
  std::string describe() const override {
    return "tokens: " + stream_.describe() + ", " + sampler_.describe() + (lengths_ ? ", " + lengths_->describe() : "");
  }

private:
  // The one length of rows [first, first + count): the sampler's, or --seq-lens' for them.
  Expected<std::int64_t> lengthOfRows(std::int64_t first, std::int64_t count) const {
    if (!lengths_)
      return sampler_.length();
    const std::int64_t length = lengths_->lengthOf(first);
    for (std::int64_t r = 1; r < count; ++r)
      if (lengths_->lengthOf(first + r) != length)
        return Error(ErrorCode::InvalidArgument)
               << "rows " << first << " to " << first + count - 1 << " have lengths " << length << " and "
               << lengths_->lengthOf(first + r) << ": rows of one rectangle share a length (--seq-lens groups "
               << lengths_->rowsPerLength() << " rows)";
    return length;
  }

  TokenStream stream_;
  WindowSampler sampler_;
  std::string input_, target_;
  at::ScalarType inputType_, targetType_;
  std::int64_t vocabulary_;
  std::optional<SequenceLengths> lengths_;
};

// Ragged rows stored end to end in a token stream, `offsets` (rows + 1, int64) where each begins:
// row n is the stored row the sampler picks for n; a rectangle pads its rows to its longest.
class RaggedRows final : public TrainingData {
public:
  RaggedRows(TokenStream stream, std::vector<std::int64_t> offsets, WindowSampler picks, std::string source, std::string input,
             std::string target, at::ScalarType inputType, at::ScalarType targetType, std::int64_t vocabulary)
      : stream_(std::move(stream)), offsets_(std::move(offsets)), picks_(picks), source_(std::move(source)),
        input_(std::move(input)), target_(std::move(target)), inputType_(inputType), targetType_(targetType),
        vocabulary_(vocabulary) {}

  Expected<TensorMap> rows(std::int64_t first, std::int64_t count) const override {
    std::int64_t width = 1;
    for (std::int64_t r = 0; r < count; ++r)
      width = std::max(width, inputLength(first + r));
    at::Tensor inputs = at::zeros({count, width}, at::kLong), targets = at::full({count, width}, kIgnoredTarget, at::kLong);
    std::vector<std::int64_t> ids;
    for (std::int64_t r = 0; r < count; ++r) {
      const std::int64_t stored = picks_.start(first + r), length = inputLength(first + r);
      ids.resize(static_cast<std::size_t>(length + 1));
      CLEAVE_CHECK(stream_.read(offsets_[static_cast<std::size_t>(stored)], length + 1, ids.data(), vocabulary_));
      at::Tensor row = at::from_blob(ids.data(), {length + 1}, at::kLong);
      inputs[r].narrow(0, 0, length).copy_(row.narrow(0, 0, length));
      targets[r].narrow(0, 0, length).copy_(row.narrow(0, 1, length));
    }
    TensorMap rows;
    rows[input_] = inputs.to(inputType_);
    if (!target_.empty())
      rows[target_] = targets.to(targetType_);
    return rows;
  }
  Expected<std::vector<TensorMap>> microbatches(std::int64_t first, std::int64_t count,
                                                std::int64_t microbatches) const override {
    if (microbatches < 1 || count < microbatches)
      return TrainingData::microbatches(first, count, microbatches);
    return rowsByChunk(*this, first, count, microbatches);
  }
  std::vector<std::int64_t> windowStarts(std::int64_t first, std::int64_t count) const override {
    std::vector<std::int64_t> starts;
    for (std::int64_t r = 0; r < count; ++r)
      starts.push_back(offsets_[static_cast<std::size_t>(picks_.start(first + r))]);
    return starts;
  }
  std::vector<std::int64_t> windowLengths(std::int64_t first, std::int64_t count) const override {
    std::vector<std::int64_t> lengths;
    for (std::int64_t r = 0; r < count; ++r)
      lengths.push_back(inputLength(first + r));
    return lengths;
  }
  std::int64_t tokensPerRow() const override {
    const auto rows = static_cast<std::int64_t>(offsets_.size()) - 1;
    return (offsets_.back() - rows) / rows; // ids less each row's last
  }
  std::string describe() const override {
    return "tokens: " + stream_.describe() + ", " + std::to_string(offsets_.size() - 1) + " ragged rows (" + source_ +
           "), " + std::string(kSamplings.name(picks_.kind())) + ", seed " + std::to_string(picks_.seed());
  }

private:
  static constexpr std::int64_t kIgnoredTarget = -100; // cross_entropy's ignore_index
  // The input ids of row `row`: its stored row's ids but the last.
  std::int64_t inputLength(std::int64_t row) const {
    const auto stored = static_cast<std::size_t>(picks_.start(row));
    return offsets_[stored + 1] - offsets_[stored] - 1;
  }
  TokenStream stream_;
  std::vector<std::int64_t> offsets_; // rows + 1
  WindowSampler picks_; // over the stored rows: a pick is a row's index
  std::string source_;
  std::string input_, target_;
  at::ScalarType inputType_, targetType_;
  std::int64_t vocabulary_;
};

// The type of graph input `name` in the first of `graphs` that has it.
std::optional<ir::ValueType> declaredType(std::span<const ir::Graph* const> graphs, const std::string& name) {
  for (const ir::Graph* graph : graphs)
    if (ir::ValueId value = graph->findValue(name); value != ir::kNoValue)
      return graph->valueType(value);
  return std::nullopt;
}

bool isIntegerInput(const std::optional<ir::ValueType>& type) {
  return type && (type->dtype == ir::DType::I64 || type->dtype == ir::DType::I32);
}

// The rows of an embedding table that Gathers `input` (its vocabulary), 0 when none does.
std::int64_t vocabularyOf(std::span<const ir::Graph* const> graphs, const std::string& input) {
  for (const ir::Graph* graph : graphs) {
    const ir::ValueId value = graph->findValue(input);
    if (value == ir::kNoValue)
      continue;
    for (ir::NodeId user : graph->users(value)) {
      std::span<const ir::ValueId> operands = graph->inputs(user);
      if (graph->opType(user) != "Gather" || operands.size() < 2 || operands[1] != value)
        continue;
      const ir::ValueId table = operands[0];
      if (graph->kind(graph->producer(table)) == ir::NodeKind::Parameter && graph->dims(table).size() == 2 &&
          graph->dims(table)[0].extent > 0)
        return graph->dims(table)[0].extent;
    }
  }
  return 0;
}

// --token-inputs, or the model's integer inputs when there are one or two.
Expected<std::vector<std::string>> tokenInputs(const TokenDataOptions& options, const std::vector<std::string>& names,
                                               std::span<const ir::Graph* const> graphs) {
  if (!options.inputs.empty()) {
    for (const std::string& name : options.inputs)
      if (std::find(names.begin(), names.end(), name) == names.end())
        return Error(ErrorCode::InvalidArgument) << "--token-inputs: the model has no input '" << name << "'";
    return options.inputs;
  }
  std::vector<std::string> integers;
  for (const std::string& name : names)
    if (isIntegerInput(declaredType(graphs, name)))
      integers.push_back(name);
  if (integers.empty() || integers.size() > 2)
    return Error(ErrorCode::InvalidArgument) << "token data: the model has " << integers.size()
                                             << " integer inputs; say which takes the tokens and which their "
                                                "targets with --token-inputs INPUT[,TARGET]";
  return integers;
}

// The window length: --seq-len, else the token input's static dim 1; checked against every token
// input's declared shape [rows, length].
Expected<std::int64_t> windowLength(const TokenDataOptions& options, const std::vector<std::string>& inputs,
                                    std::span<const ir::Graph* const> graphs) {
  std::optional<std::int64_t> length = options.lengths ? options.lengths->longest() : options.length;
  for (const std::string& name : inputs) {
    std::optional<ir::ValueType> type = declaredType(graphs, name);
    if (!isIntegerInput(type))
      return Error(ErrorCode::InvalidArgument) << "token data: input '" << name << "' is not an int64 or int32 tensor";
    if (type->shape.rankKnown && type->shape.dims.size() != 2)
      return Error(ErrorCode::InvalidArgument) << "token data: input '" << name << "' is "
                                               << ir::formatShape(type->shape) << ", not [rows, sequence]";
    const ir::Dim dim = type->shape.rankKnown ? type->shape.dims[1] : ir::Dim{};
    if (dim.isKnown() && options.lengths)
      return Error(ErrorCode::InvalidArgument) << "token data: input '" << name << "' takes sequences of " << dim.extent
                                               << " tokens only; --seq-lens needs a model exported with a dynamic "
                                                  "sequence length";
    if (dim.isKnown() && length && *length != dim.extent)
      return Error(ErrorCode::InvalidArgument) << "token data: input '" << name << "' takes sequences of "
                                               << dim.extent << " tokens, not --seq-len " << *length;
    if (dim.isKnown())
      length = dim.extent;
  }
  if (!length)
    return Error(ErrorCode::InvalidArgument) << "token data: input '" << inputs[0]
                                             << "' has no static sequence length; give --seq-len";
  return *length;
}

} // namespace

Expected<std::vector<TensorMap>> TrainingData::microbatches(std::int64_t first, std::int64_t count,
                                                            std::int64_t microbatches) const {
  CLEAVE_TRY(TensorMap batch, rows(first, count));
  return splitMicrobatches(batch, microbatches);
}

std::vector<std::int64_t> TrainingData::windowLengths(std::int64_t, std::int64_t) const { return {}; }

Expected<std::unique_ptr<TrainingData>> tensorRows(TensorMap data) {
  for (const auto& [name, tensor] : data)
    if (tensor.dim() == 0 || tensor.size(0) == 0)
      return Error(ErrorCode::InvalidArgument) << "data '" << name << "' has no rows (dim 0)";
  const std::int64_t count = data.empty() ? 0 : data.begin()->second.size(0);
  return std::unique_ptr<TrainingData>(new TensorRows(std::move(data), count));
}

namespace {
// Where each of the ragged rows whose lengths `path` holds begins in a stream of `streamIds` ids
// (rows + 1 offsets). Fails: what reading it fails with, InvalidArgument (not 1-D integers, a row
// of fewer than 2 ids, more ids than the stream holds).
Expected<std::vector<std::int64_t>> raggedOffsets(const std::string& path, std::int64_t streamIds) {
  Expected<TensorMap> read = readTensors(path, {"lengths"});
  if (!read)
    return Error(read.error().code()) << "--row-lengths " << path << ": " << read.error().message();
  const at::Tensor& lengths = read->begin()->second;
  if (read->size() != 1 || lengths.dim() != 1 || lengths.numel() == 0 || !at::isIntegralType(lengths.scalar_type(), false))
    return Error(ErrorCode::InvalidArgument) << "--row-lengths " << path << ": not a 1-D array of integer lengths";
  std::vector<std::int64_t> offsets{0};
  const at::Tensor wide = lengths.to(at::kLong).contiguous();
  for (std::int64_t r = 0; r < wide.numel(); ++r) {
    const std::int64_t length = wide.data_ptr<std::int64_t>()[r];
    if (length < 2)
      return Error(ErrorCode::InvalidArgument) << "--row-lengths " << path << ": row " << r << " has " << length
                                               << " ids; a row needs at least 2 (an input and its target)";
    offsets.push_back(offsets.back() + length);
    if (offsets.back() > streamIds)
      return Error(ErrorCode::InvalidArgument) << "--row-lengths " << path << ": rows 0 to " << r << " take "
                                               << offsets.back() << " ids; the stream holds " << streamIds;
  }
  return offsets;
}

// Ragged rows (--row-lengths) for the token inputs `inputs`, whose sequence dim must be dynamic.
Expected<std::unique_ptr<TrainingData>> raggedRows(const std::string& path, const TokenDataOptions& options,
                                                   const std::vector<std::string>& inputs,
                                                   std::span<const ir::Graph* const> graphs) {
  std::array<at::ScalarType, 2> types{};
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    std::optional<ir::ValueType> type = declaredType(graphs, inputs[k]);
    if (!isIntegerInput(type) || (type->shape.rankKnown && type->shape.dims.size() != 2))
      return Error(ErrorCode::InvalidArgument) << "token data: input '" << inputs[k] << "' is not [rows, sequence] integers";
    if (type->shape.rankKnown && type->shape.dims[1].isKnown())
      return Error(ErrorCode::InvalidArgument) << "token data: input '" << inputs[k] << "' takes sequences of "
                                               << type->shape.dims[1].extent << " tokens only; ragged rows need a "
                                               << "model exported with a dynamic sequence length";
    CLEAVE_TRY(types[k], scalarTypeOf(type->dtype));
  }
  CLEAVE_TRY(TokenStream stream, TokenStream::open(path, options.format));
  CLEAVE_TRY(std::vector<std::int64_t> offsets, raggedOffsets(options.rowLengths, stream.size()));
  const auto rows = static_cast<std::int64_t>(offsets.size()) - 1;
  CLEAVE_TRY(WindowSampler picks, WindowSampler::create(options.sampling, options.seed, rows + 1, 1));
  const std::string target = inputs.size() > 1 ? inputs[1] : std::string();
  return std::unique_ptr<TrainingData>(new RaggedRows(std::move(stream), std::move(offsets), picks,
                                                      std::filesystem::path(options.rowLengths).filename().string(),
                                                      inputs[0], target, types[0], target.empty() ? types[0] : types[1],
                                                      vocabularyOf(graphs, inputs[0])));
}
} // namespace

Expected<std::unique_ptr<TrainingData>> tokenRows(const std::string& path, const TokenDataOptions& options,
                                                  const std::vector<std::string>& inputNames,
                                                  std::span<const ir::Graph* const> graphs) {
  CLEAVE_TRY(std::vector<std::string> inputs, tokenInputs(options, inputNames, graphs));
  if (inputs.size() > 2)
    return Error(ErrorCode::InvalidArgument) << "--token-inputs names at most two inputs: the tokens and their targets";
  if (!options.rowLengths.empty())
    return raggedRows(path, options, inputs, graphs);
  CLEAVE_TRY(const std::int64_t length, windowLength(options, inputs, graphs));
  CLEAVE_TRY(TokenStream stream, TokenStream::open(path, options.format));
  Expected<WindowSampler> sampler = WindowSampler::create(options.sampling, options.seed, stream.size(), length);
  if (!sampler)
    return std::move(sampler.error().withContext(path));
  CLEAVE_TRY(at::ScalarType inputType, scalarTypeOf(declaredType(graphs, inputs[0])->dtype));
  const std::string target = inputs.size() > 1 ? inputs[1] : std::string();
  at::ScalarType targetType = inputType;
  if (!target.empty()) {
    CLEAVE_TRY(targetType, scalarTypeOf(declaredType(graphs, target)->dtype));
  }
  return std::unique_ptr<TrainingData>(new TokenRows(std::move(stream), *sampler, inputs[0], target, inputType,
                                                     targetType, vocabularyOf(graphs, inputs[0]), options.lengths));
}

Expected<std::unique_ptr<TrainingData>> openTrainingData(const std::string& path,
                                                         const std::optional<TokenDataOptions>& tokens,
                                                         const std::vector<std::string>& inputNames,
                                                         std::span<const ir::Graph* const> graphs) {
  if (tokens)
    return tokenRows(path, *tokens, inputNames, graphs);
  if (path.ends_with(".bin"))
    return Error(ErrorCode::InvalidArgument) << path << ": a token file: say its ids' type with --tokens uint16|uint32";
  CLEAVE_TRY(TensorMap data, readTensors(path, inputNames));
  return tensorRows(std::move(data));
}

} // namespace cleave::runtime
