// pipeline/receive_buffer_model.h - how many bytes of receive buffers each rank of a schedule holds
// at once when it reuses them (runtime/distributed/receive_buffers.h), predicted from the schedule
// alone: which messages a rank receives, when it posts their receives, and when it lets them go.
//
// The model, as cleave's pipeline trainer runs: a rank posts each channel's receives in its
// sender's order, as far as the messages the next `lookahead` compute actions read
// (nccl_streams.h's ChannelStreams; the trainer posts before each action); a posted receive takes
// a buffer of its message's bytes. A forward's input from another rank is held until the stage's
// backward of that microbatch is done (its B, or its W when the backward is split: W's saved
// tensors may read it); a gradient until the B or I that reads it. Messages follow the plan's
// edges: `bytes` from stage `from`'s forward to stage `to` per microbatch, its gradient back the
// same bytes; an edge between stages of one rank is no message.
// Guarantees: deterministic; the peak is taken, as the runtime measures it, when a receive is posted.
// Complexity: O(A + M log M) for A compute actions and M messages.
#pragma once

#include <cstdint>
#include <vector>

#include "base/expected.h"
#include "pipeline/schedule.h"

namespace cleave::pipeline {

struct StageEdge {
  std::uint32_t from = 0, to = 0; // from < to
  std::int64_t bytes = 0;         // per microbatch
};

// "0>1:4096,1>2:4096,0>3:24" (--message-bytes). Fails: InvalidArgument naming the part.
Expected<std::vector<StageEdge>> parseStageEdges(std::string_view text, std::uint32_t stages);

// Per rank, the most receive-buffer bytes held at once. Fails: InvalidArgument (an edge outside
// the schedule's stages or not forward).
Expected<std::vector<std::int64_t>> receiveBufferPeaks(const Schedule& schedule, const std::vector<StageEdge>& edges,
                                                       std::uint32_t lookahead);

} // namespace cleave::pipeline
