// The MoE experts' products as the recorder keeps them for an accelerator: one grouped GEMM per
// expert-FFN projection per layer (trainer/model/grouped_matmul.h), not one GEMM per expert.
#include <gtest/gtest.h>

#include <cstdio>

#include "common/model_args.h"
#include "trainer/config/config_loader.h"
#include "trainer/model/grouped_matmul.h"
#include "trainer/model/moe.h"
#include "trainer/simulate/simulate.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

// Qwen3-30B-A3B's shapes (dim 2048, 128 experts, expert ffn 768, top 8; 8192 tokens per chip)
// at 2 layers, recorded whole (no extrapolation, no activation checkpointing).
RecordedStep record_30b(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--config", std::string(TITAN_SOURCE_DIR) + "/configs/qwen3_30b_a3b.toml",
                                   "--job.dump_folder", "/tmp/titan_grouped_mm_test", "--model.n_layers", "2",
                                   "--activation_checkpoint.mode", "none", "--simulation.layer_extrapolation", "false"};
  args.insert(args.end(), extra.begin(), extra.end());
  return record_step(load_job_config(args));
}

struct Grouped {
  int64_t ops = 0, expert_mms = 0;
  std::vector<std::vector<devices::MatmulShape>> forward;
};

Grouped count(const RecordedStep& rec) {
  Grouped g;
  for (const auto& e : rec.trace.events()) {
    if (e.type != devices::TraceEvent::Type::kCompute) continue;
    if (e.op.name == "aten::mm" && (e.op.mm.n == 768 || e.op.mm.k == 768 || e.op.mm.m == 768)) ++g.expert_mms;
    if (e.op.name.str().rfind(kGroupedMatmulScope, 0) != 0) continue;
    ++g.ops;
    if (e.op.name == kGroupedMatmulScope) g.forward.push_back(e.op.groups);
  }
  return g;
}

TEST(GroupedMatmulRecording, Qwen3_30B_A3BRecordsOneGroupedGemmPerProjection) {
  const RecordedStep rec = record_30b({});
  const Grouped g = count(rec);
  // 2 layers x (gate, up, down): forward, input gradient, weight gradient each.
  EXPECT_EQ(rec.op_counts.at(kGroupedMatmulScope), 2 * 3);
  EXPECT_EQ(rec.op_counts.at(std::string(kGroupedMatmulScope) + "_backward_input"), 2 * 3);
  EXPECT_EQ(rec.op_counts.at(std::string(kGroupedMatmulScope) + "_backward_weight"), 2 * 3);
  EXPECT_EQ(g.ops, 3 * 2 * 3);
  // No expert's product as a GEMM of its own (the expert ffn width appears nowhere else).
  EXPECT_EQ(g.expert_mms, 0);
  // Each holds every expert's product: 8192 tokens x 8 / 128 = 512 rows each (uniform routing).
  ASSERT_EQ(g.forward.size(), 6u);
  for (const auto& groups : g.forward) {
    ASSERT_EQ(groups.size(), 128u);
    for (const devices::MatmulShape& s : groups) {
      EXPECT_EQ(s.m, 512);
      EXPECT_TRUE((s.n == 768 && s.k == 2048) || (s.n == 2048 && s.k == 768)) << s.n << " x " << s.k;
    }
  }
}

// With expert parallelism a rank's grouped GEMMs hold its local experts only.
TEST(GroupedMatmulRecording, ExpertParallelGroupsTheLocalExperts) {
  const Grouped g = count(record_30b({"--parallelism.expert_parallel_degree", "8"}));
  EXPECT_EQ(g.ops, 3 * 2 * 3);
  EXPECT_EQ(g.expert_mms, 0);
  ASSERT_EQ(g.forward.size(), 6u);
  for (const auto& groups : g.forward) EXPECT_EQ(groups.size(), 128u / 8);
}

// model.moe_grouped_mm false (TorchTitan's use_grouped_mm off): every expert's products are
// GEMMs of their own, 128 per projection and pass, and the step is slower than grouped.
TEST(GroupedMatmulRecording, LoopOfExpertsRecordsOneGemmPerExpertAndIsSlower) {
  const Grouped g = count(record_30b({"--model.moe_grouped_mm", "false"}));
  EXPECT_EQ(g.ops, 0);
  // 2 layers x 3 projections x 128 experts x (forward, input gradient, weight gradient).
  EXPECT_EQ(g.expert_mms, 2 * 3 * 128 * 3);
  auto step = [](const std::string& grouped) {
    return simulate(load_job_config({"--config", std::string(TITAN_SOURCE_DIR) + "/configs/qwen3_30b_a3b.toml",
                                     "--job.dump_folder", "/tmp/titan_grouped_mm_test", "--model.n_layers", "2",
                                     "--simulation.layer_extrapolation", "false", "--model.moe_grouped_mm", grouped}),
                    false)
        .report.step_time_s;
  };
  EXPECT_LT(step("true"), step("false"));
}

// On the CPU the grouped path and the loop compute the same products (fp32 roundoff apart).
TEST(GroupedMatmul, CpuGroupedAndLoopAgree) {
  ModelArgs a = model_flavor("qwen3", "debugmodel_moe");
  a.vocab_size = 64, a.dim = 16, a.moe_ffn_dim = 8;
  std::vector<torch::Tensor> outs, grads;
  for (bool grouped : {true, false}) {
    a.moe_grouped_mm = grouped;
    torch::manual_seed(5);
    MoEImpl moe(a, torch::TensorOptions());
    {
      torch::NoGradGuard g;
      for (auto& p : moe.parameters()) p.normal_(0, 0.3);
    }
    auto x = torch::randn({2, 7, 16}, torch::requires_grad());
    auto y = moe.forward(x);
    y.pow(2).sum().backward();
    outs.push_back(y.detach());
    grads.push_back(torch::cat({x.grad().reshape(-1), moe.experts->w1->weight.grad().reshape(-1),
                                moe.experts->w2->weight.grad().reshape(-1), moe.experts->w3->weight.grad().reshape(-1)}));
  }
  // Not bit for bit: the SwiGLU's vectorised silu meets each element at another lane or in the
  // scalar tail when it runs over all rows instead of one expert's (a few ulps).
  const double out_diff = (outs[0] - outs[1]).abs().max().item<double>() / outs[0].abs().max().item<double>();
  const double grad_diff = (grads[0] - grads[1]).abs().max().item<double>() / grads[0].abs().max().item<double>();
  std::printf("grouped vs loop: max rel diff output %.2e, gradients %.2e\n", out_diff, grad_diff);
  EXPECT_LT(out_diff, 1e-6);
  EXPECT_LT(grad_diff, 1e-6);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
