#include "common/model_args.h"

#include <map>
#include <utility>

#include "common/error.h"

namespace titan {
namespace {

struct Dims {
  int64_t dim, layers, heads, kv_heads, ffn;
  bool tied;
};

// Published dims: Hugging Face config.json of each model (docs/models.md).
const std::map<std::string, Dims>& qwen3_flavors() {
  static const std::map<std::string, Dims> f = {
      {"0.6B", {1024, 28, 16, 8, 3072, true}},  {"1.7B", {2048, 28, 16, 8, 6144, true}},
      {"4B", {2560, 36, 32, 8, 9728, true}},    {"8B", {4096, 36, 32, 8, 12288, false}},
      {"14B", {5120, 40, 40, 8, 17408, false}}, {"32B", {5120, 64, 64, 8, 25600, false}},
  };
  return f;
}

const std::map<std::string, Dims>& llama3_flavors() {
  static const std::map<std::string, Dims> f = {
      {"8B", {4096, 32, 32, 8, 14336, false}},
      {"70B", {8192, 80, 64, 8, 28672, false}},
      {"405B", {16384, 126, 128, 8, 53248, false}},
  };
  return f;
}

// Qwen3 mixtures of experts: every layer MoE (decoder_sparse_step 1, mlp_only_layers empty),
// untied, norm_topk_prob true, router_aux_loss_coef 0.001. ffn is HF's intermediate_size (a dense
// layer's, used by none of these layers). Hugging Face config.json of Qwen/Qwen3-30B-A3B and
// Qwen/Qwen3-235B-A22B (docs/models.md).
struct MoeDims {
  int64_t dim, layers, heads, kv_heads, ffn, experts, top_k, moe_ffn;
};

const std::map<std::string, MoeDims>& qwen3_moe_flavors() {
  static const std::map<std::string, MoeDims> f = {
      {"30B-A3B", {2048, 48, 32, 4, 6144, 128, 8, 768}},
      {"235B-A22B", {4096, 94, 64, 4, 12288, 128, 8, 1536}},
  };
  return f;
}

std::string flavor_list(const std::map<std::string, Dims>& f, bool qwen) {
  std::string out = "debugmodel";
  for (auto& [k, v] : f) out += ", " + k;
  if (qwen) {
    out += ", debugmodel_moe";
    for (auto& [k, v] : qwen3_moe_flavors()) out += ", " + k;
  }
  return out;
}

}  // namespace

void ModelShape::override_with(const ModelShape& over) {
  auto take = [](auto& field, auto v) {
    if (v > 0) field = v;
  };
  take(dim, over.dim);
  take(n_layers, over.n_layers);
  take(n_heads, over.n_heads);
  take(n_kv_heads, over.n_kv_heads);
  take(head_dim, over.head_dim);
  take(ffn_dim, over.ffn_dim);
  take(vocab_size, over.vocab_size);
  take(rope_theta, over.rope_theta);
  take(norm_eps, over.norm_eps);
  take(moe_experts, over.moe_experts);
  take(moe_top_k, over.moe_top_k);
  take(moe_ffn_dim, over.moe_ffn_dim);
  take(moe_shared_ffn_dim, over.moe_shared_ffn_dim);
  take(moe_sparse_step, over.moe_sparse_step);
}

int64_t ModelArgs::moe_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < n_layers; ++l) n += moe_layer(l) ? 1 : 0;
  return n;
}

void check_moe_args(const ModelArgs& a) {
  const bool any = a.moe_top_k > 0 || a.moe_ffn_dim > 0 || a.moe_shared_ffn_dim > 0;
  TITAN_CONFIG_CHECK(a.moe_experts > 0 || !any, "model.moe_experts must be positive for a mixture of experts "
                     "(model.moe_top_k / moe_ffn_dim / moe_shared_ffn_dim are set), got ", a.moe_experts);
  TITAN_CONFIG_CHECK(a.moe_experts >= 0, "model.moe_experts must be >= 0 (0: dense), got ", a.moe_experts);
  if (!a.is_moe()) return;
  TITAN_CONFIG_CHECK(a.moe_top_k > 0, "model.moe_top_k must be positive, got ", a.moe_top_k);
  TITAN_CONFIG_CHECK(a.moe_top_k <= a.moe_experts, "model.moe_top_k (", a.moe_top_k,
                     ") must not exceed model.moe_experts (", a.moe_experts, ")");
  TITAN_CONFIG_CHECK(a.moe_ffn_dim > 0, "model.moe_ffn_dim must be positive, got ", a.moe_ffn_dim);
  TITAN_CONFIG_CHECK(a.moe_shared_ffn_dim >= 0, "model.moe_shared_ffn_dim must be >= 0, got ", a.moe_shared_ffn_dim);
  TITAN_CONFIG_CHECK(a.moe_sparse_step >= 0, "model.moe_sparse_step must be >= 0 (0 or 1: every layer), got ", a.moe_sparse_step);
  TITAN_CONFIG_CHECK(a.gated_mlp(), "model.mlp_activation must be swiglu for a mixture of experts (experts are "
                     "SwiGLU), got a non-gated MLP");
  TITAN_CONFIG_CHECK(a.moe_aux_loss_coeff >= 0, "model.moe_aux_loss_coeff must be >= 0, got ", a.moe_aux_loss_coeff);
  TITAN_CONFIG_CHECK(a.moe_bias_update_coeff >= 0, "model.moe_bias_update_coeff must be >= 0, got ",
                     a.moe_bias_update_coeff);
  TITAN_CONFIG_CHECK(a.moe_capacity_factor == 0 || a.moe_capacity_factor >= 1.0 / a.moe_experts,
                     "model.moe_capacity_factor must be 0 (dropless) or positive (>= 1 / moe_experts), got ",
                     a.moe_capacity_factor);
}

