// LR schedule: warmup, stable phase, and each decay shape at hand-computed points.
#include <gtest/gtest.h>

#include <cmath>

#include "trainer/components/optimizer.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

TEST(LrSchedule, WarmupThenLinearDecayToMin) {
  LrSchedulerSection s;
  s.warmup_steps = 4;
  s.decay_type = DecayType::kLinear;
  s.min_lr_factor = 0.1;
  // 14 steps: 4 warmup, 10 decay.
  EXPECT_DOUBLE_EQ(lr_factor(s, 14, 0), 0.25);
  EXPECT_DOUBLE_EQ(lr_factor(s, 14, 3), 1.0);
  EXPECT_DOUBLE_EQ(lr_factor(s, 14, 4), 1.0);
  EXPECT_DOUBLE_EQ(lr_factor(s, 14, 9), 0.1 + 0.9 * 0.5);
  EXPECT_NEAR(lr_factor(s, 14, 13), 0.1 + 0.9 * 0.1, 1e-12);
}

TEST(LrSchedule, DecayRatioKeepsAStablePhase) {
  LrSchedulerSection s;
  s.warmup_steps = 2;
  s.decay_ratio = 0.5;
  s.decay_type = DecayType::kCosine;
  s.min_lr_factor = 0.0;
  // 20 steps: warmup 2, stable until step 10, cosine over the last 10.
  EXPECT_DOUBLE_EQ(lr_factor(s, 20, 5), 1.0);
  EXPECT_DOUBLE_EQ(lr_factor(s, 20, 10), 1.0);
  EXPECT_NEAR(lr_factor(s, 20, 15), 0.5 * (1 + std::cos(M_PI * 0.5)), 1e-12);
}

TEST(LrSchedule, SqrtDecay) {
  LrSchedulerSection s;
  s.warmup_steps = 0;
  s.decay_type = DecayType::kSqrt;
  s.min_lr_factor = 0.0;
  EXPECT_DOUBLE_EQ(lr_factor(s, 100, 0), 1.0);
  EXPECT_NEAR(lr_factor(s, 100, 25), 1.0 - std::sqrt(0.25), 1e-12);
}

TEST(Clip, ScalesToMaxNormLikeTorch) {
  auto p = torch::zeros({2}, torch::requires_grad());
  p.mutable_grad() = torch::tensor({3.0f, 4.0f});
  std::vector<NamedParam> params{{"p", p}};
  const double norm = std::sqrt(local_grad_sq_norm(params));
  EXPECT_DOUBLE_EQ(norm, 5.0);
  clip_grads(params, norm, 1.0);
  EXPECT_NEAR(p.grad()[0].item<double>(), 3.0 / (5.0 + 1e-6), 1e-7);
  clip_grads(params, 0.5, 1.0);  // under the limit: unchanged
  EXPECT_NEAR(p.grad()[1].item<double>(), 4.0 / (5.0 + 1e-6), 1e-7);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
