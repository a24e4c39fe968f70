// The dense decoder (Qwen3 and Llama 3 from one code path), faithful to the Hugging Face
// implementation. Knows nothing of parallelism: plans change it from outside through the
// generic hooks of trainer/model/hooks/module_hooks.h (WeightModule::wrap and ::weight,
// Transformer::block_wrappers and ::forward_wrap) and by replacing parameters with shards.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "trainer/model/hooks/module_hooks.h"
#include "common/model_args.h"
#include "trainer/model/kernels/fused_kernels.h"

namespace titan {

class MoEImpl;  // trainer/model/moe.h

// Bias-free linear layer y = x W^T with W [out, in].
class LinearImpl : public WeightModule {
 public:
  LinearImpl(int64_t in, int64_t out, const torch::TensorOptions& opts);
  torch::Tensor forward(const torch::Tensor& x);
  bool fused = true;  // trainer/model/kernels/linear_kernel.h where the input allows it
};
TORCH_MODULE(Linear);

// Token embedding as a row lookup (index, not embedding(), so it runs on the meta device).
class EmbeddingImpl : public WeightModule {
 public:
  EmbeddingImpl(int64_t vocab, int64_t dim, const torch::TensorOptions& opts);
  torch::Tensor forward(const torch::Tensor& ids);
};
TORCH_MODULE(Embedding);

// RMSNorm over the last dim, computed in fp32 and scaled in the input dtype (as HF does).
class RMSNormImpl : public WeightModule {
 public:
  RMSNormImpl(int64_t dim, double eps, const torch::TensorOptions& opts);
  torch::Tensor forward(const torch::Tensor& x);
  double eps;
  bool fused = true;  // trainer/model/kernels/rms_norm_kernel.h where the input allows it
};
TORCH_MODULE(RMSNorm);

// cos/sin tables [max_seq, head_dim] in the HF "rotate half" layout.
struct RopeTables {
  torch::Tensor cos, sin;
};
RopeTables make_rope_tables(int64_t max_seq, int64_t head_dim, double theta,
                            const torch::TensorOptions& opts);
torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// Grouped-query attention with optional per-head RMSNorm on q and k. The number of heads is
// read from the projection shapes, so a plan that shards wq/wk/wv by heads needs no flag.
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelArgs& args, const torch::TensorOptions& opts);
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope);
  int64_t head_dim;
  FusedKernels kernels;  // rope and attention; the norms carry their own switch
  Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};
  AttentionFn attention_fn;  // set by a plan (trainer/model/hooks/module_hooks.h); unset: causal attention here
};
TORCH_MODULE(Attention);

// The MLP (ModelArgs::mlp_activation): SwiGLU w2(silu(w1 x) * w3 x), or non-gated
// w2(act(w1 x)) with gelu (tanh approximation) or relu, where w3 is null.
class FeedForwardImpl : public torch::nn::Module {
 public:
  FeedForwardImpl(const ModelArgs& args, const torch::TensorOptions& opts);
  torch::Tensor forward(const torch::Tensor& x);
  MlpActivation activation;
  Linear w1{nullptr}, w2{nullptr}, w3{nullptr};  // w3 only for SwiGLU
  bool fused = true;  // SwiGLU's gate by trainer/model/kernels/swiglu_kernel.h
};
TORCH_MODULE(FeedForward);

class TransformerBlockImpl : public torch::nn::Module {
 public:
  // layer: the block's index (ModelArgs::moe_layer(layer) blocks hold a mixture of experts).
  TransformerBlockImpl(const ModelArgs& args, const torch::TensorOptions& opts, int64_t layer = 0);
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope);
  Attention attention{nullptr};
  FeedForward feed_forward{nullptr};  // null in an MoE block
  std::shared_ptr<MoEImpl> moe;       // registered as "moe" in an MoE block, else null
  RMSNorm attention_norm{nullptr}, ffn_norm{nullptr};
};
TORCH_MODULE(TransformerBlock);

class TransformerImpl : public torch::nn::Module {
 public:
  // Parameters are created directly on opts.device() (meta for simulation), uninitialized.
  TransformerImpl(const ModelArgs& args, int64_t max_seq_len, const torch::TensorOptions& opts);

  // tokens [B, S] int64 -> logits [B, S, vocab] (or the vocab shard under loss parallel).
  torch::Tensor forward(const torch::Tensor& tokens);
  torch::Tensor hidden(const torch::Tensor& tokens);  // final-norm output, before the head
  torch::Tensor head(const torch::Tensor& h);
  // The pieces of hidden(), for running part of the model (a pipeline stage, from outside):
  // blocks [begin, end) through block_wrappers.
  torch::Tensor run_layers(torch::Tensor h, int64_t begin, int64_t end);

  // Deterministic init from the seed: each parameter draws from its own generator seeded by
  // (seed, parameter name), so the result does not depend on order, rank or mesh.
  void init_weights(uint64_t seed);

  // Switches every module's fused kernels (all on when constructed).
  void set_fused_kernels(const FusedKernels& k);

  // Wraps the whole forward (tokens -> logits): where a plan gathers the root's parameters.
  WrapFn forward_wrap;

  ModelArgs args;
  Embedding tok_embeddings{nullptr};
  std::vector<TransformerBlock> layers;  // also registered under "layers" (a ModuleList)
  RMSNorm norm{nullptr};
  Linear output{nullptr};  // null when embeddings are tied
  RopeTables rope;
  std::vector<BlockWrapFn> block_wrappers;
  // Sums the MoE blocks' tokens_per_expert over data-parallel ranks before the bias update
  // (update_expert_bias, moe.h); set by a plan, unset in one process.
  std::function<void(std::vector<torch::Tensor>& loads)> reduce_expert_load;
  FusedKernels kernels;  // as last set by set_fused_kernels (the tied head reads .linear)
};
TORCH_MODULE(Transformer);

// Cross entropy summed over tokens (fp32), divided by `normalizer` (the tokens of the whole
// global batch), so that micro-batch and data-parallel sums give the global mean. fused:
// trainer/model/kernels/cross_entropy_kernel.h where the logits allow it.
torch::Tensor cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& labels,
                                double normalizer, bool fused = true);

}  // namespace titan
