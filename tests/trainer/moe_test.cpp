// Mixture of experts (trainer/model/moe.h): routing and top-k, the grouped GEMM against a
// dense per-token loop, the aux-loss-free bias update, meta-device routing counts, the Qwen3
// MoE flavors' sizes, config errors, and simulated steps of the debug MoE and of 30B-A3B.
// Parity with the PyTorch reference: reference_parity_test.cpp (ReferenceParity.Qwen3Moe*).
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "common/error.h"
#include "tests/error_of.h"
#include "trainer/checkpoint/hf_interop.h"
#include "trainer/config/config_loader.h"
#include "trainer/config/resolve_model.h"
#include "trainer/model/grouped_matmul.h"
#include "trainer/model/moe.h"
#include "trainer/simulate/simulate.h"
#include "trainer/simulate/simulate_pipeline.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

// `f` throws an error whose message holds `needle`.
::testing::AssertionResult fails_with(const std::function<void()>& f, const std::string& needle) {
  const std::string msg = error_of(f);
  if (msg != "no error" && msg.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected an error holding '" << needle << "', got: " << msg;
}
#define EXPECT_THAT_ERROR(stmt, needle) EXPECT_TRUE(fails_with([&] { (void)(stmt); }, needle))

ModelArgs tiny_moe() {
  ModelArgs a = model_flavor("qwen3", "debugmodel_moe");
  a.vocab_size = 64;
  return a;
}

TEST(Moe, RouterTakesTopKOfFp32SoftmaxAndRenormalises) {
  ModelArgs a = tiny_moe();
  a.dim = 4, a.moe_experts = 4, a.moe_top_k = 2;
  MoEImpl moe(a, torch::TensorOptions());
  torch::NoGradGuard g;
  // Logits = x (identity router): token 0 prefers experts 3 then 1.
  moe.router->weight.copy_(torch::eye(4));
  auto x = torch::tensor({{0.0f, 1.0f, -2.0f, 3.0f}});
  Routing r = moe.route(x);
  EXPECT_EQ(r.indices[0][0].item<int64_t>(), 3);
  EXPECT_EQ(r.indices[0][1].item<int64_t>(), 1);
  auto p = torch::softmax(x, -1);
  const double w3 = p[0][3].item<double>(), w1 = p[0][1].item<double>();
  EXPECT_NEAR(r.weights[0][0].item<double>(), w3 / (w3 + w1), 1e-6);
  EXPECT_NEAR(r.weights.sum().item<double>(), 1.0, 1e-6);
  EXPECT_EQ(r.scores.scalar_type(), torch::kFloat32);
  // Without renormalisation the weights are the probabilities themselves.
  moe.norm_topk_prob = false;
  EXPECT_NEAR(moe.route(x).weights[0][0].item<double>(), w3, 1e-6);
  // The bias chooses (expert 2 now wins) but does not weigh: its weight is its probability.
  moe.bias_update_coeff = 1e-3;
  moe.expert_bias.copy_(torch::tensor({0.0f, 0.0f, 10.0f, 0.0f}));
  Routing b = moe.route(x);
  EXPECT_EQ(b.indices[0][0].item<int64_t>(), 2);
  EXPECT_NEAR(b.weights[0][0].item<double>(), p[0][2].item<double>(), 1e-6);
}

TEST(Moe, ForwardEqualsPerTokenSumOfChosenExperts) {
  ModelArgs a = tiny_moe();
  a.dim = 16, a.moe_ffn_dim = 8;
  MoEImpl moe(a, torch::TensorOptions());
  torch::manual_seed(3);
  torch::NoGradGuard g;
  for (auto& p : moe.parameters()) p.normal_(0, 0.3);
  auto x = torch::randn({2, 5, 16});
  auto y = moe.forward(x);
  auto flat = x.reshape({-1, 16});
  Routing r = moe.route(flat);
  auto& w1 = moe.experts->w1->weight;
  auto& w2 = moe.experts->w2->weight;
  auto& w3 = moe.experts->w3->weight;
  for (int64_t t = 0; t < flat.size(0); ++t) {
    auto want = torch::zeros({16});
    for (int64_t j = 0; j < a.moe_top_k; ++j) {
      const int64_t e = r.indices[t][j].item<int64_t>();
      auto h = torch::silu(w1[e].matmul(flat[t])) * w3[e].matmul(flat[t]);
      want += r.weights[t][j] * w2[e].matmul(h);
    }
    EXPECT_TRUE(torch::allclose(y.reshape({-1, 16})[t], want, 1e-5, 1e-6)) << "token " << t;
  }
  // Every routed slot counted for the bias update.
  EXPECT_EQ(moe.tokens_per_expert.sum().item<double>(), 0.0) << "no grad mode: not a training forward";
}

TEST(Moe, ExpertBiasUpdateMovesTowardsBalanceAndIsCentred) {
  ModelArgs a = tiny_moe();
  a.moe_bias_update_coeff = 0.01;
  Transformer model(a, 8, torch::TensorOptions());
  model->init_weights(1);
  auto& moe = *model->layers[0]->moe;
  moe.tokens_per_expert.copy_(torch::tensor({10.f, 0.f, 2.f, 4.f, 4.f, 4.f, 4.f, 4.f}));  // mean 4
  int calls = 0;
  model->reduce_expert_load = [&](std::vector<torch::Tensor>& loads) {
    ++calls;
    EXPECT_EQ(loads.size(), 4u);  // every MoE block's load
  };
  update_expert_bias(model);
  EXPECT_EQ(calls, 1);
  // sign(mean - load) * coeff = (-1, +1, +1, 0 ...) * 0.01, minus its mean (0.01 / 8).
  auto b = moe.expert_bias;
  EXPECT_NEAR(b[0].item<double>(), -0.01 - 0.01 / 8, 1e-7);
  EXPECT_NEAR(b[1].item<double>(), 0.01 - 0.01 / 8, 1e-7);
  EXPECT_NEAR(b[3].item<double>(), -0.01 / 8, 1e-7);
  EXPECT_NEAR(b.sum().item<double>(), 0.0, 1e-7);
  EXPECT_EQ(moe.tokens_per_expert.abs().sum().item<double>(), 0.0) << "load restarts";
  // A training forward counts N k slots per block.
  auto tokens = torch::randint(0, 64, {2, 8}, torch::kInt64);
  model->forward(tokens).sum().backward();
  EXPECT_EQ(moe.tokens_per_expert.sum().item<double>(), 2 * 8 * a.moe_top_k);
}

TEST(Moe, MetaRoutingCountsUniformAndSkewed) {
  auto uniform = meta_expert_counts(1000, 8, 128, {});
  EXPECT_EQ(std::accumulate(uniform.begin(), uniform.end(), int64_t{0}), 8000);
  EXPECT_EQ(*std::max_element(uniform.begin(), uniform.end()) - *std::min_element(uniform.begin(), uniform.end()), 1);
  MetaRouting skew{MetaRouting::Kind::kSkewed, 1.2};
  auto s = meta_expert_counts(1000, 8, 128, skew);
  EXPECT_EQ(std::accumulate(s.begin(), s.end(), int64_t{0}), 8000);
  for (size_t i = 1; i < s.size(); ++i) EXPECT_LE(s[i], s[i - 1]) << i;
  EXPECT_LE(s[0], 1000) << "an expert takes each token once at most";
  EXPECT_EQ(s[0], 1000) << "Zipf 1.2 over 128 experts gives the first more than every token: capped";
  EXPECT_GT(s[127], 0);
  EXPECT_EQ(meta_routing_kind("skewed"), MetaRouting::Kind::kSkewed);
  EXPECT_THAT_ERROR(meta_routing_kind("hot"), "simulation.moe_routing 'hot'");
}

TEST(Moe, Qwen3MoeFlavorsMatchTheirPublishedSizes) {
  // Qwen3-30B-A3B: 30.5B parameters, 3.3B activated; 235B-A22B: 235B, 22B (model cards).
  ModelArgs s = model_flavor("qwen3", "30B-A3B");
  EXPECT_NEAR(s.num_params() / 1e9, 30.5, 0.1);
  EXPECT_NEAR(s.num_active_params() / 1e9, 3.3, 0.06);
  ModelArgs l = model_flavor("qwen3", "235B-A22B");
  EXPECT_NEAR(l.num_params() / 1e9, 235.1, 0.5);
  EXPECT_NEAR(l.num_active_params() / 1e9, 22.1, 0.2);
  // The built model holds exactly num_params() parameters (meta: no memory).
  ModelArgs t = tiny_moe();
  t.moe_shared_ffn_dim = 32, t.moe_sparse_step = 2;
  Transformer m(t, 8, torch::TensorOptions().device(torch::kMeta));
  int64_t n = 0;
  for (auto& p : m->parameters()) n += p.numel();
  EXPECT_EQ(n, t.num_params());
  EXPECT_TRUE(m->layers[1]->moe && !m->layers[0]->moe && m->layers[0]->feed_forward);
  // FLOPs per token count the active parameters only.
  EXPECT_DOUBLE_EQ(flops_per_token(s, 4096),
                   6.0 * double(s.num_active_params() - s.num_embedding_params()) + 12.0 * 48 * 32 * 128 * 4096);
}

TEST(Moe, BadMoeSettingsNameTheirKey) {
  auto resolve = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {"--config", std::string(TITAN_SOURCE_DIR) + "/configs/debug_moe.toml",
                                     "--model.vocab_size", "64"};
    args.insert(args.end(), extra.begin(), extra.end());
    return resolve_model_args(load_job_config(args), 0);
  };
  EXPECT_THAT_ERROR(resolve({"--model.moe_top_k", "9"}), "model.moe_top_k (9) must not exceed model.moe_experts (8)");
  EXPECT_THAT_ERROR(resolve({"--model.moe_experts", "-1"}), "model.moe_experts");
  EXPECT_THAT_ERROR(resolve({"--model.mlp_activation", "gelu"}), "model.mlp_activation must be swiglu");
  EXPECT_THAT_ERROR(resolve({"--model.moe_aux_loss_coeff", "-2"}), "model.moe_aux_loss_coeff");
  EXPECT_THAT_ERROR(resolve_model_args(load_job_config({"--config", std::string(TITAN_SOURCE_DIR) + "/configs/debug_model.toml",
                                                       "--model.moe_top_k", "2"}), 64),
                    "model.moe_experts must be positive");
  EXPECT_THAT_ERROR(model_flavor("qwen3", "30B-A4B"), "debugmodel_moe");
}

