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
  int64_t mlp_matrices() const { return gated_mlp() ? 3 : 2; }  // dim x ffn_dim weights per block

  // Parameter counts, exact for these shapes: one block, and the whole model (embedding,
  // blocks, final norm, and the output projection unless tied).
  int64_t layer_params() const;
  int64_t num_params() const;
  int64_t num_embedding_params() const { return vocab_size * dim; }
};

// A published flavor ("qwen3"/"8B", "llama3"/"70B", ...); unknown names are config errors
// that list the valid flavors.
ModelArgs model_flavor(const std::string& name, const std::string& flavor);

// FLOPs per token, TorchTitan's convention (docs/mfu.md): 6 * parameters without the
// input embedding (a tied embedding counts once, as the output projection) plus
// 12 * layers * heads * head_dim * seq_len for attention, not halved for causality.
double flops_per_token(const ModelArgs& args, int64_t seq_len);

}  // namespace titan
