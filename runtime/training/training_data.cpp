#include "runtime/training/training_data.h"

#include <algorithm>
#include <cmath>

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
    const std::int64_t perChunk = (count + microbatches - 1) / microbatches; // at::chunk's sizes
    std::vector<TensorMap> chunks;
    for (std::int64_t at = 0; at < count; at += perChunk) {
      CLEAVE_TRY(TensorMap chunk, rows(first + at, std::min(perChunk, count - at)));
      chunks.push_back(std::move(chunk));
    }
    return chunks;
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

Expected<std::unique_ptr<TrainingData>> tokenRows(const std::string& path, const TokenDataOptions& options,
                                                  const std::vector<std::string>& inputNames,
                                                  std::span<const ir::Graph* const> graphs) {
  CLEAVE_TRY(std::vector<std::string> inputs, tokenInputs(options, inputNames, graphs));
  if (inputs.size() > 2)
    return Error(ErrorCode::InvalidArgument) << "--token-inputs names at most two inputs: the tokens and their targets";
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
