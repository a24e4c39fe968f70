// Tests for remembered replays: a named trace replayed again on the same chip, options and
// group placement is found in the memo with the report a fresh replay makes; anything the
// replay reads that differs (a group's segments, the chip, the options, an unnamed or changed
// trace) is replayed anew.
#include "devices/replay_memo.h"

#include <gtest/gtest.h>

#include "devices/step_simulator.h"
#include "tests/devices/transformer_trace.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

std::vector<MeshDim> mesh(int64_t dp_shard, int64_t tp) {
  return {{"pp", 1}, {"dp_replicate", 1}, {"dp_shard", dp_shard}, {"cp", 1}, {"tp", tp}};
}

Trace named_step(int64_t tp) {
  testing::SyntheticStep s;
  s.dims.dim = 1024, s.dims.n_heads = 8, s.dims.n_kv_heads = 8, s.dims.head_dim = 128;
  s.dims.ffn_dim = 4096, s.dims.n_layers = 2, s.dims.vocab_size = 32000;
  s.seq = 1024, s.tp = tp;
  Trace t = testing::synthetic_step(s);
  t.set_content_id(Trace::new_content_id());
  return t;
}

void expect_same(const StepReport& a, const StepReport& b) {
  EXPECT_EQ(a.step_time_s, b.step_time_s);
  EXPECT_EQ(a.compute_s, b.compute_s);
  EXPECT_EQ(a.comm_s, b.comm_s);
  EXPECT_EQ(a.exposed_comm_s, b.exposed_comm_s);
  EXPECT_EQ(a.idle_s, b.idle_s);
  EXPECT_EQ(a.executed_flops, b.executed_flops);
  EXPECT_EQ(a.kernels, b.kernels);
  EXPECT_EQ(a.collectives, b.collectives);
  EXPECT_EQ(a.topology, b.topology);
  EXPECT_EQ(a.layout, b.layout);
  ASSERT_EQ(a.costs.size(), b.costs.size());
  for (size_t i = 0; i < a.costs.size(); ++i) {
    EXPECT_EQ(a.costs[i].category, b.costs[i].category);
    EXPECT_EQ(a.costs[i].seconds, b.costs[i].seconds);
  }
  ASSERT_EQ(a.exposed_by_kind.size(), b.exposed_by_kind.size());
  for (size_t i = 0; i < a.exposed_by_kind.size(); ++i)
    EXPECT_EQ(a.exposed_by_kind[i].seconds, b.exposed_by_kind[i].seconds);
}

TEST(ReplayMemo, ANamedTraceIsReplayedOncePerChipOptionsAndGroupPlacement) {
  const ChipSpec v7 = find_chip("tpu-v7");
  const Trace t = named_step(4);
  SimulationOptions o;
  o.exposed_by_kind = true;
  ReplayMemo memo;
  SimulationOptions with = o;
  with.memo = &memo;

  // 64 and 256 chips place the tp group alike (4 chips along the innermost axis) but not
  // dp_shard, which the trace's all-gathers use: each is replayed.
  const Placement p64 = place_on_device(v7, 64, mesh(16, 4));
  const Placement p256 = place_on_device(v7, 256, mesh(64, 4));
  const StepReport fresh64 = simulate_step(t, p64, v7, o);
  expect_same(simulate_step(t, p64, v7, with), fresh64);
  EXPECT_EQ(memo.misses, 1);
  expect_same(simulate_step(t, p64, v7, with), fresh64);  // found
  EXPECT_EQ(memo.hits, 1);
  expect_same(simulate_step(t, p256, v7, with), simulate_step(t, p256, v7, o));
  EXPECT_EQ(memo.misses, 2);
  EXPECT_EQ(simulate_step_time(t, p64, v7, with), simulate_step_time(t, p64, v7, o));
  EXPECT_EQ(simulate_step_time(t, p64, v7, with), fresh64.step_time_s);
  EXPECT_EQ(memo.misses, 3);  // time-only replays are kept apart
  EXPECT_EQ(memo.hits, 2);

  // Other options, another chip: replayed.
  SimulationOptions separate = with;
  separate.collective_mode = CollectiveMode::kSeparate;
  SimulationOptions plain = o;
  plain.collective_mode = CollectiveMode::kSeparate;
  expect_same(simulate_step(t, p64, v7, separate), simulate_step(t, p64, v7, plain));
  ChipSpec slower = v7;
  slower.hbm_bytes_per_s /= 2;
  const StepReport slow = simulate_step(t, p64, slower, with);
  EXPECT_GT(slow.step_time_s, fresh64.step_time_s);
  expect_same(slow, simulate_step(t, p64, slower, o));
  EXPECT_EQ(memo.misses, 5);
  EXPECT_EQ(memo.hits, 2);
}

