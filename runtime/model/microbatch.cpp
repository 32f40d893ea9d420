#include "runtime/model/microbatch.h"

namespace cleave::runtime {

std::int64_t microbatchCount(std::int64_t rows, std::int64_t microbatches) {
  const std::int64_t perChunk = (rows + microbatches - 1) / microbatches;
  return perChunk ? (rows + perChunk - 1) / perChunk : 0;
}

Expected<std::vector<TensorMap>> splitMicrobatches(const TensorMap& inputs, std::int64_t microbatches) {
  if (microbatches < 1)
    return Error(ErrorCode::InvalidArgument) << "microbatches must be at least 1";
  std::optional<std::int64_t> rows;
  for (const auto& [name, tensor] : inputs) {
    if (tensor.dim() == 0)
      continue;
    if (rows && *rows != tensor.size(0))
      return Error(ErrorCode::InvalidArgument) << "input '" << name << "' has " << tensor.size(0)
                                               << " rows, other inputs " << *rows;
    rows = tensor.size(0);
  }
  if (rows && *rows < microbatches)
    return Error(ErrorCode::InvalidArgument) << *rows << " rows cannot make " << microbatches << " microbatches";
  std::int64_t chunks = rows ? microbatchCount(*rows, microbatches) : 1;
  std::vector<TensorMap> split(static_cast<std::size_t>(rows ? chunks : microbatches));
  for (const auto& [name, tensor] : inputs) {
    if (tensor.dim() == 0) {
      for (TensorMap& chunk : split)
        chunk[name] = tensor;
      continue;
    }
    std::vector<at::Tensor> parts = tensor.chunk(microbatches, 0);
    for (std::size_t i = 0; i < split.size(); ++i)
      split[i][name] = parts[i];
  }
  return split;
}

TensorMap mergeMicrobatches(const std::vector<TensorMap>& outputs) {
  TensorMap merged;
  if (outputs.empty())
    return merged;
  for (const auto& [name, first] : outputs.front()) {
    if (first.dim() == 0) {
      merged[name] = first;
      continue;
    }
    std::vector<at::Tensor> parts;
    for (const TensorMap& chunk : outputs)
      parts.push_back(chunk.at(name));
    merged[name] = at::cat(parts, 0);
  }
  return merged;
}

} // namespace cleave::runtime
