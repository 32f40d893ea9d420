// runtime/distributed/replica_gradients.h - summing one stage's parameter gradients across the
// data-parallel replicas of its pipeline rank, the way DDP buckets them: the gradients are
// flattened into one contiguous buffer per dtype, whose all-reduce starts on the replicas'
// communicator as soon as the stage's last backward of the step is done and runs on the
// transport's threads while the rest of the schedule computes; after the communicator's finish()
// the sums go back into the gradients.
//
// Guarantees: afterwards every replica holds the same gradients, the sum of every replica's (a
// parameter without a gradient counts as zeros, and gets the sum); every replica starts its sums
// in the same order because the replicas of a pipeline rank run the same actions.
// Complexity: one all-reduce per (stage, dtype); the gradients' bytes copied twice.
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "base/expected.h"
#include "runtime/distributed/communicator.h"

namespace cleave::runtime::distributed {

class ReplicaGradients {
public:
  // Starts the sum across `replicas` of `params`' gradients (one stage's parameters).
  Status start(Communicator& replicas, const std::vector<at::Tensor>& params);
  // Once the replicas' communicator has finished: writes every started sum back into its
  // parameters' gradients and forgets them.
  void writeBack();

private:
  struct Bucket {
    at::Tensor flat;                // the gradients end to end, summed in place
    std::vector<at::Tensor> params; // whose gradients it holds, in order
  };
  std::vector<Bucket> buckets_;
};

} // namespace cleave::runtime::distributed
