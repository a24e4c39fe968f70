// Concurrent collectives share the physical links they use (max-min fair), and compute slows
// while communication runs where the chip says so; on the timeline and through simulate_step.
#include <gtest/gtest.h>

#include "devices/fair_rates.h"
#include "devices/step_simulator.h"
#include "devices/timeline.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

TimelineTask comm_task(int stream, double seconds, std::vector<int> links) {
  TimelineTask t;
  t.stream = stream;
  t.duration_s = seconds;
  t.shared_s = seconds;
  t.links = std::move(links);
  t.category = "all_gather";
  return t;
}

// Two collectives issued together on their own streams: when each ends.
std::pair<double, double> pair_ends(double a_s, std::vector<int> a_links, double b_s,
                                    std::vector<int> b_links, TimelineSummary* summary = nullptr) {
  Timeline tl;
  int a = tl.add_stream("ag", StreamKind::kCommunication);
  int b = tl.add_stream("rs", StreamKind::kCommunication);
  int64_t x = tl.add(comm_task(a, a_s, std::move(a_links)));
  int64_t y = tl.add(comm_task(b, b_s, std::move(b_links)));
  if (summary) *summary = tl.summarize();
  return {tl.timing(x).end_s, tl.timing(y).end_s};
}

TEST(SharedLinks, TwoCollectivesOnOneLinkEachGetHalf) {
  // Half the link each, for the whole second.
  EXPECT_EQ(pair_ends(1.0, {0}, 1.0, {0}), std::make_pair(2.0, 2.0));
  // On different links they do not interfere.
  EXPECT_EQ(pair_ends(1.0, {0}, 1.0, {1}), std::make_pair(1.0, 1.0));
  // A short one shares until it ends, then the long one has the link alone:
  // 0.5 s of work at half speed ends at 1.0; the other has 1.5 s left at full speed.
  TimelineSummary s;
  EXPECT_EQ(pair_ends(0.5, {0}, 2.0, {0}, &s), std::make_pair(1.0, 2.5));
  double shared = 0;
  for (const auto& c : s.categories)
    if (c.first == "shared links") shared = c.second;
  EXPECT_DOUBLE_EQ(shared, 0.5 + 0.5);  // each lost 0.5 s to the other
}

TEST(SharedLinks, MaxMinFairRates) {
  // Link 1 carries three flows: 1/3 each; flow 0 then has link 0's remaining 2/3.
  auto r = max_min_fair_rates({{0}, {0, 1}, {1}, {1}});
  EXPECT_NEAR(r[0], 2.0 / 3, 1e-12);
  EXPECT_NEAR(r[1], 1.0 / 3, 1e-12);
  EXPECT_NEAR(r[2], 1.0 / 3, 1e-12);
  EXPECT_NEAR(r[3], 1.0 / 3, 1e-12);
  EXPECT_DOUBLE_EQ(max_min_fair_rates({{}})[0], 1.0);
}

TEST(SharedLinks, LatencyIsNotShared) {
  Timeline tl;
  int a = tl.add_stream("ag", StreamKind::kCommunication);
  int b = tl.add_stream("rs", StreamKind::kCommunication);
  TimelineTask t = comm_task(a, 1.5, {0});
  t.shared_s = 1.0;  // 0.5 s of latency first, then 1 s of bytes
  int64_t x = tl.add(t);
  int64_t y = tl.add(comm_task(b, 1.0, {0}));
  // [0, 0.5]: y alone on the link (0.5 done); [0.5, 1.5]: both at half; y ends at 1.5,
  // x has 0.5 left alone: ends at 2.0.
  EXPECT_DOUBLE_EQ(tl.timing(y).end_s, 1.5);
  EXPECT_DOUBLE_EQ(tl.timing(x).end_s, 2.0);
}

TEST(SharedLinks, ComputeSlowsWhileCommunicationRuns) {
  Timeline tl;
  int comp = tl.add_stream("compute", StreamKind::kCompute);
  int comm = tl.add_stream("ag", StreamKind::kCommunication);
  TimelineTask k;
  k.stream = comp;
  k.duration_s = 2.0;
  k.rate_under_comm = 0.5;
  k.category = "matmul";
  int64_t m = tl.add(k);
  tl.add(comm_task(comm, 1.0, {0}));
  // [0, 1]: half speed (0.5 s of work), then 1.5 s alone.
  EXPECT_DOUBLE_EQ(tl.timing(m).end_s, 2.5);
  TimelineSummary s = tl.summarize();
  EXPECT_DOUBLE_EQ(s.compute_busy_s, 2.5);
  EXPECT_EQ(s.categories[0].first, "matmul");
}

TEST(SharedLinks, FsdpGatherAndReduceScatterShareTheirAxes) {
  // Two collectives on the same FSDP group, issued together on different streams, each
  // take twice as long as alone; on groups over different axes they do not interfere.
  ChipSpec v5p = find_chip("tpu-v5p");
  std::vector<MeshDim> mesh = {{"pp", 1}, {"dp_replicate", 1}, {"dp_shard", 16}, {"cp", 1},
                               {"tp", 4}};
  Placement p = place_on_device(v5p, 64, mesh, "4x4x4");
  const int64_t bytes = 256 << 20;
  const double alone = collective_cost(p, "dp_shard", CollectiveKind::kAllGather, bytes).total_s();
  SimulationOptions o;
  o.execution = ExecutionMode::kCompiled;
  Trace t;
  t.issue({CollectiveKind::kAllGather, "dp_shard", bytes, "ag"});
  t.issue({CollectiveKind::kReduceScatter, "dp_shard", bytes, "rs"});
  StepReport same = simulate_step(t, p, v5p, o);
  const CollectiveCost c = collective_cost(p, "dp_shard", CollectiveKind::kAllGather, bytes);
  EXPECT_NEAR(same.step_time_s, c.latency_s + 2 * c.bandwidth_s + 0.5e-6, 1e-9);
  Trace u;
  u.issue({CollectiveKind::kAllGather, "dp_shard", bytes, "ag"});
  u.issue({CollectiveKind::kAllGather, "tp", bytes / 16, "tp"});
  StepReport apart = simulate_step(u, p, v5p, o);
  const double tp = collective_cost(p, "tp", CollectiveKind::kAllGather, bytes / 16).total_s();
  EXPECT_NEAR(apart.step_time_s, std::max(alone, tp) + 0.5e-6, 1e-9);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
