// Exposed communication by collective kind. Both sides of the first test go through
// ExposedByKind, so it shows only that the replay feeds it what its kept events hold (the
// timeline's tasks, in order); the split itself is checked against hand-computed figures below.
#include "devices/exposed_by_kind.h"

#include <gtest/gtest.h>

#include "tests/devices/transformer_trace.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

TEST(ExposedByKind, ReplaySplitEqualsTheSplitOfItsEvents) {
  ChipSpec v7 = find_chip("tpu-v7");
  testing::SyntheticStep s;
  s.dims = testing::qwen3_8b_dims();
  s.dims.n_layers = 3;
  s.tp = 4;
  s.seq = 2048;
  const Trace trace = testing::synthetic_step(s);
  const Placement p = place_on_device(
      v7, 256, {{"pp", 1}, {"dp_replicate", 1}, {"dp_shard", 64}, {"cp", 1}, {"tp", s.tp}});
  for (CollectiveMode mode : {CollectiveMode::kFused, CollectiveMode::kSeparate}) {
    SimulationOptions o;
    o.collective_mode = mode;
    o.keep_events = true;
    o.exposed_by_kind = true;
    const StepReport r = simulate_step(trace, p, v7, o);
    ExposedByKind from_events;
    for (const TimelineEvent& e : r.events) from_events.add(e.kind, e.category, e.start_s, e.end_s);
    const std::vector<CostItem> expected = from_events.result();
    ASSERT_EQ(r.exposed_by_kind.size(), expected.size());
    EXPECT_GE(expected.size(), 2u);  // exposed gathers and reduce-scatters of both groups
    double sum = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(r.exposed_by_kind[i].category, expected[i].category);
      EXPECT_EQ(r.exposed_by_kind[i].seconds, expected[i].seconds);  // the same sums, bit for bit
      sum += r.exposed_by_kind[i].seconds;
    }
    EXPECT_GT(r.exposed_comm_s, 0);
    EXPECT_NEAR(sum, r.exposed_comm_s, 1e-12 * r.step_time_s);
    // Not asked for: not computed.
    o.exposed_by_kind = false;
    EXPECT_TRUE(simulate_step(trace, p, v7, o).exposed_by_kind.empty());
  }
}

TEST(ExposedByKind, SharesStretchesAmongRunningCollectives) {
  ExposedByKind x;
  x.add(StreamKind::kCompute, "matmul", 0, 1);
  x.add(StreamKind::kCommunication, "all_gather dp_shard", 0.5, 3);      // exposed 1-3
  x.add(StreamKind::kCommunication, "reduce_scatter dp_shard", 2, 4);    // exposed 2-4
  x.add(StreamKind::kHost, "", 0, 10);                                   // not device time
  x.add(StreamKind::kCommunication, "all_gather tp", 5, 5);              // empty
  const std::vector<CostItem> r = x.result();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].category, "all_gather");  // 1 alone + 0.5 of 2-3
  EXPECT_DOUBLE_EQ(r[0].seconds, 1.5);
  EXPECT_EQ(r[1].category, "reduce_scatter");  // 0.5 of 2-3 + 1 alone
  EXPECT_DOUBLE_EQ(r[1].seconds, 1.5);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
