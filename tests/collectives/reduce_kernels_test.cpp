// Unit tests for reduce_ordered(): rank-order reductions, bf16 rounding, aliasing.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "collectives/reduce_kernels.h"
#include "common/error.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

std::vector<const void*> ptrs(const std::vector<at::Tensor>& ts) {
  std::vector<const void*> p;
  for (const auto& t : ts) p.push_back(t.data_ptr());
  return p;
}

TEST(ReduceOrdered, Float32SumIsSequentialInRankOrder) {
  torch::manual_seed(0);
  std::vector<at::Tensor> xs;
  for (int r = 0; r < 4; ++r) xs.push_back(torch::randn({3000}));
  at::Tensor out = torch::empty({3000});
  reduce_ordered(at::kFloat, ReduceOp::kSum, ptrs(xs), out.data_ptr(), 3000);
  at::Tensor expected = ((xs[0] + xs[1]) + xs[2]) + xs[3];
  EXPECT_TRUE(torch::equal(out, expected));
}

TEST(ReduceOrdered, OutputMayAliasAnInput) {
  std::vector<at::Tensor> xs = {torch::full({2500}, 1.0), torch::full({2500}, 2.0),
                                torch::full({2500}, 4.0)};
  reduce_ordered(at::kFloat, ReduceOp::kSum, ptrs(xs), xs[2].data_ptr(), 2500);
  EXPECT_TRUE(torch::equal(xs[2], torch::full({2500}, 7.0)));
}

TEST(ReduceOrdered, BFloat16AccumulatesInFloatAndRoundsOnce) {
  // 256 + 1 + 1: pairwise bf16 adds would lose both 1s (bf16 has 8 mantissa bits).
  auto a = torch::full({4}, 256.0, torch::kBFloat16);
  auto b = torch::full({4}, 1.0, torch::kBFloat16);
  auto out = torch::empty({4}, torch::kBFloat16);
  reduce_ordered(at::kBFloat16, ReduceOp::kSum, ptrs({a, b, b}), out.data_ptr(), 4);
  EXPECT_EQ(out[0].item<float>(), 258.0f);
}

TEST(ReduceOrdered, MaxAndIntegerAverage) {
  auto a = torch::tensor({1, -7, 5}, torch::kLong);
  auto b = torch::tensor({4, -2, 6}, torch::kLong);
  auto out = torch::empty({3}, torch::kLong);
  reduce_ordered(at::kLong, ReduceOp::kMax, ptrs({a, b}), out.data_ptr(), 3);
  EXPECT_TRUE(torch::equal(out, torch::tensor({4, -2, 6}, torch::kLong)));
  reduce_ordered(at::kLong, ReduceOp::kAvg, ptrs({a, b}), out.data_ptr(), 3);
  EXPECT_TRUE(torch::equal(out, torch::tensor({2, -4, 5}, torch::kLong)));  // truncating
}

TEST(ReduceOrdered, RejectsBool) {
  auto a = torch::zeros({2}, torch::kBool);
  EXPECT_THROW(reduce_ordered(at::kBool, ReduceOp::kSum, ptrs({a}), a.data_ptr(), 2), Error);
  EXPECT_FALSE(reducible_dtype(at::kBool));
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
