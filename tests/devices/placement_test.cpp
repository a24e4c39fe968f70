// Tests for placing mesh dims on physical axes: TP innermost, axis splitting, mesh-aware
// automatic shapes, and clear errors.
#include "devices/placement.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "devices/collective_cost.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

std::vector<MeshDim> mesh(int64_t dp_shard, int64_t tp) {
  return {{"pp", 1}, {"dp_replicate", 1}, {"dp_shard", dp_shard}, {"cp", 1}, {"tp", tp}};
}

TEST(Placement, TpInnermostSplitsTheFirstAxis) {
  Topology t = make_topology(find_chip("tpu-v7"), 8192, "16x16x32");
  Placement p = place_mesh(t, mesh(2048, 4));
  auto tp = p.group("tp");
  ASSERT_EQ(tp.size(), 1u);
  EXPECT_EQ(tp[0].axis, 0);
  EXPECT_EQ(tp[0].count, 4);
  EXPECT_EQ(tp[0].stride, 1);
  EXPECT_FALSE(tp[0].ring);  // 4 of 16: a line
  auto dp = p.group("dp_shard");
  ASSERT_EQ(dp.size(), 3u);
  EXPECT_EQ(dp[0].axis, 0);
  EXPECT_EQ(dp[0].count, 4);
  EXPECT_EQ(dp[0].stride, 4);
  EXPECT_TRUE(dp[0].ring);  // every 4th chip around the 16-ring closes it
  EXPECT_EQ(dp[1].count, 16);
  EXPECT_EQ(dp[2].count, 32);
  EXPECT_EQ(p.group_size("dp_shard"), 2048);
  EXPECT_EQ(p.group_size("world"), 8192);
  EXPECT_EQ(p.group_size("pp"), 1);
  // Innermost dim first, "; " between dims and none after the last.
  EXPECT_EQ(p.describe(), "tp=4 -> x[4 line]; dp_shard=2048 -> x[4 stride 4 ring] y[16 ring] z[32 ring]");
  // Flattened groups merge adjacent pieces of an axis: dp_shard x tp spans the whole x ring.
  auto all = p.group("dp_shard+tp");
  EXPECT_EQ(all[0].count, 16);
  EXPECT_TRUE(all[0].ring);
}

TEST(Placement, MeshAwareShapeGivesTpAWholeRing) {
  Placement p = place_on_device(find_chip("tpu-v7"), 8192, mesh(2048, 4));
  EXPECT_EQ(p.topology.shape, "4x32x64");
  auto tp = p.group("tp");
  ASSERT_EQ(tp.size(), 1u);
  EXPECT_TRUE(tp[0].ring);
  // Pure FSDP needs no split: the most cubic shape stays.
  Placement f = place_on_device(find_chip("tpu-v7"), 8192, mesh(8192, 1));
  EXPECT_EQ(f.topology.shape, "16x16x32");
  // A user shape is kept as given.
  Placement u = place_on_device(find_chip("tpu-v7"), 8192, mesh(2048, 4), "16x16x32");
  EXPECT_EQ(u.topology.shape, "16x16x32");
}

TEST(Placement, GpuTpOnNvlinkDpOverIb) {
  Placement p = place_on_device(find_chip("h100"), 64, mesh(8, 8));
  auto tp = p.group("tp");
  ASSERT_EQ(tp.size(), 1u);
  EXPECT_EQ(p.topology.axes[tp[0].axis].name, "nvlink");
  auto dp = p.group("dp_shard");
  ASSERT_EQ(dp.size(), 1u);
  EXPECT_EQ(p.topology.axes[dp[0].axis].name, "ib");
}

// "pp_ends" (a tied embedding's gradient sum): the first and the last pipeline rank, one pair.
// On a torus line they are (pp - 1) strides apart; where pp closes a ring, the wraparound link
// makes them neighbours; past a torus, the slowest axis pp reaches carries the pair.
TEST(Placement, PipelineEndsArePlacedAsOnePair) {
  auto pp_mesh = [](int64_t pp, int64_t dp) {
    return std::vector<MeshDim>{{"pp", pp}, {"dp_replicate", 1}, {"dp_shard", dp}, {"cp", 1}, {"tp", 1}};
  };
  Topology t = make_topology(find_chip("tpu-v7"), 8192, "16x16x32");
  // dp_shard 16 x 16 fills x and y; pp 32 is the whole z ring: ends are ring neighbours.
  Placement ring = place_mesh(t, pp_mesh(32, 256));
  auto ends = ring.group("pp_ends");
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(ends[0].axis, 2);
  EXPECT_EQ(ends[0].count, 2);
  EXPECT_EQ(ends[0].stride, 1);
  EXPECT_EQ(ring.group_size("pp_ends"), 2);
  // The same pair where the axis does not close (a line): 31 hops apart, and slower.
  Placement line = ring;
  line.segments[0][0].ring = false;
  ends = line.group("pp_ends");
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(ends[0].stride, 31);
  EXPECT_GT(collective_cost(line, "pp_ends", CollectiveKind::kAllReduce, 1 << 26).total_s(),
            collective_cost(ring, "pp_ends", CollectiveKind::kAllReduce, 1 << 26).total_s());
  // GPUs: tp 8 on NVLink, pp 8 and dp 24 on the scale-out fabric (a switch: distance is free).
  Placement gpu = place_on_device(find_chip("a100"), 1536,
                                  {{"pp", 8}, {"dp_replicate", 1}, {"dp_shard", 24}, {"cp", 1}, {"tp", 8}});
  ends = gpu.group("pp_ends");
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_TRUE(gpu.topology.axes[ends[0].axis].switched);
  EXPECT_EQ(gpu.group_size("pp_ends"), 2);
}

TEST(Placement, DegreesMustMultiplyToNumChips) {
  Topology t = make_topology(find_chip("tpu-v7"), 8192);
  try {
    place_mesh(t, mesh(1024, 4));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find(
                  "mesh degrees pp=1 x dp_replicate=1 x dp_shard=1024 x cp=1 x tp=4 = 4096 do "
                  "not multiply to num_chips = 8192"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(place_on_device(find_chip("h100"), 64, mesh(4, 8)), Error);
}

TEST(Placement, DegreeThatCannotAlignWithTheAxes) {
  Topology t = make_topology(find_chip("tpu-v7"), 9216, "12x12x64");
  try {
    place_mesh(t, mesh(1024, 9));
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("mesh dim tp=9 cannot be laid on topology 12x12x64"), std::string::npos) << m;
  }
}

TEST(Placement, UnknownGroupListsMeshDims) {
  Placement p = place_mesh(make_topology(find_chip("h100"), 8), mesh(2, 4));
  try {
    p.group("ep");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown process group 'ep'"), std::string::npos);
  }
  EXPECT_EQ(p.group_size("dp"), 2);
  EXPECT_EQ(p.group_size("loss"), 2);
  EXPECT_EQ(p.group_size("dp_shard_cp"), 2);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
