// Layer extrapolation of an MoE model under pipeline parallelism: Qwen3-30B-A3B's PP 2 case
// (48 layers, selective AC every 2 blocks) on the debug MoE's small dimensions. The step must
// come from shallow samples, not silently from a full-depth recording (which made the 30B
// PP 2 simulation take ~26 s instead of ~10 s when its pipeline segments were not affine in
// depth), and equal the full-depth figures. A config whose first samples are still in a
// transient moves deeper, reusing the depths it recorded already (extrapolated_run.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "trainer/config/config_loader.h"
#include "trainer/simulate/simulate.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

JobConfig moe_pp2(bool extrapolate, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {
      "--config", std::string(TITAN_SOURCE_DIR) + "/configs/debug_moe.toml", "--job.dump_folder",
      "/tmp/titan_moe_layer_extrapolation_test", "--simulation.enable", "true", "--simulation.num_chips", "8",
      "--simulation.device", "tpu-v7", "--model.n_layers", "48", "--activation_checkpoint.mode", "selective",
      "--activation_checkpoint.selective_every", "2", "--parallelism.pipeline_parallel_degree", "2",
      "--training.local_batch_size", "4", "--simulation.layer_extrapolation", extrapolate ? "true" : "false"};
  args.insert(args.end(), extra.begin(), extra.end());  // later options win
  return load_job_config(args);
}

// floor: a time is compared next to the step time (a part of 1e-17 s is rounding noise).
void expect_close(double full, double x, const std::string& what, double floor = 0) {
  EXPECT_LE(std::abs(full - x), 1e-9 * std::max(std::abs(full), floor))
      << what << ": full depth " << full << ", extrapolated " << x;
}

TEST(MoeLayerExtrapolation, PipelineStepComesFromShallowSamplesAndEqualsFullDepth) {
  const SimulationResult x = simulate(moe_pp2(true), false);
  ASSERT_EQ(x.extrapolated_from_layers.size(), 3u) << "recorded at full depth: " << x.full_depth_reason;
  // Samples hold whole layer steps (2 stages x the AC period 2) and fewer layers than the model.
  for (int64_t n : x.extrapolated_from_layers) EXPECT_EQ(n % 4, 0) << n;
  EXPECT_LT(x.extrapolated_from_layers[0] + x.extrapolated_from_layers[1] + x.extrapolated_from_layers[2], 48);
  for (const std::string& why : x.rejected_samples) ADD_FAILURE() << "shallower samples rejected: " << why;

  const SimulationResult full = simulate(moe_pp2(false), false);
  EXPECT_TRUE(full.extrapolated_from_layers.empty());
  EXPECT_TRUE(full.full_depth_reason.empty());  // the option was off: nothing to explain
  expect_close(full.report.step_time_s, x.report.step_time_s, "step time");
  expect_close(full.mfu_percent, x.mfu_percent, "MFU");
  expect_close(full.report.exposed_comm_s, x.report.exposed_comm_s, "exposed comm");
  expect_close(full.pipeline_bubble_fraction, x.pipeline_bubble_fraction, "bubble");
  EXPECT_EQ(full.memory.total, x.memory.total);
  EXPECT_EQ(full.pipeline_rank_memory_gib, x.pipeline_rank_memory_gib);
  EXPECT_EQ(full.report.ops, x.report.ops);
  EXPECT_EQ(full.report.kernels, x.report.kernels);
}

// Shallow samples still in a transient, as 30B-A3B's PP 2 on 1024 v7 has them: with a
// 4096-token vocabulary and 40 layers the pipeline ranks' memory peaks are not affine over the
// first samples (measured: 4, 8, 12 rank 0's part 10; 8, 12, 16 rank 1's part 4). Each deeper
// try records only its deepest sample and takes the two depths it shares with the rejected try
// from the figures already replayed; the result must still be the full-depth recording's.
TEST(MoeLayerExtrapolation, DeeperSamplesReuseReplayedDepthsAndEqualFullDepth) {
  const std::vector<std::string> vocab = {"--model.vocab_size", "4096", "--model.n_layers", "40"};
  const SimulationResult x = simulate(moe_pp2(true, vocab), false);
  ASSERT_EQ(x.extrapolated_from_layers.size(), 3u) << "recorded at full depth: " << x.full_depth_reason;
  // Two tries rejected, each one layer step (2 stages x AC period 2) shallower than the next:
  // the accepted samples share depths with both, so they came from the replayed figures.
  ASSERT_EQ(x.rejected_samples.size(), 2u);
  EXPECT_EQ(x.rejected_samples[0].rfind("4, 8, 12: ", 0), 0u) << x.rejected_samples[0];
  EXPECT_EQ(x.rejected_samples[1].rfind("8, 12, 16: ", 0), 0u) << x.rejected_samples[1];
  EXPECT_EQ(x.extrapolated_from_layers, (std::vector<int64_t>{12, 16, 20}));

  const SimulationResult full = simulate(moe_pp2(false, vocab), false);
  ASSERT_TRUE(full.extrapolated_from_layers.empty());
  const double step = full.report.step_time_s;
  expect_close(step, x.report.step_time_s, "step time");
  expect_close(full.report.compute_s, x.report.compute_s, "compute busy", step);
  expect_close(full.report.comm_s, x.report.comm_s, "communication busy", step);
  expect_close(full.report.exposed_comm_s, x.report.exposed_comm_s, "exposed comm", step);
  expect_close(full.report.idle_s, x.report.idle_s, "idle", step);
  expect_close(full.report.executed_flops, x.report.executed_flops, "executed FLOPs");
  expect_close(full.mfu_percent, x.mfu_percent, "MFU");
  expect_close(full.tokens_per_s_per_chip, x.tokens_per_s_per_chip, "tokens/s/chip");
  expect_close(full.pipeline_bubble_fraction, x.pipeline_bubble_fraction, "bubble");
  ASSERT_EQ(full.pipeline_rank_busy_s.size(), x.pipeline_rank_busy_s.size());
  for (size_t q = 0; q < full.pipeline_rank_busy_s.size(); ++q)
    expect_close(full.pipeline_rank_busy_s[q], x.pipeline_rank_busy_s[q], "rank " + std::to_string(q) + " busy");
  EXPECT_EQ(full.memory.total, x.memory.total);
  EXPECT_EQ(full.pipeline_rank_memory_gib, x.pipeline_rank_memory_gib);
  EXPECT_EQ(full.report.ops, x.report.ops);
  EXPECT_EQ(full.report.kernels, x.report.kernels);
  EXPECT_EQ(full.report.collectives, x.report.collectives);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
