// runtime/distributed/message_name.h - the one way ranks name a message: its tag and its shape
// key (communicator.h), from what both sides know of it: the microbatch, the value it carries (a
// plan's value id), the stage that reads it and its direction. The distributed runner sends each
// value forward once per reading rank (reader 0, forward); the pipeline trainer tells the reading
// stages and the directions apart.
//
// Guarantees: distinct names in one space get distinct tags and distinct keys; a key is never 0
// (0 is "no key": a header with every message) but for a name too large to key. Tags stay below 2^29, above which callers keep
// their own (the end of a run's gathers), or the name fails.
// Complexity: O(1).
#pragma once

#include <cstdint>

#include "base/expected.h"

namespace cleave::runtime {

// How many values and reading stages the names of one run range over.
struct MessageSpace {
  std::uint64_t values = 1, readers = 1;
};

struct MessageName {
  std::uint64_t microbatch = 0, value = 0, reader = 0;
  bool backward = false;
};

inline constexpr std::uint64_t kMessageTagLimit = std::uint64_t(1) << 29;

// Fails: Unsupported (more microbatches x values x readers than tags).
Expected<std::uint32_t> messageTag(const MessageSpace& space, const MessageName& name);

// The shape key of a message whose microbatch is of shape class `shapeClass` (a number both ranks
// give microbatches whose inputs have the same shapes: their row count where only rows vary, or
// plan_shapes.h's ShapeClasses): the same for every microbatch of that class, as the value's shape
// follows it; 0 (no key) for a name past the space's range.
std::uint64_t messageShapeKey(const MessageSpace& space, const MessageName& name, std::int64_t shapeClass);

} // namespace cleave::runtime
