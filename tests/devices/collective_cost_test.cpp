// Collective cost formulas against hand-computed cases: a ring on a torus axis with and
// without wraparound, several axes, strided groups, DCN / IB hierarchies, all-to-all.
#include "devices/collective_cost.h"

#include <gtest/gtest.h>

#include "common/error.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

constexpr double V = 1e9;  // bytes
constexpr double kTol = 1e-12;

AxisSegment seg(int axis, int64_t count, int64_t stride = 1) {
  AxisSegment s;
  s.axis = axis;
  s.count = count;
  s.stride = stride;
  return s;
}

// v5p: 90 GB/s per link per direction, 80% achieved, 1 us per hop.
TEST(CollectiveCost, RingWithWraparound) {
  Topology cube = make_topology(find_chip("tpu-v5p"), 64, "4x4x4");
  CollectiveCost c = collective_cost(cube, {seg(0, 4)}, CollectiveKind::kAllGather, 1e9);
  const double w = 2 * 0.8 * 90e9;  // bidirectional ring: both neighbours' links
  EXPECT_NEAR(c.bandwidth_s, 3.0 / 4.0 * V / w, kTol);  // (n-1)/n V / W = 5.208 ms
  EXPECT_NEAR(c.latency_s, 2e-6, kTol);                 // n/2 = 2 hops
  EXPECT_EQ(c.group_size, 4);
}

TEST(CollectiveCost, RingWithoutWraparoundIsTwiceAsSlow) {
  Topology sub = make_topology(find_chip("tpu-v5p"), 32, "2x4x4");  // sub-cube: no wrap
  CollectiveCost c = collective_cost(sub, {seg(1, 4)}, CollectiveKind::kAllGather, 1e9);
  const double w = 0.8 * 90e9;  // a line: the end chips receive through one link
  EXPECT_NEAR(c.bandwidth_s, 3.0 / 4.0 * V / w, kTol);  // 10.417 ms
  EXPECT_NEAR(c.latency_s, 3e-6, kTol);                 // n-1 hops
  Topology cube = make_topology(find_chip("tpu-v5p"), 64, "4x4x4");
  CollectiveCost wrapped = collective_cost(cube, {seg(1, 4)}, CollectiveKind::kAllGather, 1e9);
  EXPECT_NEAR(c.bandwidth_s / wrapped.bandwidth_s, 2.0, 1e-12);
}

TEST(CollectiveCost, ReduceScatterEqualsAllGatherAllReduceTwice) {
  Topology e = make_topology(find_chip("tpu-v5e"), 256, "16x16");
  auto ag = collective_cost(e, {seg(0, 16)}, CollectiveKind::kAllGather, 1e9);
  auto rs = collective_cost(e, {seg(0, 16)}, CollectiveKind::kReduceScatter, 1e9);
  auto ar = collective_cost(e, {seg(0, 16)}, CollectiveKind::kAllReduce, 1e9);
  const double w = 2 * 0.8 * 45e9;  // v5e axis of 16 wraps
  EXPECT_NEAR(ag.bandwidth_s, 15.0 / 16.0 * V / w, kTol);  // 13.02 ms
  EXPECT_NEAR(ag.latency_s, 8e-6, kTol);
  EXPECT_DOUBLE_EQ(rs.total_s(), ag.total_s());
  EXPECT_NEAR(ar.bandwidth_s, 2 * 15.0 / 16.0 * V / w, kTol);  // ~2V/W
  EXPECT_NEAR(ar.latency_s, 16e-6, kTol);
}

TEST(CollectiveCost, SpreadingOverAxesDividesTheBandwidthTerm) {
  Topology cube = make_topology(find_chip("tpu-v5p"), 64, "4x4x4");
  const double w = 2 * 0.8 * 90e9;
  auto two = collective_cost(cube, {seg(0, 4), seg(1, 4)}, CollectiveKind::kAllGather, 1e9);
  // Ingress bound: (N-1)/N V over the sum of both axes' W (per-axis bound 3/16 V/W is lower).
  EXPECT_NEAR(two.bandwidth_s, 15.0 / 16.0 * V / (2 * w), kTol);  // 3.255 ms
  EXPECT_NEAR(two.latency_s, 4e-6, kTol);
  auto three = collective_cost(cube, {seg(0, 4), seg(1, 4), seg(2, 4)},
                               CollectiveKind::kAllGather, 1e9);
  EXPECT_NEAR(three.bandwidth_s, 63.0 / 64.0 * V / (3 * w), kTol);
}

TEST(CollectiveCost, StridedGroupSharesLinks) {
  // 16-chip v5e axis: tp = 4 contiguous (a line), dp = every 4th chip (closes the ring but
  // every link on its path carries the 4 interleaved dp groups).
  Topology e = make_topology(find_chip("tpu-v5e"), 16, "16x1");
  Placement p = place_mesh(e, {{"dp", 4}, {"tp", 4}});
  const double b = 0.8 * 45e9;
  auto tp = collective_cost(p, "tp", CollectiveKind::kAllGather, 1e9);
  EXPECT_NEAR(tp.bandwidth_s, 3.0 / 4.0 * V / b, kTol);
  EXPECT_NEAR(tp.latency_s, 3e-6, kTol);
  auto dp = collective_cost(p, "dp", CollectiveKind::kAllGather, 1e9);
  EXPECT_NEAR(dp.bandwidth_s, 3.0 / 4.0 * V / (2 * b / 4), kTol);
  EXPECT_NEAR(dp.latency_s, 2 * 4 * 1e-6, kTol);  // 2 ring steps of 4 hops
}

