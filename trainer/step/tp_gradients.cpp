// Tensor-parallel gradient finishing (see tp_gradients.h).
#include "trainer/step/tp_gradients.h"

#include <algorithm>

#include "common/error.h"
#include "parallel/fsdp_observer.h"
#include "parallel/tensor_parallel.h"
#include "trainer/components/optimizer.h"

namespace titan {

TpGradientPlan::TpGradientPlan(const ParallelizedModel& plan) : partial_(plan.tp_partial_grads) {
  TITAN_CHECK(plan.tp_shard_dims.size() == plan.tp_sharded.size() &&
                  plan.tp_shard_replicas.size() == plan.tp_sharded.size(),
              "tensor parallel plan: ", plan.tp_sharded.size(), " sharded parameters with ", plan.tp_shard_dims.size(),
              " dims and ", plan.tp_shard_replicas.size(), " replica counts");
  for (size_t i = 0; i < plan.tp_sharded.size(); ++i)
    sharded_.push_back({plan.tp_sharded[i], plan.tp_shard_dims[i], plan.tp_shard_replicas[i]});
}

void TpGradientPlan::finish(Communicator& tp, const Fsdp* fsdp) const {
  if (!partial_.empty()) {
    std::vector<torch::Tensor> grads;
    for (const auto& p : partial_) grads.push_back(p.grad());
    note_shard_collective(fsdp, "all_reduce", tp, partial_, grads);
    tp.all_reduce(grads, ReduceOp::kSum)->wait();
  }
  std::vector<torch::Tensor> replicated_blocks;  // KV heads replicated over tp
  int64_t replicas = 1;
  for (const Sharded& s : sharded_) {
    if (s.replicas == 1 || !s.param.grad().defined()) continue;
    replicas = s.replicas;
    replicated_blocks.push_back(s.param.mutable_grad());
  }
  // Its zero-padded slots are sized by the shard with no tensor read (simulation: not resized).
  if (FsdpObserver* o = fsdp_observer(); o && fsdp && replicas > 1 && tp.size() > 1)
    o->unsupported("KV heads replicated over tp sum their gradient shards through zero-padded slots");
  sum_over_replicas(replicated_blocks, replicas, tp);
}

TpGradientPlan::NormShare TpGradientPlan::norm_share(const torch::Tensor* skip) const {
  NormShare n;
  for (const Sharded& s : sharded_) {
    const auto& g = s.param.grad();
    if (!g.defined()) continue;
    const double sq = squared_sum(g);
    n.here += sq;
    if (skip && s.param.is_same(*skip)) continue;
    n.sharded += sq / static_cast<double>(s.replicas);
  }
  return n;
}

bool TpGradientPlan::shards(const torch::Tensor& t) const {
  return std::any_of(sharded_.begin(), sharded_.end(), [&](const Sharded& s) { return s.param.is_same(t); });
}

const TpGradientPlan::Sharded* TpGradientPlan::find(const c10::TensorImpl* param) const {
  for (const Sharded& s : sharded_)
    if (s.param.unsafeGetTensorImpl() == param) return &s;
  return nullptr;
}

int64_t TpGradientPlan::shard_dim(const c10::TensorImpl* param) const {
  const Sharded* s = find(param);
  return s ? s->dim : -1;
}

int64_t TpGradientPlan::shard_replicas(const c10::TensorImpl* param) const {
  const Sharded* s = find(param);
  return s ? s->replicas : 1;
}

}  // namespace titan