// HF names: the router as mlp.gate, each expert's slice of the stacked weights as
// mlp.experts.M.{gate,up,down}_proj; export then import gives the same tensors back.
TEST(Moe, HuggingFaceNamesRoundTrip) {
  ModelArgs a = tiny_moe();
  Transformer model(a, 8, torch::TensorOptions());
  model->init_weights(4);
  TensorMap full;
  for (auto& p : model->named_parameters()) full[p.key()] = p.value().detach();
  TensorMap hf = to_hf(full, torch::kFloat32);
  EXPECT_EQ(hf.count("model.layers.2.mlp.gate.weight"), 1u);
  ASSERT_EQ(hf.count("model.layers.2.mlp.experts.7.down_proj.weight"), 1u);
  EXPECT_TRUE(torch::equal(hf.at("model.layers.2.mlp.experts.7.down_proj.weight"),
                           full.at("layers.2.moe.experts.w2.weight")[7]));
  EXPECT_EQ(hf.at("model.layers.0.mlp.experts.3.gate_proj.weight").sizes(), (std::vector<int64_t>{96, 128}));
  EXPECT_EQ(hf.size(), full.size() - 3 * 4 + 3 * 4 * 8);
  TensorMap back = from_hf(hf, a);
  ASSERT_EQ(back.size(), full.size());
  for (auto& [k, v] : full) EXPECT_TRUE(torch::equal(back.at(k), v)) << k;
  hf.erase("model.layers.1.mlp.experts.5.up_proj.weight");
  EXPECT_THAT_ERROR(from_hf(hf, a), "expert 5 of 8 (model.moe_experts) is missing");
  const std::string cfg = hf_config_json(model_flavor("qwen3", "30B-A3B"), torch::kBFloat16);
  EXPECT_NE(cfg.find("\"num_experts\": 128"), std::string::npos) << cfg;
  EXPECT_NE(cfg.find("\"moe_intermediate_size\": 768"), std::string::npos) << cfg;
  EXPECT_NE(cfg.find("Qwen3MoeForCausalLM"), std::string::npos) << cfg;
}

