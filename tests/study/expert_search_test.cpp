// titan-study --search over expert parallel degrees: each ep that divides dp_shard x cp is a
// family of its own with parallelism.expert_parallel_degree set; others are skipped, saying why.
#include <gtest/gtest.h>

#include <algorithm>

#include "common/error.h"
#include "study/layout_search.h"

namespace titan::study {
namespace TITAN_UNIT_ID {
namespace {

// One candidate per family: pp 1, no replication, one batch / AC / collective mode.
SearchSpace one_choice_space() {
  SearchSpace s;
  s.pp = {1};
  s.dp_replicate = {1};
  s.local_batch = {1};
  s.activation_checkpoint = {"none"};
  s.collective_modes = {"fused"};
  return s;
}

TEST(StudySearch, ExpertParallelDegreesAreFamiliesOfTheirOwn) {
  SearchSpace s = one_choice_space();
  s.tp = {1, 2};
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

// etp "tp" adds a family per tp > 1 with parallelism.expert_tensor_parallel_degree = tp; at
// tp 1 it is the etp 1 layout and is not repeated.
TEST(StudySearch, ExpertTensorParallelChoices) {
  SearchSpace s = one_choice_space();
  s.tp = {1, 4};
  s.ep = {2};
  s.etp = {"1", "tp"};
  std::map<std::string, std::string> skipped;
  const auto c = enumerate_layouts(8, s, skipped);
  ASSERT_EQ(c.size(), 3u);  // tp 1 x etp 1, tp 4 x etp 1, tp 4 x etp 4
  std::vector<std::string> etps;
  for (const auto& x : c) {
    auto it = std::find_if(x.overrides.begin(), x.overrides.end(),
                           [](const auto& o) { return o.first == "parallelism.expert_tensor_parallel_degree"; });
    ASSERT_NE(it, x.overrides.end()) << x.family;
    etps.push_back(it->second);
  }
  EXPECT_EQ(etps, (std::vector<std::string>{"1", "1", "4"}));
  EXPECT_NE(c[2].family.find("ep 2 x etp 4"), std::string::npos) << c[2].family;
  EXPECT_THROW(search_space_from({{"etp", {"2"}}}, "sweep.toml"), Error);
  EXPECT_EQ(search_space_from({{"etp", {"1", "tp"}}}, "sweep.toml").etp, (std::vector<std::string>{"1", "tp"}));
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::study
