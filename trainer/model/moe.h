// Mixture-of-experts block (Qwen3-MoE, as Hugging Face's Qwen3MoeSparseMoeBlock computes it),
// used in place of a block's FeedForward where ModelArgs::moe_layer(l):
//   scores  = softmax(router(x)) in fp32 over the E experts
//   top-k   experts by scores (+ expert_bias, TorchTitan's aux-loss-free balancing: the bias
//           chooses experts only, the weights are the unbiased scores)
//   weights = the chosen scores, renormalised to sum 1 (norm_topk_prob)
//   y       = sum_k weight_k * expert_k(x) (+ shared_expert(x)), each expert a SwiGLU MLP.
// Tokens are permuted so they are grouped by expert (stable, by expert id), handed to the
// dispatch hook (moe_dispatch.h; none: every expert runs here as one grouped GEMM), weighted
// and added back per token. Single-device code: expert parallelism installs a dispatch and
// replaces the stacked expert weights with its slice from outside.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/model_args.h"
#include "trainer/model/hooks/module_hooks.h"
#include "trainer/model/model.h"
#include "trainer/model/moe_dispatch.h"

namespace titan {

// Tokens per expert on the meta device, where routing has no data (simulation.moe_routing).
// uniform: N k / E each. skewed: expert i (0-based) receives a share proportional to
// 1 / (i + 1)^zipf, none more than N (a token picks k distinct experts); the hottest experts
// are the lowest ids, so under expert parallelism they share one rank (the worst case).
struct MetaRouting {
  enum class Kind { kUniform, kSkewed };
  Kind kind = Kind::kUniform;
  double zipf = 1.0;
};
MetaRouting::Kind meta_routing_kind(const std::string& name);  // errors name simulation.moe_routing
std::vector<int64_t> meta_expert_counts(int64_t tokens, int64_t top_k, int64_t experts, const MetaRouting& r);

// E experts' weights stacked [E, out, in], read through `weight` (FSDP repoints it to the
// gathered value; expert parallelism registers this rank's slice of experts).
class ExpertWeightsImpl : public WeightModule {
 public:
  ExpertWeightsImpl(int64_t experts, int64_t out, int64_t in, const torch::TensorOptions& opts);
};
TORCH_MODULE(ExpertWeights);

// The experts as SwiGLU MLPs: w1 (gate) and w3 (up) [E, hidden, dim], w2 (down) [E, dim, hidden].
class GroupedExpertsImpl : public torch::nn::Module {
 public:
  GroupedExpertsImpl(int64_t experts, int64_t dim, int64_t hidden, const torch::TensorOptions& opts);
  // Grouped GEMM: tokens [M, dim] grouped by (local) expert, counts[e] rows each, one
  // product per expert on its rows (experts with none are skipped); returns [M, dim].
  torch::Tensor forward(const torch::Tensor& tokens, const std::vector<int64_t>& counts);
  ExpertWeights w1{nullptr}, w2{nullptr}, w3{nullptr};
  // One grouped matmul per projection (trainer/model/grouped_matmul.h), as frameworks run
  // them; false: each expert's SwiGLU in turn, its products as GEMMs of their own (on the
  // CPU the same products, silu roundoff apart; a recording then holds E GEMMs per projection).
  bool grouped = true;
};
TORCH_MODULE(GroupedExperts);

struct Routing {
  torch::Tensor scores;   // [N, E] fp32 softmax of the router logits
  torch::Tensor indices;  // [N, k] chosen experts (by scores + expert_bias)
  torch::Tensor weights;  // [N, k] fp32 combine weights (renormalised when norm_topk_prob)
};

class MoEImpl : public torch::nn::Module {
 public:
  MoEImpl(const ModelArgs& args, const torch::TensorOptions& opts);
  torch::Tensor forward(const torch::Tensor& x);  // [..., dim] -> [..., dim], through `wrap`
  Routing route(const torch::Tensor& flat);       // flat [N, dim]

  int64_t n_experts, top_k;
  bool norm_topk_prob;
  double aux_loss_coeff, bias_update_coeff, capacity_factor;
  Linear router{nullptr};  // [E, dim], no bias (HF: mlp.gate)
  GroupedExperts experts{nullptr};
  FeedForward shared_expert{nullptr};  // only when moe_shared_ffn_dim > 0
  torch::Tensor expert_bias;           // [E] fp32 buffer, added to the scores for top-k only
  torch::Tensor tokens_per_expert;     // [E] fp32 buffer: tokens routed since the last bias update
  std::shared_ptr<ExpertDispatch> dispatch;  // null: all experts local
  MetaRouting meta_routing;                  // set by the simulator
  // Tokens of the global batch: each forward's auxiliary loss is weighted by its share of
  // them, so micro-batches and data-parallel ranks sum to the batch mean (0: weight 1).
  double aux_normalizer = 0;
  torch::Tensor last_aux_loss;  // detached value of the last forward's auxiliary term (0-dim)
  int64_t dropped = 0;          // routed slots dropped by the capacity in the last forward
  // Hooks for plans applied from outside (none by default). wrap: around the whole block's
  // forward (a plan may change its input and output, e.g. sum partial outputs).
  WrapFn wrap;
  // The load-balancing loss is a statistic of every token routed together: where other ranks
  // route the rest of the same tokens, a plan combines the statistics before the loss is formed.
  // stats [2E + 1] fp32 = tokens per expert (no grad), router probabilities summed over tokens
  // (differentiable), tokens; returns the combined [2E + 1]. Null: this forward's own.
  std::function<torch::Tensor(const torch::Tensor&)> combine_routing_stats;

 private:
  torch::Tensor forward_local(const torch::Tensor& x);
};

// Over every MoE block of a model:
void set_meta_routing(Transformer& model, const MetaRouting& r);
void set_moe_aux_normalizer(Transformer& model, double tokens);
// Sum of the auxiliary terms the last forward added to the loss (fp64 scalar; 0 without MoE).
double moe_aux_loss(Transformer& model);
// TorchTitan's aux-loss-free update, after each optimizer step, for blocks with
// moe_bias_update_coeff > 0: delta_i = coeff * sign(mean(load) - load_i), centred (minus its
// mean), added to expert_bias; the load counters restart. model->reduce_expert_load sums the
// loads over data-parallel ranks first (a plan sets it).
void update_expert_bias(Transformer& model);
// Drops the load counted over a step whose optimizer step was skipped, so the next update
// counts one step, as a checkpoint (which does not save the counter) assumes.
void reset_expert_load(Transformer& model);

}  // namespace titan