JobConfig moe_sim(const std::string& config, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--config", std::string(TITAN_SOURCE_DIR) + "/configs/" + config,
                                   "--job.dump_folder", "/tmp/titan_moe_test"};
  args.insert(args.end(), extra.begin(), extra.end());
  return load_job_config(args);
}

// The debug MoE's per-expert products (expert ffn 96, dim 128) and their row counts: the
// groups of the grouped GEMMs the recorder keeps (trainer/model/grouped_matmul.h).
int64_t expert_mms(const devices::Trace& trace, int64_t* min_m = nullptr, int64_t* max_m = nullptr) {
  int64_t n = 0;
  for (const auto& e : trace.events()) {
    // An expert's gate / up product and its down product's input gradient: [count, dim] x [dim, 96].
    if (e.type != devices::TraceEvent::Type::kCompute || e.op.name.str().rfind(kGroupedMatmulScope, 0) != 0 ||
        e.op.name == std::string(kGroupedMatmulScope) + "_backward_weight")
      continue;
    for (const devices::MatmulShape& s : e.op.groups) {
      if (s.n != 96 || s.k != 128) continue;
      ++n;
      if (min_m) *min_m = std::min(*min_m, s.m);
      if (max_m) *max_m = std::max(*max_m, s.m);
    }
  }
  return n;
}

