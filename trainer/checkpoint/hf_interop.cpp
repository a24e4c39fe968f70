#include "trainer/checkpoint/hf_interop.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
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
  // Gated MLPs, and the MoE block's router and shared expert (Qwen3-MoE / Qwen2-MoE names); its
  // stacked experts map to one HF tensor per expert (expert_names below).
  static const NamePairs gated = with(common, {{"feed_forward.w1.weight", "mlp.gate_proj.weight"},
                                               {"feed_forward.w3.weight", "mlp.up_proj.weight"},
                                               {"feed_forward.w2.weight", "mlp.down_proj.weight"},
                                               {"moe.router.weight", "mlp.gate.weight"},
                                               {"moe.shared_expert.w1.weight", "mlp.shared_expert.gate_proj.weight"},
                                               {"moe.shared_expert.w3.weight", "mlp.shared_expert.up_proj.weight"},
                                               {"moe.shared_expert.w2.weight", "mlp.shared_expert.down_proj.weight"}});
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

// An MoE block's stacked expert weight [E, ...] (titan, after "layers.N.") and the HF name of
// expert M's slice (after "model.layers.N.mlp.experts.M.").
const NamePairs& expert_names() {
  static const NamePairs m = {{"moe.experts.w1.weight", "gate_proj.weight"},
                              {"moe.experts.w3.weight", "up_proj.weight"},
                              {"moe.experts.w2.weight", "down_proj.weight"}};
  return m;
}

// "layers.N.moe.experts.w1.weight" -> (N, "gate_proj.weight"); false for any other name.
bool stacked_expert(const std::string& t, std::string* layer, std::string* hf_suffix) {
  static const std::regex re(R"(layers\.(\d+)\.(moe\.experts\.w[123]\.weight))");
  std::smatch m;
  if (!std::regex_match(t, m, re)) return false;
  for (auto& [a, b] : expert_names())
    if (m[2] == a) *layer = m[1].str(), *hf_suffix = b;
  return true;
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
  if (std::string layer, suffix; stacked_expert(t, &layer, &suffix))
    return "model.layers." + layer + ".mlp.experts.<0..E-1>." + suffix;
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
  for (auto& [name, t] : titan_tensors) {
    std::string layer, suffix;
    if (!stacked_expert(name, &layer, &suffix)) {
      out[hf_name(name, gated_mlp)] = t.detach().to(dtype).contiguous();
      continue;
    }
    for (int64_t e = 0; e < t.size(0); ++e)  // one tensor per expert, as HF stores them
      out["model.layers." + layer + ".mlp.experts." + std::to_string(e) + "." + suffix] = t[e].detach().to(dtype).contiguous();
  }
  return out;
}

TensorMap from_hf(const TensorMap& hf, const ModelArgs& args) {
  Transformer meta(args, 1, torch::TensorOptions().device(torch::kMeta));
  TensorMap by_titan;
  int64_t unknown = 0;
  const bool gated = args.gated_mlp();
  // MoE experts: HF's per-expert tensors, stacked in expert order into titan's [E, ...].
  static const std::regex expert_re(R"(model\.layers\.(\d+)\.mlp\.experts\.(\d+)\.(\w+_proj\.weight))");
  std::map<std::string, std::map<int64_t, torch::Tensor>> experts;
  for (auto& [name, t] : hf) {
    std::smatch m;
    if (!std::regex_match(name, m, expert_re)) continue;
    for (auto& [a, b] : expert_names())
      if (m[3] == b) experts["layers." + m[1].str() + "." + a][std::stoll(m[2].str())] = t;
  }
  for (auto& [tn, by_expert] : experts) {
    std::vector<torch::Tensor> parts;
    for (int64_t e = 0; e < args.moe_experts; ++e) {
      auto it = by_expert.find(e);
      TITAN_CONFIG_CHECK(it != by_expert.end(), "hf import: ", hf_name(tn, gated), ": expert ", e, " of ",
                         args.moe_experts, " (model.moe_experts) is missing");
      parts.push_back(it->second);
    }
    TITAN_CONFIG_CHECK(static_cast<int64_t>(by_expert.size()) == args.moe_experts, "hf import: ", hf_name(tn, gated),
                       " has ", by_expert.size(), " experts, model.moe_experts is ", args.moe_experts);
    by_titan[tn] = torch::stack(parts);
  }
  for (auto& [name, t] : hf) {
    if (std::regex_match(name, expert_re)) continue;
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
  if (a.is_moe()) {  // transformers' Qwen3MoeForCausalLM (config keys of Qwen/Qwen3-30B-A3B)
    j["architectures"] = {"Qwen3MoeForCausalLM"};
    j["model_type"] = "qwen3_moe";
    j["num_experts"] = a.moe_experts;
    j["num_experts_per_tok"] = a.moe_top_k;
    j["moe_intermediate_size"] = a.moe_ffn_dim;
    j["decoder_sparse_step"] = a.moe_sparse_step > 0 ? a.moe_sparse_step : 1;
    j["mlp_only_layers"] = nlohmann::json::array();
    j["norm_topk_prob"] = a.moe_norm_topk_prob;
    j["router_aux_loss_coef"] = a.moe_aux_loss_coeff;
    if (a.moe_shared_ffn_dim > 0) j["shared_expert_intermediate_size"] = a.moe_shared_ffn_dim;
  }
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
