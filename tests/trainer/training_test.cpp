// End to end: the debug model trains on the shipped corpus and its loss falls within 50 steps.
#include <gtest/gtest.h>

#include "trainer/config/config_loader.h"
#include "trainer/train.h"

namespace titan {
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

TEST(Training, GradientAccumulationMatchesOneBigBatch) {
  auto run = [](const std::string& local) {
    JobConfig cfg = load_job_config({"--config", std::string(TITAN_SOURCE_DIR) + "/configs/debug_model.toml",
                                     "--job.dump_folder", "/tmp/titan_accum_test", "--training.steps", "3",
                                     "--training.global_batch_size", "8", "--training.local_batch_size", local,
                                     "--training.seq_len", "32", "--metrics.peak_flops", "1e11"});
    return train(cfg).losses;
  };
  auto one = run("8"), four = run("2");
  for (size_t i = 0; i < one.size(); ++i) EXPECT_NEAR(four[i], one[i], 1e-5 * one[i]) << "step " << i + 1;
}

}  // namespace
}  // namespace titan
