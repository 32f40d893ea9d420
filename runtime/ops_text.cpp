// runtime/ops_text.cpp - text ops over integer token ids: TfIdfVectorizer. (String tokens need a
// string dtype, which ATen lacks; those models are refused when their inputs are read.)
// Complexity: O(rows * columns * skips * gram lengths * log pool) per run.
#include <algorithm>
#include <map>

#include "runtime/kernel.h"

namespace cleave::runtime {

namespace {
using Outputs = std::vector<at::Tensor>;

// The attribute pool: each n-gram (n = 1.. by ngram_counts' sections) with its output column.
std::map<std::vector<std::int64_t>, std::int64_t> gramColumns(KernelContext& c) {
  std::vector<std::int64_t> pool = c.intsAttr("pool_int64s"), starts = c.intsAttr("ngram_counts"),
                            columns = c.intsAttr("ngram_indexes");
  if (pool.empty())
    throw KernelError("TfIdfVectorizer needs pool_int64s (string pools are not supported)");
  std::map<std::vector<std::int64_t>, std::int64_t> grams;
  std::size_t gram = 0;
  for (std::size_t section = 0; section < starts.size(); ++section) {
    const std::size_t n = section + 1;
    const std::size_t begin = static_cast<std::size_t>(starts[section]);
    const std::size_t end = section + 1 < starts.size() ? static_cast<std::size_t>(starts[section + 1]) : pool.size();
    if (begin > end || end > pool.size() || (end - begin) % n != 0)
      throw KernelError("ngram_counts does not divide pool_int64s into n-grams");
    for (std::size_t at = begin; at < end; at += n, ++gram) {
      if (gram >= columns.size())
        throw KernelError("ngram_indexes has fewer entries than the pool has n-grams");
      grams[std::vector<std::int64_t>(pool.begin() + static_cast<std::ptrdiff_t>(at),
                                      pool.begin() + static_cast<std::ptrdiff_t>(at + n))] = columns[gram];
    }
  }
  return grams;
}

// TF: how often each pool n-gram occurs in a row (n from min_gram_length to max_gram_length, its
// tokens up to max_skip_count apart; a 1-gram counts once per position); IDF: the weight where it
// occurs; TFIDF: count times weight.
Outputs tfIdfVectorizer(KernelContext& c) {
  const at::Tensor x = c.input(0);
  if (x.dim() < 1 || x.dim() > 2 || !at::isIntegralType(x.scalar_type(), false))
    throw KernelError("TfIdfVectorizer takes a 1-D or 2-D tensor of integer tokens");
  const std::map<std::vector<std::int64_t>, std::int64_t> grams = gramColumns(c);
  std::vector<std::int64_t> columns = c.intsAttr("ngram_indexes");
  const std::int64_t width = *std::max_element(columns.begin(), columns.end()) + 1;
  const std::int64_t minN = c.intAttr("min_gram_length", 1), maxN = c.intAttr("max_gram_length", 1),
                     maxSkip = c.intAttr("max_skip_count", 0);
  at::Tensor rows = x.reshape({x.dim() == 1 ? 1 : x.size(0), -1}).to(at::kLong).contiguous();
  const std::int64_t count = rows.size(0), length = rows.size(1);
  at::Tensor out = at::zeros({count, width}, at::TensorOptions().dtype(at::kFloat));
  const std::int64_t* tokens = rows.data_ptr<std::int64_t>();
  float* y = out.data_ptr<float>();
  std::vector<std::int64_t> gram;
  for (std::int64_t r = 0; r < count; ++r)
    for (std::int64_t start = 0; start < length; ++start)
      for (std::int64_t n = std::max<std::int64_t>(minN, 1); n <= maxN; ++n)
        for (std::int64_t skip = 0; skip <= (n == 1 ? 0 : maxSkip); ++skip) {
          if (start + (n - 1) * (skip + 1) >= length)
            break;
          gram.clear();
          for (std::int64_t k = 0; k < n; ++k)
            gram.push_back(tokens[r * length + start + k * (skip + 1)]);
          if (auto found = grams.find(gram); found != grams.end())
            y[r * width + found->second] += 1.0f;
        }
  const std::string mode = c.stringAttr("mode", "TF");
  std::vector<float> weights = c.floatsAttr("weights");
  if (mode != "TF") {
    at::Tensor weight = weights.empty() ? at::ones({width}) : at::zeros({width});
    for (std::size_t g = 0; g < weights.size() && g < columns.size(); ++g)
      weight[columns[g]] = weights[g];
    out = mode == "IDF" ? (out > 0).to(at::kFloat) * weight : out * weight;
  }
  return {x.dim() == 1 ? out.squeeze(0) : out};
}
} // namespace

void registerTextKernels(KernelTable& t) { t.add("TfIdfVectorizer", tfIdfVectorizer); }

} // namespace cleave::runtime