TEST(MoeSimulate, DebugMoeRecordsOneProductPerExpertAndReplays) {
  JobConfig cfg = moe_sim("debug_moe.toml", {"--simulation.enable", "true", "--simulation.num_chips", "8",
                                             "--simulation.device", "h100", "--activation_checkpoint.mode", "none"});
  RecordedStep uni = record_step(cfg);
  // 4 MoE layers x 3 expert projections, each one grouped GEMM over the 8 experts forward and
  // one per gradient (input, weight) backward; GEMMs of their own: the attention projections,
  // routers and head as for a dense model.
  const int64_t dense_mms = 3 * (4 * 4 + 4 + 1);
  EXPECT_EQ(uni.op_counts["aten::mm"], dense_mms);
  const std::string grouped = kGroupedMatmulScope;
  for (const char* pass : {"", "_backward_input", "_backward_weight"}) EXPECT_EQ(uni.op_counts[grouped + pass], 4 * 3);
  // Every expert's gate and up products and its down product's input gradient, in the groups.
  EXPECT_EQ(expert_mms(uni.trace), 4 * 8 * 3);
  cfg.simulation.moe_routing = "skewed";
  cfg.simulation.moe_routing_zipf = 2.0;
  RecordedStep skew = record_step(cfg);
  // Skewed: fewer experts get tokens at Zipf 2 only if some receive none; the products'
  // row counts spread (hot experts take every token).
  int64_t umin = 1 << 30, umax = 0, smin = 1 << 30, smax = 0;
  expert_mms(uni.trace, &umin, &umax);
  expert_mms(skew.trace, &smin, &smax);
  EXPECT_GT(smax, umax);
  EXPECT_LT(smin, umin);
  SimulationResult r = simulate(cfg, false);
  EXPECT_GT(r.mfu_percent, 0.0);
}