TEST(CollectiveCost, HierarchicalOverDcn) {
  // Two 4x4x4 v5p slices: the whole group all-gathers over ICI (64) then DCN (2).
  Topology t = make_topology(find_chip("tpu-v5p"), 128, "2x4x4x4");
  const double w = 2 * 0.8 * 90e9;
  const double dcn = 0.85 * 6.25e9;
  auto c = collective_cost(t, {seg(0, 4), seg(1, 4), seg(2, 4), seg(3, 2)},
                           CollectiveKind::kAllGather, 1e9);
  // Fast stage: 63/64 V over 3W. Slow stage: the slice's 64 chips share the DCN traffic,
  // each moving (2-1)/2 of its V/64 shard.
  double fast = 63.0 / 64.0 * V / (3 * w);
  double slow = 0.5 * (V / 64) / dcn;
  EXPECT_NEAR(c.bandwidth_s, fast + slow, kTol);  // 2.279 ms + 1.471 ms
  EXPECT_NEAR(c.latency_s, 6e-6 + 10e-6, kTol);   // 2+2+2 ICI hops, 1 DCN step
  // DCN alone (dp_replicate across slices, one chip per slice per group): V/2 over DCN.
  auto r = collective_cost(t, {seg(3, 2)}, CollectiveKind::kAllReduce, 1e9);
  EXPECT_NEAR(r.bandwidth_s, 2 * 0.5 * V / dcn, kTol);  // 188 ms: why DCN holds only DP
}

TEST(CollectiveCost, GpuNvlinkThenInfiniband) {
  Topology g = make_topology(find_chip("h100"), 16);  // 2 nodes of 8
  auto c = collective_cost(g, {seg(0, 8), seg(1, 2)}, CollectiveKind::kAllGather, 1e9);
  const double nvl = 0.8 * 450e9, ib = 0.85 * 50e9;
  EXPECT_NEAR(c.bandwidth_s, 7.0 / 8.0 * V / nvl + 0.5 * (V / 8) / ib, kTol);
  EXPECT_NEAR(c.latency_s, 3 * 1e-6 + 1 * 5e-6, kTol);  // log2(8) NVLink steps + 1 IB step
}

TEST(CollectiveCost, AllToAllBisection) {
  Topology e = make_topology(find_chip("tpu-v5e"), 256, "16x16");
  auto c = collective_cost(e, {seg(0, 16)}, CollectiveKind::kAllToAll, 1e9);
  const double w = 2 * 0.8 * 45e9;
  // V per participant, n V the whole array: docs/hardware.md's V_total / (4W).
  EXPECT_NEAR(c.bandwidth_s, 16 * V / (4 * w), kTol);
  Topology g = make_topology(find_chip("h100"), 8);
  auto s = collective_cost(g, {seg(0, 8)}, CollectiveKind::kAllToAll, 1e9);
  EXPECT_NEAR(s.bandwidth_s, 7.0 / 8.0 * V / (0.8 * 450e9), kTol);
}

TEST(CollectiveCost, SendRecvAndBroadcastAndTrivialGroups) {
  Topology t = make_topology(find_chip("tpu-v5p"), 128, "2x4x4x4");
  auto pp = collective_cost(t, {seg(3, 2)}, CollectiveKind::kSendRecv, 1e9);
  EXPECT_NEAR(pp.bandwidth_s, V / (0.85 * 6.25e9), kTol);
  EXPECT_NEAR(pp.latency_s, 10e-6, kTol);
  auto b = collective_cost(t, {seg(0, 4)}, CollectiveKind::kBroadcast, 1e9);
  EXPECT_NEAR(b.bandwidth_s, V / (2 * 0.8 * 90e9), kTol);
  auto one = collective_cost(t, {}, CollectiveKind::kAllReduce, 1e9);
  EXPECT_EQ(one.total_s(), 0.0);
  EXPECT_EQ(one.group_size, 1);
}

TEST(CollectiveCost, SmallMessagesAreLatencyBound) {
  Topology e = make_topology(find_chip("tpu-v5e"), 256, "16x16");
  auto c = collective_cost(e, {seg(0, 16)}, CollectiveKind::kAllGather, 16 * 1024);
  EXPECT_GT(c.latency_s, 20 * c.bandwidth_s);
}

TEST(CollectiveCost, ParseNames) {
  EXPECT_EQ(parse_collective("all_gather"), CollectiveKind::kAllGather);
  EXPECT_EQ(parse_collective("reduce-scatter"), CollectiveKind::kReduceScatter);
  EXPECT_EQ(parse_collective("send"), CollectiveKind::kSendRecv);
  EXPECT_STREQ(collective_name(CollectiveKind::kAllToAll), "all_to_all");
  EXPECT_THROW(parse_collective("gossip"), Error);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
