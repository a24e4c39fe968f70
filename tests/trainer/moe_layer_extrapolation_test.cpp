// Layer extrapolation of an MoE model under pipeline parallelism: Qwen3-30B-A3B's PP 2 case
// (48 layers, selective AC every 2 blocks) on the debug MoE's small dimensions. The step must
// come from shallow samples, not silently from a full-depth recording (which made the 30B
// PP 2 simulation take ~26 s instead of ~10 s when its pipeline segments were not affine in
// depth), and equal the full-depth figures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "trainer/config/config_loader.h"
#include "trainer/simulate/simulate.h"

namespace titan {
namespace {

JobConfig moe_pp2(bool extrapolate) {
  return load_job_config({"--config", std::string(TITAN_SOURCE_DIR) + "/configs/debug_moe.toml",
                          "--job.dump_folder", "/tmp/titan_moe_layer_extrapolation_test", "--simulation.enable",
                          "true", "--simulation.num_chips", "8", "--simulation.device", "tpu-v7",
                          "--model.n_layers", "48", "--activation_checkpoint.mode", "selective",
                          "--activation_checkpoint.selective_every", "2", "--parallelism.pipeline_parallel_degree",
                          "2", "--training.local_batch_size", "4", "--simulation.layer_extrapolation",
                          extrapolate ? "true" : "false"});
}

void expect_close(double full, double x, const char* what) {
  EXPECT_LE(std::abs(full - x), 1e-9 * std::abs(full)) << what << ": full depth " << full << ", extrapolated " << x;
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

}  // namespace
}  // namespace titan