TEST(MoeSimulate, Qwen3_30B_A3BOn1024ChipsUsesActiveParameters) {
  JobConfig cfg = moe_sim("qwen3_30b_a3b.toml");
  SimulationResult uni = simulate(cfg, false);
  ModelArgs a = model_flavor("qwen3", "30B-A3B");
  EXPECT_DOUBLE_EQ(uni.flops_per_token, flops_per_token(a, cfg.training.seq_len));
  EXPECT_GT(uni.mfu_percent, 1.0);
  EXPECT_LT(uni.mfu_percent, 100.0);
  EXPECT_TRUE(uni.memory.fits);
  // Skewed routing: the hot experts' products are larger; the step is no faster.
  cfg.simulation.moe_routing = "skewed";
  SimulationResult skew = simulate(cfg, false);
  EXPECT_GE(skew.report.step_time_s, uni.report.step_time_s * 0.999);
}

// Expert parallelism inside pipeline stages: each stage's MoE blocks hold E / ep experts and
// exchange tokens over that stage's ep group (taken from dp_shard at the stage's pp coordinate).
// 8 chips: pp 2 x dp_shard 4, ep 2; pipeline rank 0 holds layers 0 and 1 of 4.
TEST(MoeSimulate, DebugMoeExpertParallelInsidePipelineStages) {
  const std::vector<std::string> base = {"--simulation.enable", "true", "--simulation.num_chips", "8",
                                         "--simulation.device", "h100", "--activation_checkpoint.mode", "none",
                                         "--parallelism.pipeline_parallel_degree", "2",
                                         "--training.local_batch_size", "4"};
  std::vector<std::string> with_ep = base;
  with_ep.insert(with_ep.end(), {"--parallelism.expert_parallel_degree", "2"});
  // Pipeline rank 0's recorded step: its expert products and its all-to-alls.
  struct Counts {
    int64_t expert_mms = 0, exchanges = 0, microbatches = 0;
    std::set<std::string> groups;
  };
  auto count = [](const RecordedStep& rec) {
    Counts c;
    EXPECT_TRUE(rec.pipeline);
    if (!rec.pipeline) return c;
    c.microbatches = rec.pipeline->recorded_microbatches * rec.pipeline->runs;
    for (const auto& seg : rec.pipeline->ranks[0]) {
      c.expert_mms += expert_mms(seg.trace);
      for (const auto& e : seg.trace.events()) {
        if (e.type == devices::TraceEvent::Type::kIssue && e.collective.kind == devices::CollectiveKind::kAllToAll) {
          ++c.exchanges;
          c.groups.insert(e.collective.group);
        }
      }
    }
    return c;
  };
  const Counts pp = count(record_step(moe_sim("debug_moe.toml", base)));
  const Counts ep = count(record_step(moe_sim("debug_moe.toml", with_ep)));
  ASSERT_GT(ep.microbatches, 0);
  EXPECT_EQ(ep.microbatches, pp.microbatches);
  // Half the experts per block on this rank: half the per-expert products.
  EXPECT_GT(pp.expert_mms, 0);
  EXPECT_EQ(2 * ep.expert_mms, pp.expert_mms);
  // Per block and micro-batch: the counts, the rows out and back in forward, the rows' two
  // reverse exchanges in backward; 2 blocks on this rank.
  EXPECT_EQ(pp.exchanges, 0);
  EXPECT_EQ(ep.exchanges, 2 * ep.microbatches * 5);
  EXPECT_EQ(ep.groups, std::set<std::string>{"ep2"});
  SimulationResult r = simulate(moe_sim("debug_moe.toml", with_ep), false);
  EXPECT_GT(r.mfu_percent, 0.0);
  EXPECT_TRUE(r.memory.fits);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
