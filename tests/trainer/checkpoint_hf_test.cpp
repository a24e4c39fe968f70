// Hugging Face interop of checkpoints (trainer/checkpoint/hf_interop.h): export/import round
// trip, tied embeddings, a non-gated MLP's up/down projections and the refusals between MLP
// kinds, and the PyTorch reference (tests/reference/hf_loss.py) computing the same loss on
// the exported weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tests/error_of.h"
#include "tests/trainer/checkpoint_job.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/hf_interop.h"
#include "trainer/step/trainer.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

TEST(Checkpoint, HuggingFaceExportImportRoundTripIsExact) {
  const std::string dir = tmp_dir("hf");
  Trainer t(tiny(dir));
  t.train_step(), t.train_step();
  export_hf(t, dir + "/model.safetensors", torch::kFloat32);
  auto hf = load_safetensors(dir + "/model.safetensors");
  for (const char* n : {"model.embed_tokens.weight", "model.layers.3.self_attn.k_norm.weight",
                        "model.layers.0.mlp.gate_proj.weight", "model.layers.0.post_attention_layernorm.weight",
                        "model.norm.weight", "lm_head.weight"})
    EXPECT_TRUE(hf.count(n)) << n;
  EXPECT_EQ(hf.size(), t.optimizer().params().size());
  Trainer u(tiny(tmp_dir("hf_load"), {"--checkpoint.initial_load_path", dir}));
  Checkpointer c(u);
  c.load_at_start();
  for (size_t i = 0; i < t.optimizer().params().size(); ++i)
    EXPECT_TRUE(torch::equal(t.optimizer().params()[i].param, u.optimizer().params()[i].param));
  // Tied embeddings: no lm_head in the export, and it imports back.
  ModelArgs tied = t.model_args();
  tied.tie_embeddings = true;
  TensorMap titan_t;
  Transformer m(tied, 8, torch::TensorOptions());
  m->init_weights(3);
  for (auto& p : m->named_parameters()) titan_t[p.key()] = p.value().detach();
  auto hf_t = to_hf(titan_t, torch::kFloat32);
  EXPECT_FALSE(hf_t.count("lm_head.weight"));
  auto back = from_hf(hf_t, tied);
  for (auto& [k, v] : titan_t) EXPECT_TRUE(torch::equal(back.at(k), v)) << k;
}

// A non-gated MLP (model.mlp_activation = gelu) exports w1 / w2 as up_proj / down_proj with no
// gate_proj, imports back exactly under the same activation, and neither kind of MLP takes the
// other's export or titan checkpoint.
TEST(Checkpoint, NonGatedMlpExportsUpAndDownProjections) {
  const std::string dir = tmp_dir("hf_gelu");
  const std::vector<std::string> gelu = {"--model.mlp_activation", "gelu"};
  Trainer t(tiny(dir, gelu));
  t.train_step();
  export_hf(t, dir + "/model.safetensors", torch::kFloat32);
  auto hf = load_safetensors(dir + "/model.safetensors");
  EXPECT_TRUE(hf.count("model.layers.0.mlp.up_proj.weight"));
  EXPECT_TRUE(hf.count("model.layers.0.mlp.down_proj.weight"));
  EXPECT_FALSE(hf.count("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_EQ(hf.size(), t.optimizer().params().size());
  EXPECT_TRUE(torch::equal(hf.at("model.layers.1.mlp.up_proj.weight"),
                           t.model()->layers[1]->feed_forward->w1->weight.detach()));
  nlohmann::json config;
  std::ifstream(dir + "/config.json") >> config;
  EXPECT_EQ(config["hidden_act"], "gelu_pytorch_tanh");
  EXPECT_EQ(config["mlp_gated"], false);

  std::vector<std::string> load = gelu;
  load.insert(load.end(), {"--checkpoint.initial_load_path", dir});
  Trainer u(tiny(tmp_dir("hf_gelu_load"), load));
  Checkpointer(u).load_at_start();
  for (size_t i = 0; i < t.optimizer().params().size(); ++i)
    EXPECT_TRUE(torch::equal(t.optimizer().params()[i].param, u.optimizer().params()[i].param));

  Trainer s(tiny(tmp_dir("hf_gelu_into_swiglu"), {"--checkpoint.initial_load_path", dir}));
  EXPECT_NE(error_of([&] { Checkpointer(s).load_at_start(); }, ErrorKind::kConfig)
                .find("mlp.gate_proj.weight is missing (a non-gated MLP's checkpoint? model.mlp_activation is swiglu)"),
            std::string::npos);
  // A SwiGLU export's up_proj has w1's shape: its gate_proj is what refuses it.
  TensorMap swiglu_t;
  for (auto& p : s.model()->named_parameters()) swiglu_t[p.key()] = p.value().detach();
  EXPECT_NE(error_of([&] { from_hf(to_hf(swiglu_t, torch::kFloat32), t.model_args()); }, ErrorKind::kConfig)
                .find("is the gate of a gated (SwiGLU) MLP, but model.mlp_activation = gelu is non-gated"),
            std::string::npos);

  Checkpointer(t).save(1, false);
  Trainer w(tiny(dir));
  EXPECT_NE(error_of([&] { Checkpointer(w).load_at_start(); }, ErrorKind::kConfig)
                .find("another model: mlp_activation: saved \"gelu\", this job \"swiglu\""),
            std::string::npos);
}

TEST(Checkpoint, PyTorchReferenceComputesTheSameLossOnExportedWeights) {
  const std::string dir = tmp_dir("hf_ref");
  Trainer t(tiny(dir));
  for (int i = 0; i < 3; ++i) t.train_step();
  export_hf(t, dir + "/model.safetensors", torch::kFloat32);
  torch::manual_seed(1);
  const ModelArgs& a = t.model_args();
  auto inputs = torch::randint(0, a.vocab_size, {2, 32}, torch::kInt64);
  auto labels = torch::randint(0, a.vocab_size, {2, 32}, torch::kInt64);
  double titan_loss;
  {
    torch::NoGradGuard ng;
    titan_loss = cross_entropy_sum(t.model()->forward(inputs), labels, 64.0).item<double>();
  }
  nlohmann::json cfg = {{"n_layers", a.n_layers}, {"head_dim", a.head_dim}, {"norm_eps", a.norm_eps},
                        {"rope_theta", a.rope_theta}, {"qk_norm", a.qk_norm}};
  save_safetensors(dir + "/batch.safetensors", {{"inputs", inputs}, {"labels", labels}}, {{"config", cfg.dump()}});
  const std::string cmd = "/usr/bin/python3 " + std::string(TITAN_SOURCE_DIR) + "/tests/reference/hf_loss.py " +
                          dir + "/model.safetensors " + dir + "/batch.safetensors " + dir + "/loss.txt";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  double ref = 0;
  std::ifstream(dir + "/loss.txt") >> ref;
  std::printf("titan loss %.10f, PyTorch reference on exported HF weights %.10f\n", titan_loss, ref);
  EXPECT_NEAR(titan_loss, ref, 1e-5 * std::abs(ref));
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
