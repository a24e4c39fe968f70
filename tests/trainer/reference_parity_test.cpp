// Parity with the PyTorch reference (tests/reference/qwen3_reference.py, run by Debian's
// /usr/bin/python3): same weights and batch through a safetensors file, then logits, loss,
// clipped gradients and parameters after one AdamW step must agree within 1e-5 relative.
// Both kernel paths: the composite ATen ops end to end; the fused kernels with the reference
// AdamW stepping from the C++ gradients (why: qwen3_reference.py check()). SwiGLU and the
// non-gated gelu / relu MLPs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "trainer/config/config_enums.h"
#include "trainer/model/model.h"
#include "trainer/components/optimizer.h"
#include "trainer/checkpoint/safetensors.h"

namespace titan {
namespace {

void run_parity(ModelArgs a, const std::string& tag, bool fused = false) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("titan_parity_" + tag);
  fs::create_directories(dir);
  const int64_t B = 3, S = 24;
  Transformer model(a, S, torch::TensorOptions());
  model->set_fused_kernels(FusedKernels::all(fused));
  model->init_weights(11);
  torch::manual_seed(5);
  auto inputs = torch::randint(0, a.vocab_size, {B, S}, torch::kInt64);
  auto labels = torch::randint(0, a.vocab_size, {B, S}, torch::kInt64);

  OptimizerSection opt_cfg;
  opt_cfg.lr = 1e-3;
  const double max_norm = 0.5;  // small enough that clipping is active
  nlohmann::json cfg = {{"n_layers", a.n_layers}, {"head_dim", a.head_dim}, {"norm_eps", a.norm_eps},
                        {"rope_theta", a.rope_theta}, {"qk_norm", a.qk_norm},
                        {"mlp_activation", to_string(a.mlp_activation)}, {"lr", opt_cfg.lr},
                        {"beta1", opt_cfg.beta1}, {"beta2", opt_cfg.beta2}, {"eps", opt_cfg.eps},
                        {"weight_decay", opt_cfg.weight_decay}, {"max_norm", max_norm}};
  TensorMap in{{"inputs", inputs}, {"labels", labels}};
  std::vector<NamedParam> params;
  for (auto& p : model->named_parameters()) {
    in["param." + p.key()] = p.value().detach().clone();
    params.push_back({p.key(), p.value()});
  }
  save_safetensors((dir / "in.safetensors").string(), in, {{"config", cfg.dump()}});

  auto logits = model->forward(inputs);
  auto loss = cross_entropy_sum(logits, labels, double(B * S), fused);
  loss.backward();
  const double norm = std::sqrt(local_grad_sq_norm(params));
  // Clipping must act, or the clipped gradients compared below would not test it.
  EXPECT_GT(norm, 1.5 * max_norm) << tag;
  clip_grads(params, norm, max_norm);
  AdamW opt(params, opt_cfg);
  opt.step(opt_cfg.lr);

  TensorMap out{{"logits", logits.detach()},
                {"loss", loss.detach().reshape({1})},
                {"grad_norm", torch::tensor({norm}, torch::kFloat64)}};
  for (auto& p : params) {
    out["grad." + p.name] = p.param.grad();
    out["param_after." + p.name] = p.param.detach();
  }
  save_safetensors((dir / "cpp.safetensors").string(), out);

  const std::string cmd = "/usr/bin/python3 " + std::string(TITAN_SOURCE_DIR) +
                          "/tests/reference/qwen3_reference.py check " + (dir / "in.safetensors").string() +
                          " " + (dir / "cpp.safetensors").string() + " --tol 1e-5" +
                          (fused ? " --optimizer-on-cpp-grads" : "");
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << "reference parity failed for " << tag << " (see the table above)";
  fs::remove_all(dir);
}

ModelArgs small(const std::string& name) {
  ModelArgs a = model_flavor(name, name == "qwen3" ? "debugmodel" : "8B");
  a.dim = 48, a.n_layers = 2, a.n_heads = 4, a.n_kv_heads = 2, a.head_dim = 12, a.ffn_dim = 80;
  a.vocab_size = 97;
  return a;
}

TEST(ReferenceParity, Qwen3WithQkNorm) { run_parity(small("qwen3"), "qwen3"); }

TEST(ReferenceParity, Qwen3TiedEmbeddings) {
  ModelArgs a = small("qwen3");
  a.tie_embeddings = true;
  run_parity(a, "qwen3_tied");
}

TEST(ReferenceParity, Llama3NoQkNorm) { run_parity(small("llama3"), "llama3"); }

TEST(ReferenceParity, Qwen3WithQkNormFusedKernels) { run_parity(small("qwen3"), "qwen3_fused", true); }

TEST(ReferenceParity, Qwen3TiedEmbeddingsFusedKernels) {
  ModelArgs a = small("qwen3");
  a.tie_embeddings = true;
  run_parity(a, "qwen3_tied_fused", true);
}

TEST(ReferenceParity, Llama3NoQkNormFusedKernels) { run_parity(small("llama3"), "llama3_fused", true); }

// Non-gated MLPs (model.mlp_activation): w2(gelu_tanh(w1 x)) and w2(relu(w1 x)), no w3; the
// fused run keeps its fused linear, norm, RoPE, attention and loss kernels around the plain
// activation.
ModelArgs non_gated(MlpActivation act) {
  ModelArgs a = small("qwen3");
  a.mlp_activation = act;
  return a;
}

TEST(ReferenceParity, Qwen3GeluMlp) { run_parity(non_gated(MlpActivation::kGelu), "qwen3_gelu"); }

TEST(ReferenceParity, Qwen3GeluMlpFusedKernels) {
  run_parity(non_gated(MlpActivation::kGelu), "qwen3_gelu_fused", true);
}

TEST(ReferenceParity, Qwen3ReluMlp) { run_parity(non_gated(MlpActivation::kRelu), "qwen3_relu"); }

}  // namespace
}  // namespace titan
