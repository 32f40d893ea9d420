// base/checked_math.h - overflow-checked integer arithmetic for sizes that come from input.
// Shapes, byte counts and memory sums read from a model or a JSON file can be anything; every
// product or sum of them goes through these, which report overflow instead of wrapping (signed
// overflow is undefined behaviour). O(1) each; checkedProduct is O(n).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace cleave {

inline std::optional<std::int64_t> checkedMul(std::int64_t a, std::int64_t b) {
  std::int64_t result;
  if (__builtin_mul_overflow(a, b, &result))
    return std::nullopt;
  return result;
}

inline std::optional<std::int64_t> checkedAdd(std::int64_t a, std::int64_t b) {
  std::int64_t result;
  if (__builtin_add_overflow(a, b, &result))
    return std::nullopt;
  return result;
}

// The product of `dims` (an element count), or nullopt when it overflows int64.
inline std::optional<std::int64_t> checkedProduct(std::span<const std::int64_t> dims) {
  std::int64_t product = 1;
  for (std::int64_t dim : dims) {
    std::optional<std::int64_t> next = checkedMul(product, dim);
    if (!next)
      return std::nullopt;
    product = *next;
  }
  return product;
}

} // namespace cleave
