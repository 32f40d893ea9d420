#include "runtime/distributed/message_name.h"

namespace cleave::runtime {

namespace {
// The position of (place, value, reader, direction) in the space, for place a microbatch or a
// shape class.
// UINT64_MAX where that overflows (no tag then; an unsigned wrap would alias another name).
std::uint64_t positionOf(const MessageSpace& space, const MessageName& name, std::uint64_t place) {
  std::uint64_t p = 0;
  if (__builtin_mul_overflow(place, space.values, &p) || __builtin_add_overflow(p, name.value, &p) ||
      __builtin_mul_overflow(p, space.readers, &p) || __builtin_add_overflow(p, name.reader, &p) ||
      __builtin_mul_overflow(p, std::uint64_t{2}, &p) || __builtin_add_overflow(p, name.backward ? 1u : 0u, &p) ||
      p == UINT64_MAX)
    return UINT64_MAX;
  return p;
}
} // namespace

Expected<std::uint32_t> messageTag(const MessageSpace& space, const MessageName& name) {
  const std::uint64_t tag = positionOf(space, name, name.microbatch);
  if (tag >= kMessageTagLimit)
    return Error(ErrorCode::Unsupported) << "too many microbatches x values x stages for message tags";
  return static_cast<std::uint32_t>(tag);
}

std::uint64_t messageShapeKey(const MessageSpace& space, const MessageName& name, std::int64_t shapeClass) {
  const std::uint64_t position = positionOf(space, name, static_cast<std::uint64_t>(shapeClass));
  return position == UINT64_MAX ? 0 : 1 + position; // 0: no key (a header with every message)
}

} // namespace cleave::runtime
