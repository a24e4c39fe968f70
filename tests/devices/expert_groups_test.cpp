// Expert parallelism's groups on a placement ("ep<N>": the N innermost ranks of dp_shard x cp,
// "efsdp<M>": the rest) and the all-to-all they run, costed on each kind of fabric: NVLink
// inside a node and InfiniBand across nodes, a TPU torus (bisection bound) and NeuronLink.
#include <gtest/gtest.h>

#include "common/error.h"
#include "devices/collective_cost.h"
#include "devices/placement.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

constexpr double V = 1e9;
constexpr double kTol = 1e-12;

std::vector<MeshDim> mesh(int64_t dp_shard, int64_t tp = 1) {
  return {{"pp", 1}, {"dp_replicate", 1}, {"dp_shard", dp_shard}, {"cp", 1}, {"tp", tp}};
}

TEST(ExpertGroups, EpInsideANodeEfsdpAcrossNodes) {
  Placement p = place_on_device(find_chip("h100"), 32, mesh(32));  // 4 nodes of 8
  auto ep = p.group("ep8");
  ASSERT_EQ(ep.size(), 1u);
  EXPECT_EQ(ep[0].count, 8);
  EXPECT_EQ(ep[0].stride, 1);
  auto efsdp = p.group("efsdp4");
  ASSERT_EQ(efsdp.size(), 1u);
  EXPECT_EQ(efsdp[0].count, 4);
  EXPECT_NE(efsdp[0].axis, ep[0].axis);
  // EP 4 takes half a node; its efsdp peers are 4 apart in the node, then across nodes.
  auto ep4 = p.group("ep4");
  ASSERT_EQ(ep4.size(), 1u);
  EXPECT_EQ(ep4[0].count, 4);
  auto efsdp8 = p.group("efsdp8");
  ASSERT_EQ(efsdp8.size(), 2u);
  EXPECT_EQ(efsdp8[0].count, 2);
  EXPECT_EQ(efsdp8[0].stride, 4);
  EXPECT_EQ(efsdp8[1].count, 4);
  EXPECT_EQ(p.group_size("ep16"), 16);
  EXPECT_EQ(p.group_size("efsdp2"), 2);
  EXPECT_THROW(p.group("ep64"), Error);
  EXPECT_THROW(p.group("efsdp3"), Error);
}

TEST(ExpertGroups, AllToAllOverNvlinkAndInfiniband) {
  Placement p = place_on_device(find_chip("h100"), 16, mesh(16));  // 2 nodes of 8
  const double nvl = 0.8 * 450e9, ib = 0.85 * 50e9;  // achieved per-chip bandwidths (collective_cost_test)
  // Inside a node: everything but the chip's own 1/8 leaves through its NVLink port.
  auto in_node = collective_cost(p, "ep8", CollectiveKind::kAllToAll, 1e9);
  EXPECT_NEAR(in_node.bandwidth_s, 7.0 / 8.0 * V / nvl, kTol);
  // Across 2 nodes: half of it crosses InfiniBand, which bounds the exchange.
  auto two_nodes = collective_cost(p, "ep16", CollectiveKind::kAllToAll, 1e9);
  EXPECT_NEAR(two_nodes.bandwidth_s, 0.5 * V / ib, kTol);
  EXPECT_GT(two_nodes.total_s(), 4 * in_node.total_s());  // 11.8 vs 2.4 ms
}

TEST(ExpertGroups, AllToAllOnATpuTorusIsBisectionBound) {
  Placement p = place_on_device(find_chip("tpu-v5p"), 64, mesh(64), "4x4x4");
  // ep 16 = the x and y rings of the cube: per axis V n_i / (4 W_i), axes concurrent.
  auto c = collective_cost(p, "ep16", CollectiveKind::kAllToAll, 1e9);
  const double w = 2 * 0.8 * 90e9;
  EXPECT_NEAR(c.bandwidth_s, 4 * V / (4 * w), kTol);
  auto whole = collective_cost(p, "ep64", CollectiveKind::kAllToAll, 1e9);
  EXPECT_NEAR(whole.bandwidth_s, c.bandwidth_s, kTol);  // three rings of 4 at once: same bound
  EXPECT_GT(whole.latency_s, c.latency_s);
}

TEST(ExpertGroups, AllToAllOnNeuronLink) {
  Placement p = place_on_device(find_chip("trn2"), 64, mesh(64));  // one UltraServer
  auto ep = p.group("ep16");
  int64_t n = 1;
  for (const auto& s : ep) n *= s.count;
  EXPECT_EQ(n, 16);
  auto c = collective_cost(p, "ep16", CollectiveKind::kAllToAll, 1e9);
  // Per axis V n_i / (4 W_i) (torus) over the 4x4 instance torus: the max over its axes.
  double want = 0;
  for (const auto& s : ep) {
    const auto& axis = p.topology.axes[s.axis];
    ASSERT_FALSE(axis.switched);
    want = std::max(want, V * double(s.count) / (4 * segment_bandwidth(axis, s)));
  }
  EXPECT_NEAR(c.bandwidth_s, want, kTol);
  EXPECT_GT(c.bandwidth_s, 0);
  // Across UltraServers (EFA) the exchange is far slower than on NeuronLink.
  Placement two = place_on_device(find_chip("trn2"), 128, mesh(128));
  EXPECT_GT(collective_cost(two, "ep128", CollectiveKind::kAllToAll, 1e9).bandwidth_s, 2 * c.bandwidth_s);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
