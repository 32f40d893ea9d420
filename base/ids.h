// base/ids.h - strongly typed dense ids and id-indexed side arrays.
// Ids are indexes into the graph's flat arrays; the enums keep NodeId and ValueId from mixing.
// Guarantee: an id of one kind does not convert to another. Complexity: an IdVector access is one
// array index, O(1).
#pragma once

#include <cstdint>
#include <vector>

namespace cleave {

template <typename Id> constexpr std::uint32_t index(Id id) { return static_cast<std::uint32_t>(id); }

// A half-open range [begin, end) into one of the graph's CSR arrays.
struct IdRange {
  std::uint32_t begin = 0, end = 0;
  std::uint32_t size() const { return end - begin; }
  bool empty() const { return begin == end; }
  friend bool operator==(const IdRange&, const IdRange&) = default;
};

// Per-pass side data: a vector indexed by a typed id (never a map keyed by pointers).
template <typename Id, typename T> class IdVector {
public:
  IdVector() = default;
  explicit IdVector(std::size_t size, const T& fill = T()) : items_(size, fill) {}
  T& operator[](Id id) { return items_[index(id)]; }
  const T& operator[](Id id) const { return items_[index(id)]; }
  std::size_t size() const { return items_.size(); }
  auto begin() { return items_.begin(); }
  auto end() { return items_.end(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  friend bool operator==(const IdVector&, const IdVector&) = default;
  std::vector<T>& raw() { return items_; }
  const std::vector<T>& raw() const { return items_; }

private:
  std::vector<T> items_;
};

} // namespace cleave
