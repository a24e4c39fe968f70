#include "trainer/checkpoint/hf_interop.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/config/config_enums.h"
#include "trainer/step/trainer.h"

namespace titan {
namespace {

using NamePairs = std::vector<std::pair<std::string, std::string>>;

// Per-layer suffixes: titan (after "layers.N.") -> HF (after "model.layers.N."). A non-gated
// MLP (no w3) writes its w1 as up_proj, as HF names the input projection of a plain MLP.
const NamePairs& layer_names(bool gated_mlp) {
  // Attention and the norms.
  static const NamePairs common = {
      {"attention.wq.weight", "self_attn.q_proj.weight"},
      {"attention.wk.weight", "self_attn.k_proj.weight"},
      {"attention.wv.weight", "self_attn.v_proj.weight"},
      {"attention.wo.weight", "self_attn.o_proj.weight"},
      {"attention.q_norm.weight", "self_attn.q_norm.weight"},
      {"attention.k_norm.weight", "self_attn.k_norm.weight"},
      {"attention_norm.weight", "input_layernorm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"}};
  auto with = [](NamePairs m, const NamePairs& mlp) {
    m.insert(m.end(), mlp.begin(), mlp.end());
    return m;
  };
  static const NamePairs gated = with(common, {{"feed_forward.w1.weight", "mlp.gate_proj.weight"},
                                               {"feed_forward.w3.weight", "mlp.up_proj.weight"},
                                               {"feed_forward.w2.weight", "mlp.down_proj.weight"}});
  static const NamePairs plain = with(common, {{"feed_forward.w1.weight", "mlp.up_proj.weight"},
                                               {"feed_forward.w2.weight", "mlp.down_proj.weight"}});
  return gated_mlp ? gated : plain;
}

// HF's hidden_act for the activation (its ACT2FN names).
const char* hf_hidden_act(MlpActivation a) {
  switch (a) {
    case MlpActivation::kSwiglu: return "silu";
    case MlpActivation::kGelu: return "gelu_pytorch_tanh";
    case MlpActivation::kRelu: return "relu";
  }
  return "?";
}

const std::vector<std::pair<std::string, std::string>>& top_names() {
  static const std::vector<std::pair<std::string, std::string>> m = {
      {"tok_embeddings.weight", "model.embed_tokens.weight"},
      {"norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"}};
  return m;
}

}  // namespace

std::string hf_name(const std::string& t, bool gated_mlp) {
  for (auto& [a, b] : top_names())
    if (t == a) return b;
  static const std::regex layer(R"(layers\.(\d+)\.(.+))");
  std::smatch m;
  if (std::regex_match(t, m, layer)) {
    for (auto& [a, b] : layer_names(gated_mlp))
      if (m[2] == a) return "model.layers." + m[1].str() + "." + b;
  }
  TITAN_FAIL("hf interop: no Hugging Face name for titan parameter ", t);
}

std::string titan_name(const std::string& h, bool gated_mlp) {
  for (auto& [a, b] : top_names())
    if (h == b) return a;
  static const std::regex layer(R"(model\.layers\.(\d+)\.(.+))");
  std::smatch m;
  if (std::regex_match(h, m, layer)) {
    for (auto& [a, b] : layer_names(gated_mlp))
      if (m[2] == b) return "layers." + m[1].str() + "." + a;
  }
  return "";
}

TensorMap to_hf(const TensorMap& titan_tensors, torch::ScalarType dtype, bool gated_mlp) {
  TensorMap out;
  for (auto& [name, t] : titan_tensors) out[hf_name(name, gated_mlp)] = t.detach().to(dtype).contiguous();
  return out;
}

TensorMap from_hf(const TensorMap& hf, const ModelArgs& args) {
  Transformer meta(args, 1, torch::TensorOptions().device(torch::kMeta));
  TensorMap by_titan;
  int64_t unknown = 0;
  const bool gated = args.gated_mlp();
  for (auto& [name, t] : hf) {
    // A gated checkpoint's up_proj has the shape of a plain MLP's: never take it as w1.
    TITAN_CONFIG_CHECK(gated || name.find("mlp.gate_proj.") == std::string::npos, "hf import: ", name,
                       " is the gate of a gated (SwiGLU) MLP, but model.mlp_activation = ",
                       to_string(args.mlp_activation), " is non-gated (up_proj, down_proj only)");
    const std::string tn = titan_name(name, gated);
    if (tn.empty()) {
      ++unknown;
      continue;
    }
    by_titan[tn] = t;
  }
  if (unknown > 0) std::fprintf(stderr, "titan: hf import: ignoring %lld tensors titan has no parameter for\n",
                                static_cast<long long>(unknown));
  TensorMap out;
  for (auto& p : meta->named_parameters()) {
    auto it = by_titan.find(p.key());
    if (it == by_titan.end() && p.key() == "output.weight") it = by_titan.find("tok_embeddings.weight");
    TITAN_CONFIG_CHECK(it != by_titan.end(), "hf import: tensor ", hf_name(p.key(), gated), " is missing",
                       gated && p.key().find("feed_forward.w1") != std::string::npos
                           ? " (a non-gated MLP's checkpoint? model.mlp_activation is swiglu)"
                           : "");
    TITAN_CONFIG_CHECK(it->second.sizes() == p.value().sizes(), "hf import: ", hf_name(p.key(), gated), " has shape ",
                       it->second.sizes(), ", this model expects ", p.value().sizes());
    out[p.key()] = it->second;
  }
  return out;
}

std::string hf_config_json(const ModelArgs& a, torch::ScalarType dtype) {
  const bool qwen = a.name == "qwen3";
  nlohmann::json j = {{"architectures", {qwen ? "Qwen3ForCausalLM" : "LlamaForCausalLM"}},
                      {"model_type", qwen ? "qwen3" : "llama"},
                      {"hidden_size", a.dim},
                      {"intermediate_size", a.ffn_dim},
                      {"num_hidden_layers", a.n_layers},
                      {"num_attention_heads", a.n_heads},
                      {"num_key_value_heads", a.n_kv_heads},
                      {"head_dim", a.head_dim},
                      {"vocab_size", a.vocab_size},
                      {"rms_norm_eps", a.norm_eps},
                      {"rope_theta", a.rope_theta},
                      {"tie_word_embeddings", a.tie_embeddings},
                      {"hidden_act", hf_hidden_act(a.mlp_activation)},
                      {"attention_bias", false},
                      {"torch_dtype", dtype == torch::kBFloat16 ? "bfloat16"
                                      : dtype == torch::kFloat16 ? "float16"
                                                                 : "float32"}};
  // transformers' Qwen3 / Llama classes always build a gated MLP: say plainly that this one
  // is not (they would leave gate_proj uninitialised); titan reads the key back on import.
  if (!a.gated_mlp()) j["mlp_gated"] = false;
  return j.dump(2) + "\n";
}

void export_hf(Trainer& trainer, const std::string& path, torch::ScalarType dtype) {
  // Collective (FSDP, TP and pipeline groups): every rank takes part.
  TensorMap full = trainer.gather_full_parameters();
  if (!trainer.is_writer()) return;
  const ModelArgs& a = trainer.model_args();
  if (!a.gated_mlp())
    std::fprintf(stderr,
                 "titan: hf export: model.mlp_activation = %s is a non-gated MLP, written as mlp.up_proj / "
                 "mlp.down_proj; transformers' %s class expects a gated one (gate_proj) and cannot load it as is; "
                 "titan imports it with the same model.mlp_activation\n",
                 to_string(a.mlp_activation).c_str(), a.name == "qwen3" ? "Qwen3" : "Llama");
  save_safetensors(path, to_hf(full, dtype, a.gated_mlp()), {{"format", "pt"}});
  std::ofstream(std::filesystem::path(path).parent_path() / "config.json") << hf_config_json(trainer.model_args(), dtype);
}

void load_hf(Trainer& trainer, const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  if (fs::is_directory(path)) {
    for (auto& e : fs::directory_iterator(path))
      if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
  } else {
    TITAN_CONFIG_CHECK(fs::exists(path), "checkpoint.initial_load_path: ", path, " does not exist");
    files.push_back(path);
  }
  TITAN_CONFIG_CHECK(!files.empty(), "checkpoint.initial_load_path: ", path,
                     " holds neither a titan checkpoint (COMPLETE) nor .safetensors files");
  TensorMap hf;
  for (auto& f : files) {
    for (auto& [k, v] : load_safetensors(f)) hf[k] = v;
  }
  TensorMap t;
  try {
    t = from_hf(hf, trainer.model_args());
  } catch (const Error& e) {  // which file the missing or misshapen tensor was expected in
    TITAN_CONFIG_FAIL("checkpoint.initial_load_path ", path, ": ", e.what());
  }
  auto& params = trainer.optimizer().params();
  const auto layout = param_layout(trainer);
  for (size_t i = 0; i < params.size(); ++i) assign_from_full(trainer, i, layout[i], t.at(params[i].name));
}

}  // namespace titan
