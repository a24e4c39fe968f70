#include "trainer/config/resolve_model.h"

#include "common/error.h"

namespace titan {

ModelArgs resolve_model_args(const ModelSection& m, int64_t tokenizer_vocab, int64_t vocab_multiple) {
  ModelArgs a = model_flavor(to_string(m.name), m.flavor);
  a.override_with(m);
  if (a.vocab_size == 0 && vocab_multiple > 0) {
    a.vocab_size = (tokenizer_vocab + vocab_multiple - 1) / vocab_multiple * vocab_multiple;
  }
  if (m.tie_embeddings != FlavorBool::kFlavor) a.tie_embeddings = m.tie_embeddings == FlavorBool::kTrue;
  if (m.qk_norm != FlavorBool::kFlavor) a.qk_norm = m.qk_norm == FlavorBool::kTrue;
  a.mlp_activation = m.mlp_activation;
  if (m.moe_norm_topk_prob != FlavorBool::kFlavor) a.moe_norm_topk_prob = m.moe_norm_topk_prob == FlavorBool::kTrue;
  if (m.moe_aux_loss_coeff >= 0) a.moe_aux_loss_coeff = m.moe_aux_loss_coeff;
  a.moe_bias_update_coeff = m.moe_bias_update_coeff;
  a.moe_capacity_factor = m.moe_capacity_factor;
  a.moe_grouped_mm = m.moe_grouped_mm;
  check_moe_args(a);
  TITAN_CONFIG_CHECK(a.n_heads % a.n_kv_heads == 0, "model.n_heads (", a.n_heads,
                     ") must be a multiple of model.n_kv_heads (", a.n_kv_heads, ")");
  TITAN_CONFIG_CHECK(a.head_dim % 2 == 0, "model.head_dim (", a.head_dim,
                     ") must be even for rotary embeddings");
  TITAN_CONFIG_CHECK(a.vocab_size >= tokenizer_vocab, "model.vocab_size (", a.vocab_size,
                     ") is smaller than the tokenizer's vocabulary (", tokenizer_vocab, ")");
  return a;
}

ModelArgs resolve_model_args(const JobConfig& cfg, int64_t tokenizer_vocab) {
  return resolve_model_args(cfg.model, tokenizer_vocab,
                            cfg.model.vocab_size_divisible_by * cfg.parallelism.tensor_parallel_degree);
}

}  // namespace titan
