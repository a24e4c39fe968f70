// End to end: the debug model trains on the shipped corpus and its loss falls within 50 steps.
#include <gtest/gtest.h>

#include <cstdio>

#include "trainer/config/config_loader.h"
#include "trainer/train.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

TEST(Training, DebugModelLossFallsWithin50Steps) {
  JobConfig cfg = load_job_config({"--config", std::string(TITAN_SOURCE_DIR) + "/configs/debug_model.toml",
                                   "--job.dump_folder", "/tmp/titan_training_test",
                                   "--training.steps", "50", "--metrics.log_freq", "10",
                                   "--metrics.peak_flops", "1e11"});
  TrainResult r = train(cfg);
  ASSERT_EQ(r.losses.size(), 50u);
  // From ln(257) ~ 5.5-6 at start to well under half of it after 50 steps.
  EXPECT_GT(r.losses.front(), 5.0);
  double tail = 0;
  for (size_t i = 45; i < 50; ++i) tail += r.losses[i] / 5;
  EXPECT_LT(tail, 0.5 * r.losses.front()) << "first " << r.losses.front() << " last-5 mean " << tail;
}

// Four micro-batches of 2 against one batch of 8. The first step's loss is the same whatever
// accumulation does (same weights, same tokens); its gradient norm is not, and AdamW's update
// hides a gradient scale, so losses, gradient norms and final weights are all compared.
TEST(Training, GradientAccumulationMatchesOneBigBatch) {
  auto run = [](const std::string& local) {
    JobConfig cfg = load_job_config({"--config", std::string(TITAN_SOURCE_DIR) + "/configs/debug_model.toml",
                                     "--job.dump_folder", "/tmp/titan_accum_test", "--training.steps", "3",
                                     "--training.global_batch_size", "8", "--training.local_batch_size", local,
                                     "--training.seq_len", "32", "--metrics.peak_flops", "1e11"});
    return train(cfg);
  };
  const TrainResult one = run("8"), four = run("2");
  ASSERT_EQ(one.losses.size(), 3u);
  ASSERT_EQ(four.grad_norms.size(), one.grad_norms.size());
  for (size_t i = 0; i < one.losses.size(); ++i) {
    EXPECT_NEAR(four.losses[i], one.losses[i], 1e-6 * one.losses[i]) << "step " << i + 1;
    EXPECT_NEAR(four.grad_norms[i], one.grad_norms[i], 1e-6 * one.grad_norms[i]) << "step " << i + 1;
  }
  ASSERT_EQ(four.final_params.size(), one.final_params.size());
  double worst = 0;
  for (const auto& [name, p] : one.final_params) {
    const torch::Tensor& q = four.final_params.at(name);
    worst = std::max(worst, ((q - p).norm() / p.norm()).item<double>());
  }
  std::printf("worst parameter difference (norm) after 3 steps: %.2e\n", worst);
  EXPECT_LT(worst, 1e-5);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
