// Unit tests for plan_buckets(): the fused mode's bucketing.
#include <gtest/gtest.h>

#include "collectives/fusion.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

TEST(PlanBuckets, FillsUpToCapAndKeepsOrder) {
  auto b = plan_buckets({40, 40, 40, 10}, {at::kFloat, at::kFloat, at::kFloat, at::kFloat}, 100);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0], (std::vector<size_t>{0, 1}));
  EXPECT_EQ(b[1], (std::vector<size_t>{2, 3}));
}

TEST(PlanBuckets, OversizedTensorGetsOwnBucket) {
  auto b = plan_buckets({10, 500, 10}, {at::kFloat, at::kFloat, at::kFloat}, 100);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[1], (std::vector<size_t>{1}));
}

TEST(PlanBuckets, SeparatesDtypesInFirstAppearanceOrder) {
  auto b = plan_buckets({4, 2, 4, 8}, {at::kFloat, at::kBFloat16, at::kFloat, at::kLong}, 1000);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0], (std::vector<size_t>{0, 2}));
  EXPECT_EQ(b[1], (std::vector<size_t>{1}));
  EXPECT_EQ(b[2], (std::vector<size_t>{3}));
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
