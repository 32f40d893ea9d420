// runtime/model/microbatch.h - splitting inputs into microbatches along the batch dimension (dim 0)
// and merging outputs back (the seed's split_args_kwargs_into_chunks / merge_chunks).
// Chunks follow at::chunk: ceil(rows / M) rows each, the last one smaller; a tensor without a
// batch dimension (rank 0) goes whole to every microbatch. Merging concatenates along dim 0,
// so split then merge gives back the same tensors exactly.
// Complexity: splitting makes views, O(M) per tensor and no copies; merging copies each output
// once.
#pragma once

#include "runtime/engine/tensors.h"

namespace cleave::runtime {

// How many microbatches `rows` rows make when asked for M (at::chunk's rule: ceil(rows / M) rows
// each, so 10 rows asked for 6 make 5 of 2): at most M, and M exactly when M divides rows.
std::int64_t microbatchCount(std::int64_t rows, std::int64_t microbatches);

// Fails: InvalidArgument (M < 1, or inputs whose batch sizes differ, or fewer rows than M).
Expected<std::vector<TensorMap>> splitMicrobatches(const TensorMap& inputs, std::int64_t microbatches);
TensorMap mergeMicrobatches(const std::vector<TensorMap>& outputs);

} // namespace cleave::runtime
