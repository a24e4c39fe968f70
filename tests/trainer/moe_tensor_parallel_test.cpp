// Simulated steps of MoE blocks under tensor parallel (trainer/step/moe_tensor_plan.h): with
// expert TP the experts' products are split over tp and the block issues a dense MLP's tp
// collectives; with experts whole per tp rank under SP the routing statistics are summed over tp.
// Loss parity on real ranks: ctest parallel_loss_parity_expert_tensor_parallel*.
#include <gtest/gtest.h>

#include "trainer/config/config_loader.h"
#include "trainer/model/grouped_matmul.h"
#include "trainer/simulate/simulate.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

JobConfig debug_moe_tp(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--config", std::string(TITAN_SOURCE_DIR) + "/configs/debug_moe.toml",
                                   "--job.dump_folder", "/tmp/titan_moe_tp_test", "--simulation.enable", "true",
                                   "--simulation.num_chips", "8", "--simulation.device", "h100",
                                   "--activation_checkpoint.mode", "none", "--model.vocab_size", "258",
                                   "--parallelism.tensor_parallel_degree", "2",
                                   // 2 rows: 32 or 64 routed rows per expert, so no weight-gradient
                                   // product ([128, rows] x [rows, hidden]) looks like an expert's.
                                   "--training.local_batch_size", "2"};
  args.insert(args.end(), extra.begin(), extra.end());
  return load_job_config(args);
}

// The experts' gate / up products and the down product's input gradient ([rows, dim 128] x
// [128, hidden]) whose hidden size is `n`: 3 per expert and block, each a group of a grouped
// GEMM (trainer/model/grouped_matmul.h; the weight gradients' groups are not counted).
int64_t expert_products(const RecordedStep& rec, int64_t n) {
  int64_t count = 0;
  for (const auto& e : rec.trace.events()) {
    if (e.type != devices::TraceEvent::Type::kCompute || e.op.name.str().rfind(kGroupedMatmulScope, 0) != 0 ||
        e.op.name == std::string(kGroupedMatmulScope) + "_backward_weight")
      continue;
    for (const devices::MatmulShape& s : e.op.groups) count += s.n == n && s.k == 128;
  }
  return count;
}

struct TpCollectives {
  int64_t all_gather = 0, reduce_scatter = 0, all_reduce = 0, stats_all_reduce = 0;
};
TpCollectives tp_collectives(const RecordedStep& rec) {
  TpCollectives c;
  for (const auto& e : rec.trace.events()) {
    if (e.type != devices::TraceEvent::Type::kIssue || e.collective.group != "tp") continue;
    if (e.collective.kind == devices::CollectiveKind::kAllGather) ++c.all_gather;
    if (e.collective.kind == devices::CollectiveKind::kReduceScatter) ++c.reduce_scatter;
    if (e.collective.kind == devices::CollectiveKind::kAllReduce) {
      ++c.all_reduce;
      // Tokens per expert, probability sums and the token count of 8 experts, fp32.
      if (e.collective.bytes == (2 * 8 + 1) * 4) ++c.stats_all_reduce;
    }
  }
  return c;
}

TEST(MoeSimulate, ExpertTensorParallelSplitsTheExpertsAndIssuesTheirTpCollectives) {
  RecordedStep whole = record_step(debug_moe_tp({}));
  RecordedStep split = record_step(debug_moe_tp({"--parallelism.expert_tensor_parallel_degree", "2"}));
  // Every expert product of the 4 MoE blocks at half the hidden size (96 -> 48), none whole.
  EXPECT_EQ(expert_products(whole, 96), 4 * 8 * 3);
  EXPECT_EQ(expert_products(split, 48), expert_products(whole, 96));
  EXPECT_EQ(expert_products(split, 96), 0);
  const TpCollectives a = tp_collectives(whole), b = tp_collectives(split);
  // Experts whole per tp rank under SP: one sum of the routing statistics per block (forward;
  // its backward is the identity), no sequence gather around the block.
  EXPECT_EQ(a.stats_all_reduce, 4);
  EXPECT_EQ(b.stats_all_reduce, 0);
  // Expert TP: per block, the sequence all-gathered into it and its partial output
  // reduce-scattered (forward), and the reverse pair in backward.
  EXPECT_EQ(b.all_gather - a.all_gather, 4 * 2);
  EXPECT_EQ(b.reduce_scatter - a.reduce_scatter, 4 * 2);
  SimulationResult r = simulate(debug_moe_tp({"--parallelism.expert_tensor_parallel_degree", "2"}), false);
  EXPECT_GT(r.mfu_percent, 0.0);
  EXPECT_TRUE(r.memory.fits);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
