// A non-finite loss or gradient norm (here from --optimizer.lr 1e30) either stops the job with
// a clear error or, with training.skip_nonfinite_steps, skips and counts the step; either way
// the weights stay finite.
#include <gtest/gtest.h>

#include "common/error.h"
#include "trainer/config/config_loader.h"
#include "trainer/step/trainer.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

JobConfig huge_lr(bool skip) {
  return load_job_config({"--config", std::string(TITAN_SOURCE_DIR) + "/configs/debug_model.toml",
                          "--job.dump_folder", "/tmp/titan_nonfinite_test", "--training.seq_len", "32",
                          "--training.local_batch_size", "2", "--training.steps", "6",
                          "--lr_scheduler.warmup_steps", "0", "--optimizer.lr", "1e30",
                          "--metrics.peak_flops", "1e11",
                          "--training.skip_nonfinite_steps", skip ? "true" : "false"});
}

bool all_finite(Trainer& t) {
  for (auto& p : t.model()->parameters()) {
    if (!torch::isfinite(p).all().item<bool>()) return false;
  }
  return true;
}

TEST(NonFinite, StopsWithAClearErrorByDefault) {
  Trainer t(huge_lr(false));
  std::string msg;
  try {
    while (t.step() < 6) t.train_step();
  } catch (const Error& e) {
    msg = e.what();
  }
  ASSERT_FALSE(msg.empty()) << "lr 1e30 trained 6 steps without an error";
  EXPECT_TRUE(msg.find("is not finite; stopping before the optimizer step") != std::string::npos ||
              msg.find("non-finite") != std::string::npos)
      << msg;
  EXPECT_TRUE(all_finite(t));
}

TEST(NonFinite, SkipsAndCountsWhenAsked) {
  Trainer t(huge_lr(true));
  int skipped = 0;
  while (t.step() < 6) {
    const auto r = t.train_step();
    if (r.skipped) {
      ++skipped;
      EXPECT_FALSE(std::isfinite(r.loss) && std::isfinite(r.grad_norm));
    }
  }
  EXPECT_GT(skipped, 0);
  EXPECT_EQ(t.skipped_steps(), skipped);
  EXPECT_TRUE(all_finite(t));
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