TEST(ReplayMemo, GroupsTheTraceDoesNotUseDoNotKeyIt) {
  // A trace of tensor-parallel collectives only: at any dp_shard degree it replays the same,
  // and the memo answers for every chip count whose tp group sits alike.
  const ChipSpec v7 = find_chip("tpu-v7");
  Trace t;
  const int64_t bytes = 64 << 20;
  for (int i = 0; i < 4; ++i) {
    t.compute(matmul_op("aten::mm", {1, 4096, 4096, 4096}));
    t.blocking({CollectiveKind::kAllReduce, "tp", bytes, "tp"});
  }
  t.set_content_id(Trace::new_content_id());
  ReplayMemo memo;
  SimulationOptions with;
  with.memo = &memo;
  const StepReport first = simulate_step(t, place_on_device(v7, 64, mesh(16, 4)), v7, with);
  for (int64_t chips : {256, 1024}) {
    const Placement p = place_on_device(v7, chips, mesh(chips / 4, 4));
    const StepReport again = simulate_step(t, p, v7, with);
    EXPECT_EQ(again.step_time_s, first.step_time_s);
    EXPECT_EQ(again.layout, p.describe());  // the placement asked about, not the first one's
    expect_same(again, simulate_step(t, p, v7, SimulationOptions{}));
  }
  EXPECT_EQ(memo.misses, 1);
  EXPECT_EQ(memo.hits, 2);
  // tp 8 is another group: replayed.
  const Placement p8 = place_on_device(v7, 64, mesh(8, 8));
  expect_same(simulate_step(t, p8, v7, with), simulate_step(t, p8, v7, SimulationOptions{}));
  EXPECT_EQ(memo.misses, 2);
}

TEST(ReplayMemo, UnnamedOrChangedTracesAreNotRemembered) {
  const ChipSpec v7 = find_chip("tpu-v7");
  const Placement p = place_on_device(v7, 64, mesh(16, 4));
  ReplayMemo memo;
  SimulationOptions with;
  with.memo = &memo;
  Trace t = named_step(4);
  const uint64_t name = t.content_id();
  EXPECT_NE(name, 0u);
  EXPECT_NE(Trace::new_content_id(), name);
  Trace copy = t;
  EXPECT_EQ(copy.content_id(), name);  // the same events
  const double before = simulate_step(t, p, v7, with).step_time_s;
  t.compute(matmul_op("aten::mm", {1, 8192, 8192, 8192}));
  EXPECT_EQ(t.content_id(), 0u);  // changed: unnamed
  const double after = simulate_step(t, p, v7, with).step_time_s;
  EXPECT_GT(after, before);
  EXPECT_EQ(memo.hits + memo.misses, 1);  // the changed trace bypassed the memo
  for (auto change : {+[](Trace& x) { x.issue({CollectiveKind::kAllGather, "dp_shard", 1 << 20, "ag"}); },
                      +[](Trace& x) { (void)x.take_events(); }}) {
    Trace c = copy;
    change(c);
    EXPECT_EQ(c.content_id(), 0u);
  }
  SimulationOptions events = with;
  events.keep_events = true;
  EXPECT_FALSE(memo.key(copy, p, v7, events, false).has_value());
  SimulationOptions async_tp = with;
  async_tp.async_tensor_parallel = true;
  EXPECT_FALSE(memo.key(copy, p, v7, async_tp, false).has_value());
  EXPECT_TRUE(memo.key(copy, p, v7, with, false).has_value());
}

TEST(ReplayMemo, StartsAgainWhenFull) {
  const ChipSpec v7 = find_chip("tpu-v7");
  const Placement p = place_on_device(v7, 64, mesh(16, 4));
  ReplayMemo memo(/*capacity=*/2);
  SimulationOptions with;
  with.memo = &memo;
  std::vector<Trace> traces;
  for (int i = 0; i < 3; ++i) traces.push_back(named_step(4));
  for (const Trace& t : traces) simulate_step_time(t, p, v7, with);
  EXPECT_EQ(memo.misses, 3);
  simulate_step_time(traces[2], p, v7, with);  // kept after the memo started again
  EXPECT_EQ(memo.hits, 1);
  simulate_step_time(traces[0], p, v7, with);  // let go
  EXPECT_EQ(memo.misses, 4);
}

TEST(ReplayMemo, SameChipComparesEveryField) {
  const ChipSpec v7 = find_chip("tpu-v7");
  ChipSpec other = v7;
  EXPECT_TRUE(same_chip(v7, other));
  other.kernel_rates["aten::mul"] = 1e9;
  EXPECT_FALSE(same_chip(v7, other));
  other = v7;
  other.replace_chips += 1;
  EXPECT_FALSE(same_chip(v7, other));
  EXPECT_FALSE(same_chip(v7, find_chip("tpu-v6e")));
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
