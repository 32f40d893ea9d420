#include "runtime/distributed/replica_gradients.h"

#include <c10/core/GradMode.h>

#include <map>

namespace cleave::runtime::distributed {

Status ReplicaGradients::start(Communicator& replicas, const std::vector<at::Tensor>& params) {
  std::map<at::ScalarType, std::vector<at::Tensor>> byType; // ordered: every replica buckets alike
  for (const at::Tensor& param : params)
    byType[param.scalar_type()].push_back(param);
  c10::NoGradGuard noGrad;
  for (auto& [type, group] : byType) {
    std::vector<at::Tensor> flat;
    for (const at::Tensor& param : group)
      flat.push_back(param.grad().defined() ? param.grad().reshape({-1}) : at::zeros({param.numel()}, param.options()));
    Bucket bucket{at::cat(flat), std::move(group)};
    CLEAVE_CHECK(replicas.postAllReduceSum(bucket.flat));
    buckets_.push_back(std::move(bucket));
  }
  return {};
}

void ReplicaGradients::writeBack() {
  c10::NoGradGuard noGrad;
  for (Bucket& bucket : buckets_) {
    std::int64_t offset = 0;
    for (const at::Tensor& param : bucket.params) {
      at::Tensor sum = bucket.flat.narrow(0, offset, param.numel()).view(param.sizes());
      offset += param.numel();
      if (param.grad().defined())
        param.mutable_grad().copy_(sum);
      else
        param.mutable_grad() = sum.clone();
    }
  }
  buckets_.clear();
}

} // namespace cleave::runtime::distributed
