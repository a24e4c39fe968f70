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

std::string flavor_list(const std::map<std::string, Dims>& f) {
  std::string out = "debugmodel";
  for (auto& [k, v] : f) out += ", " + k;
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
}

int64_t ModelArgs::layer_params() const {
  const int64_t q = n_heads * head_dim, kv = n_kv_heads * head_dim;
  const int64_t attn = dim * q + 2 * dim * kv + q * dim + (qk_norm ? 2 * head_dim : 0);
  const int64_t mlp = mlp_matrices() * dim * ffn_dim;  // w1 (gate or up), w3 (up, gated only), w2 (down)
  return attn + mlp + 2 * dim;            // + attention_norm, ffn_norm
}

int64_t ModelArgs::num_params() const {
  const int64_t embed = vocab_size * dim;
  return embed + n_layers * layer_params() + dim + (tie_embeddings ? 0 : embed);
}

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
  if (flavor == "debugmodel") {
    // Tiny, for tests and CPU runs; the vocabulary follows the tokenizer.
    a.dim = 128, a.n_layers = 4, a.n_heads = 8, a.n_kv_heads = 4, a.head_dim = 16;
    a.ffn_dim = 384, a.vocab_size = 0, a.tie_embeddings = false;
    return a;
  }
  const auto& table = qwen ? qwen3_flavors() : llama3_flavors();
  auto it = table.find(flavor);
  TITAN_CONFIG_CHECK(it != table.end(), "model.flavor '", flavor, "' is not a ", name,
                     " flavor: expected one of ", flavor_list(table));
  const Dims& d = it->second;
  a.dim = d.dim, a.n_layers = d.layers, a.n_heads = d.heads, a.n_kv_heads = d.kv_heads;
  a.ffn_dim = d.ffn, a.tie_embeddings = d.tied;
  return a;
}

double flops_per_token(const ModelArgs& a, int64_t seq_len) {
  const double params_no_input_embedding =
      static_cast<double>(a.num_params() - (a.tie_embeddings ? 0 : a.num_embedding_params()));
  return 6.0 * params_no_input_embedding +
         12.0 * a.n_layers * a.n_heads * a.head_dim * static_cast<double>(seq_len);
}

}  // namespace titan