namespace {

// One block with `experts` expert MLPs of moe_ffn_dim (the router over all moe_experts, and the
// shared expert) in place of the dense MLP; experts < 0: the dense block.
int64_t block_params(const ModelArgs& a, int64_t experts) {
  const int64_t q = a.n_heads * a.head_dim, kv = a.n_kv_heads * a.head_dim;
  const int64_t attn = a.dim * q + 2 * a.dim * kv + q * a.dim + (a.qk_norm ? 2 * a.head_dim : 0);
  // w1 (gate or up), w3 (up, gated only), w2 (down)
  const int64_t mlp = experts < 0 ? a.mlp_matrices() * a.dim * a.ffn_dim
                                  : a.moe_experts * a.dim + 3 * a.dim * (experts * a.moe_ffn_dim + a.moe_shared_ffn_dim);
  return attn + mlp + 2 * a.dim;  // + attention_norm, ffn_norm
}

int64_t model_params(const ModelArgs& a, int64_t experts) {
  const int64_t embed = a.vocab_size * a.dim;
  const int64_t moe = a.moe_layers();
  return embed + (a.n_layers - moe) * block_params(a, -1) + moe * block_params(a, experts) + a.dim +
         (a.tie_embeddings ? 0 : embed);
}

}  // namespace

int64_t ModelArgs::layer_params() const { return block_params(*this, is_moe() ? moe_experts : -1); }
int64_t ModelArgs::dense_layer_params() const { return block_params(*this, -1); }
int64_t ModelArgs::num_params() const { return model_params(*this, moe_experts); }
int64_t ModelArgs::num_active_params() const { return model_params(*this, moe_top_k); }

ModelArgs model_flavor(const std::string& name, const std::string& flavor) {
  ModelArgs a;
  a.name = name;
  a.flavor = flavor;
  const bool qwen = name == "qwen3";
  TITAN_CONFIG_CHECK(qwen || name == "llama3", "model.name '", name,
                     "' is not known: expected qwen3 or llama3");
  a.head_dim = 128;
  a.qk_norm = qwen;
  a.rope_theta = qwen ? 1e6 : 500000.0;
  a.norm_eps = qwen ? 1e-6 : 1e-5;
  a.vocab_size = qwen ? 151936 : 128256;
  if (qwen && flavor == "debugmodel_moe") {
    // Tiny mixture of experts for tests and CPU runs: 8 experts, 2 active, every layer MoE.
    a.dim = 128, a.n_layers = 4, a.n_heads = 8, a.n_kv_heads = 4, a.head_dim = 16;
    a.ffn_dim = 384, a.vocab_size = 0, a.tie_embeddings = false;
    a.moe_experts = 8, a.moe_top_k = 2, a.moe_ffn_dim = 96, a.moe_sparse_step = 1, a.moe_aux_loss_coeff = 0.001;
    return a;
  }
  if (qwen) {
    auto m = qwen3_moe_flavors().find(flavor);
    if (m != qwen3_moe_flavors().end()) {
      const MoeDims& d = m->second;
      a.dim = d.dim, a.n_layers = d.layers, a.n_heads = d.heads, a.n_kv_heads = d.kv_heads, a.ffn_dim = d.ffn;
      a.moe_experts = d.experts, a.moe_top_k = d.top_k, a.moe_ffn_dim = d.moe_ffn, a.moe_sparse_step = 1;
      a.moe_aux_loss_coeff = 0.001, a.tie_embeddings = false;
      return a;
    }
  }
  if (flavor == "debugmodel") {
    // Tiny, for tests and CPU runs; the vocabulary follows the tokenizer.
    a.dim = 128, a.n_layers = 4, a.n_heads = 8, a.n_kv_heads = 4, a.head_dim = 16;
    a.ffn_dim = 384, a.vocab_size = 0, a.tie_embeddings = false;
    return a;
  }
  const auto& table = qwen ? qwen3_flavors() : llama3_flavors();
  auto it = table.find(flavor);
  TITAN_CONFIG_CHECK(it != table.end(), "model.flavor '", flavor, "' is not a ", name,
                     " flavor: expected one of ", flavor_list(table, qwen));
  const Dims& d = it->second;
  a.dim = d.dim, a.n_layers = d.layers, a.n_heads = d.heads, a.n_kv_heads = d.kv_heads;
  a.ffn_dim = d.ffn, a.tie_embeddings = d.tied;
  return a;
}

double flops_per_token(const ModelArgs& a, int64_t seq_len) {
  const double params_no_input_embedding =
      static_cast<double>(a.num_active_params() - (a.tie_embeddings ? 0 : a.num_embedding_params()));
  return 6.0 * params_no_input_embedding +
         12.0 * a.n_layers * a.n_heads * a.head_dim * static_cast<double>(seq_len);
}

}  // namespace titan
