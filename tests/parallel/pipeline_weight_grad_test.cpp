// Deferred weight gradients (zero-bubble I / W split): inside an I action the linear's weight
// gradient waits in the store; W computes it and it equals what plain autograd gives.
#include <gtest/gtest.h>

#include "parallel/pipeline_weight_grad.h"

namespace titan {
namespace {

TEST(PipelineWeightGrad, DeferredUntilWAndEqualToAutograd) {
  torch::manual_seed(0);
  auto x0 = torch::randn({2, 5, 8}, torch::kFloat64);
  auto w = torch::randn({3, 8}, torch::kFloat64).requires_grad_(true);
  auto ref_w = w.detach().clone().requires_grad_(true);
  auto ref_x = x0.clone().requires_grad_(true);
  torch::matmul(ref_x, ref_w.t()).pow(2).sum().backward();

  WeightGradStore store;
  auto x = x0.clone().requires_grad_(true);
  auto y = deferred_linear(x, w, &store);
  store.begin(/*stage=*/1, /*microbatch=*/0);
  y.pow(2).sum().backward();
  store.end();
  EXPECT_TRUE(x.grad().defined());
  EXPECT_TRUE(torch::allclose(x.grad(), ref_x.grad()));
  EXPECT_FALSE(w.grad().defined()) << "the weight gradient was computed in I";
  EXPECT_EQ(store.pending(), 1u);
  store.flush(1, 0);
  EXPECT_EQ(store.pending(), 0u);
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(torch::allclose(w.grad(), ref_w.grad()));
  store.flush(2, 0);  // a stage that deferred nothing (no linear layer): nothing to do
}

TEST(PipelineWeightGrad, PlainBackwardOutsideI) {
  auto w = torch::randn({3, 4}).requires_grad_(true);
  WeightGradStore store;
  deferred_linear(torch::randn({2, 4}), w, &store).sum().backward();
  EXPECT_TRUE(w.grad().defined());
  EXPECT_EQ(store.pending(), 0u);
}

}  // namespace
}  // namespace titan
