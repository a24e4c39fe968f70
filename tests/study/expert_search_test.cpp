// titan-study --search over expert parallel degrees: each ep that divides dp_shard x cp is a
// family of its own with parallelism.expert_parallel_degree set; others are skipped, saying why.
#include <gtest/gtest.h>

#include <algorithm>

#include "common/error.h"
#include "study/layout_search.h"

namespace titan::study {
namespace {

TEST(StudySearch, ExpertParallelDegreesAreFamiliesOfTheirOwn) {
  SearchSpace s;
  s.tp = {1, 2};
  s.pp = {1};
  s.dp_replicate = {1};
  s.local_batch = {1};
  s.activation_checkpoint = {"none"};
  s.collective_modes = {"fused"};
  s.ep = {1, 4, 8};
  std::map<std::string, std::string> skipped;
  const auto c = enumerate_layouts(8, s, skipped);
  // tp 1 (dp_shard 8): ep 1, 4, 8; tp 2 (dp_shard 4): ep 1, 4; ep 8 over 4 is skipped.
  ASSERT_EQ(c.size(), 5u);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped.begin()->second.find("ep 8 does not divide dp_shard x cp = 4"), std::string::npos)
      << skipped.begin()->second;
  int with_ep8 = 0;
  for (const auto& x : c) {
    auto it = std::find_if(x.overrides.begin(), x.overrides.end(),
                           [](const auto& o) { return o.first == "parallelism.expert_parallel_degree"; });
    ASSERT_NE(it, x.overrides.end()) << x.family;
    if (it->second == "8") {
      ++with_ep8;
      EXPECT_NE(x.family.find("ep 8"), std::string::npos) << x.family;
    }
  }
  EXPECT_EQ(with_ep8, 1);
  EXPECT_THROW(search_space_from({{"ep", {"0"}}}, "sweep.toml"), Error);
}

}  // namespace
}  // namespace titan::study
