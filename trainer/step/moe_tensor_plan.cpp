#include "trainer/step/moe_tensor_plan.h"

#include "common/error.h"
#include "parallel/expert_parallel.h"
#include "parallel/tensor_parallel.h"
#include "trainer/model/moe.h"

namespace titan {

void check_expert_tensor_parallel_config(const JobConfig& cfg, const ModelArgs& args) {
  const auto& p = cfg.parallelism;
  check_expert_tensor_parallel(p.expert_tensor_parallel_degree, p.tensor_parallel_degree,
                               args.is_moe() ? args.moe_experts : 0, args.moe_ffn_dim, args.moe_shared_ffn_dim);
}

bool experts_tensor_parallel(const JobConfig& cfg) {
  const auto& p = cfg.parallelism;
  return p.tensor_parallel_degree > 1 && p.expert_tensor_parallel_degree == p.tensor_parallel_degree;
}

void apply_moe_tensor_parallel(TransformerBlockImpl& block, Communicator& tp, bool sp, bool expert_tp,
                               ParallelizedModel& out) {
  MoEImpl& moe = *block.moe;
  if (!expert_tp) {
    if (!sp) return;  // every tp rank routes the same tokens: whole gradients, exact statistics
    for (auto& p : moe.parameters()) out.tp_partial_grads.push_back(p);
    out.tp_partial_grads.push_back(block.ffn_norm->weight);
    // Tokens per expert, router probability sums and token counts of the whole sequence. The
    // sum's backward is the identity: each rank's probabilities get the loss's gradient once,
    // and the router's gradient is then summed over tp with the block's others.
    moe.combine_routing_stats = [&tp](const torch::Tensor& stats) { return reduce_from_tp(stats, tp); };
    return;
  }
  auto shard = [&](WeightModule& m, int64_t dim) {
    shard_weight(m, dim, tp);
    out.tp_sharded.push_back(m.weight);
    out.tp_shard_dims.push_back(dim);
    out.tp_shard_replicas.push_back(1);
  };
  // Stacked [E, hidden, dim] (w1, w3) and [E, dim, hidden] (w2): split over hidden.
  shard(*moe.experts->w1, 1), shard(*moe.experts->w3, 1), shard(*moe.experts->w2, 2);
  if (moe.shared_expert) {
    // Its row-parallel output joins the experts' partial sum, reduced once by the block's wrap.
    shard(*moe.shared_expert->w1, 0), shard(*moe.shared_expert->w2, 1);
    if (moe.shared_expert->w3) shard(*moe.shared_expert->w3, 0);
  }
  out.tp_partial_grads.push_back(moe.router->weight);
  // The block's input: whole sequence on every rank, its gradient summed over tp (every user of
  // it downstream yields a partial sum).
  block.ffn_norm->wrap = [&tp, sp](const torch::Tensor& x, const ForwardFn& inner) {
    return sp ? gather_sequence(inner(x), tp) : copy_to_tp(inner(x), tp);
  };
  if (sp) out.tp_partial_grads.push_back(block.ffn_norm->weight);
  moe.wrap = [&tp, sp](const torch::Tensor& x, const ForwardFn& inner) {
    return sp ? reduce_scatter_sequence(inner(x), tp) : reduce_from_tp(inner(x), tp);
  };
  // Every tp rank forms the same load-balancing loss from the same tokens; its router gradient,
  // summed over tp with the partial ones, must count once.
  const double share = 1.0 / static_cast<double>(tp.size());
  moe.combine_routing_stats = [share](const torch::Tensor& stats) { return scale_gradient(stats, share); };
}

}  // namespace titan
