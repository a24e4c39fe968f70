// ModelArgs: the dimensions of a dense decoder (Qwen3, Llama 3), the published flavors, and
// the one parameter-count and FLOP formula. Shared by the model, the config, checkpoint
// metadata and the device model (memory), so it lives below every layer.
#pragma once

#include <cstdint>
#include <string>

namespace titan {

// The MLP of each block. kSwiglu (Qwen3, Llama 3): gated, w2(silu(w1 x) * w3 x), three
// matrices. kGelu / kRelu: the plain two-matrix MLP w2(act(w1 x)) with no w3, as in GPT-3 and
// Megatron GPT (gelu) and MaxText's synthetic runs (relu); gelu is the tanh approximation
// (GPT-2/3's, and jax.nn.gelu's default, which MaxText uses), not torch's exact erf.
// The config's names ("swiglu", "gelu", "relu") are in trainer/config/config_enums.h.
enum class MlpActivation { kSwiglu, kGelu, kRelu };

// The sizes of a model that a config may set. In a config section 0 means "the flavor's";
// the trainer's [model] section is a ModelShape plus its choices, so the field list is here
// once.
struct ModelShape {
  int64_t dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t ffn_dim = 0;
  int64_t vocab_size = 0;  // 0 until resolved against the tokenizer (debugmodel)
  double rope_theta = 0;
  double norm_eps = 0;
  // Mixture of experts (Qwen3-MoE; HF config keys in brackets); moe_experts 0 = dense.
  int64_t moe_experts = 0;         // routed experts per MoE block [num_experts]
  int64_t moe_top_k = 0;           // experts each token is sent to [num_experts_per_tok]
  int64_t moe_ffn_dim = 0;         // each expert's SwiGLU intermediate size [moe_intermediate_size]
  int64_t moe_shared_ffn_dim = 0;  // an always-on shared expert's (0: none; Qwen2-MoE / DeepSeek style)
  int64_t moe_sparse_step = 0;     // layer l is MoE when (l + 1) % step == 0 [decoder_sparse_step]

  // Every field of `over` that is > 0 replaces this shape's.
  void override_with(const ModelShape& over);
};

struct ModelArgs : ModelShape {
  ModelArgs() {
    rope_theta = 1e6;
    norm_eps = 1e-6;
  }
  std::string name = "qwen3";
  std::string flavor = "debugmodel";
  bool tie_embeddings = false;
  bool qk_norm = true;
  MlpActivation mlp_activation = MlpActivation::kSwiglu;
  bool gated_mlp() const { return mlp_activation == MlpActivation::kSwiglu; }
  // MoE routing choices (trainer/model/moe.h); only read when moe_experts > 0.
  bool moe_norm_topk_prob = true;    // top-k weights renormalised to sum 1 [norm_topk_prob]
  double moe_aux_loss_coeff = 0;     // load-balancing loss coefficient [router_aux_loss_coef]
  double moe_bias_update_coeff = 0;  // TorchTitan's aux-loss-free bias step (0: off)
  double moe_capacity_factor = 0;    // 0: dropless; else each expert takes ceil(cf N k / E) tokens
  bool moe_grouped_mm = true;        // experts as grouped matmuls (TorchTitan's use_grouped_mm)
  bool is_moe() const { return moe_experts > 0; }
  bool moe_layer(int64_t layer) const {
    return is_moe() && (layer + 1) % (moe_sparse_step > 0 ? moe_sparse_step : 1) == 0;
  }
  int64_t moe_layers() const;
  int64_t mlp_matrices() const { return gated_mlp() ? 3 : 2; }  // dim x ffn_dim weights per block

  // Parameter counts, exact for these shapes: one block, and the whole model (embedding,
  // blocks, final norm, and the output projection unless tied).
  // Under MoE: layer_params() is an MoE block's (all experts), dense_layer_params() a dense one's.
  int64_t layer_params() const;
  int64_t dense_layer_params() const;
  int64_t num_params() const;
  // Parameters a token passes through: an MoE block counts its router, top_k experts and the
  // shared expert (docs/mfu.md); equal to num_params() for a dense model.
  int64_t num_active_params() const;
  int64_t num_embedding_params() const { return vocab_size * dim; }
};

// A published flavor ("qwen3"/"8B", "llama3"/"70B", ...); unknown names are config errors
// that list the valid flavors.
ModelArgs model_flavor(const std::string& name, const std::string& flavor);

// Checks the MoE fields (errors name the model.moe_* key); a no-op for a dense model.
void check_moe_args(const ModelArgs& args);

// FLOPs per token, TorchTitan's convention (docs/mfu.md): 6 * (active) parameters without the
// input embedding (a tied embedding counts once, as the output projection) plus
// 12 * layers * heads * head_dim * seq_len for attention, not halved for causality.
double flops_per_token(const ModelArgs& args, int64_t seq_len);

}  // namespace titan
