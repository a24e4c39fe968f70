// Tests for replaying a trace: overlap in fused mode, serialisation in separate mode,
// coalescing, fused never slower than separate, execution modes, chip-count independence.
#include "devices/step_simulator.h"

#include <gtest/gtest.h>

#include <chrono>

#include "common/error.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

std::vector<MeshDim> mesh(int64_t dp_shard, int64_t tp) {
  return {{"pp", 1}, {"dp_replicate", 1}, {"dp_shard", dp_shard}, {"cp", 1}, {"tp", tp}};
}

SimulationOptions opts(ExecutionMode e, CollectiveMode c) {
  SimulationOptions o;
  o.execution = e;
  o.collective_mode = c;
  return o;
}

TEST(StepSimulator, FusedHidesPrefetchSeparateExposesIt) {
  ChipSpec h100 = find_chip("h100");
  Placement p = place_on_device(h100, 8, mesh(8, 1));
  Trace t;
  const int64_t bytes = 100 * 1000 * 1000;
  int64_t w = t.issue({CollectiveKind::kAllGather, "dp_shard", bytes, "ag"});
  OpDesc mm = matmul_op("aten::mm", {1, 8192, 8192, 8192});
  t.compute(mm);
  t.wait(w);
  t.compute(mm);

  ComputeModel model(h100, ExecutionMode::kCompiled);
  const double k = model.roofline_s(mm) + 1e-6;  // + compiled per-kernel gap
  const double ag = 7.0 / 8.0 * bytes / (0.8 * 450e9) + 3e-6;  // ring + log2(8) steps

  StepReport f = simulate_step(t, p, h100, opts(ExecutionMode::kCompiled, CollectiveMode::kFused));
  // The all-gather (0.24 ms) hides under 1.4 ms of matmul, which runs without NCCL's SMs
  // while it does.
  const double r = model.rate_under_comm(model.lower({mm})[0]);
  EXPECT_NEAR(r, 1 - 16.0 / 132, 1e-3);
  EXPECT_NEAR(f.step_time_s, 2 * k + (ag + 1e-6) * (1 - r), 1e-12);
  EXPECT_NEAR(f.exposed_comm_s, 0.0, 1e-12);
  EXPECT_NEAR(f.comm_s, ag + 1e-6, 1e-12);
  EXPECT_EQ(f.collectives, 1);
  EXPECT_EQ(f.kernels, 2);
  EXPECT_NEAR(f.executed_flops, 2 * mm.flops, 1.0);

  StepReport s =
      simulate_step(t, p, h100, opts(ExecutionMode::kCompiled, CollectiveMode::kSeparate));
  EXPECT_NEAR(s.step_time_s, ag + 15e-6 + 2 * k, 1e-12);  // launch + runs alone
  EXPECT_NEAR(s.exposed_comm_s, ag + 15e-6, 1e-12);
  EXPECT_NEAR(s.exposed_comm_fraction, (ag + 15e-6) / s.step_time_s, 1e-12);
  EXPECT_EQ(s.collective_mode, "separate");
  ASSERT_FALSE(s.costs.empty());
  EXPECT_EQ(s.costs[0].category, "matmul");
}

TEST(StepSimulator, FusedCoalescesAdjacentCollectives) {
  ChipSpec v7 = find_chip("tpu-v7");
  Placement p = place_on_device(v7, 64, mesh(16, 4));
  Trace t;
  std::vector<int64_t> works;
  for (int i = 0; i < 10; ++i) works.push_back(t.issue({CollectiveKind::kReduceScatter, "dp_shard", 1 << 20, "rs"}));
  for (int64_t w : works) t.wait(w);
  StepReport f = simulate_step(t, p, v7, opts(ExecutionMode::kCompiled, CollectiveMode::kFused));
  EXPECT_EQ(f.collectives, 1);
  CollectiveCost one = collective_cost(p, "dp_shard", CollectiveKind::kReduceScatter, 10 << 20);
  EXPECT_NEAR(f.step_time_s, one.total_s() + 0.5e-6, 1e-12);
  StepReport s = simulate_step(t, p, v7, opts(ExecutionMode::kCompiled, CollectiveMode::kSeparate));
  EXPECT_EQ(s.collectives, 10);
  CollectiveCost each = collective_cost(p, "dp_shard", CollectiveKind::kReduceScatter, 1 << 20);
  EXPECT_NEAR(s.step_time_s, 10 * (each.total_s() + 30e-6), 1e-12);
}

// Deterministic pseudo-random traces (LCG), FSDP/TP-like: collectives on several groups and
// streams, waited on a few ops later or right away.
Trace random_trace(uint64_t seed, int events) {
  uint64_t x = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  auto next = [&x](uint64_t mod) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return (x >> 33) % mod;
  };
  Trace t;
  std::vector<int64_t> outstanding;
  const char* groups[] = {"dp_shard", "tp", "dp_shard_cp"};
  const char* streams[] = {"ag", "rs", "tp"};
  for (int i = 0; i < events; ++i) {
    uint64_t r = next(10);
    if (r < 5) {
      int64_t m = 256 * (1 + static_cast<int64_t>(next(32)));
      int64_t n = 128 * (1 + static_cast<int64_t>(next(64)));
      t.compute(matmul_op("aten::mm", {1, m, n, 4096}));
    } else if (r < 7) {
      int64_t b = 1000 * (1 + static_cast<int64_t>(next(100000)));
      t.compute(pointwise_op("aten::add", OpKind::kElementwise, 2 * b, b));
    } else if (r < 9) {
      CollectiveDesc c{static_cast<CollectiveKind>(next(4)), groups[next(3)],
                       static_cast<int64_t>(1 + next(200)) << 20, streams[next(3)]};
      int64_t w = t.issue(c);
      if (next(3) == 0) t.wait(w);
      else outstanding.push_back(w);
    } else if (!outstanding.empty()) {
      t.wait(outstanding.front());
      outstanding.erase(outstanding.begin());
    }
  }
  for (int64_t w : outstanding) t.wait(w);
  return t;
}

TEST(StepSimulator, FusedNeverSlowerThanSeparate) {
  ChipSpec v7 = find_chip("tpu-v7");
  Placement p = place_on_device(v7, 8192, mesh(2048, 4));
  int strictly_faster = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Trace t = random_trace(seed, 400);
    for (ExecutionMode e :
         {ExecutionMode::kEager, ExecutionMode::kDeferAndFuse, ExecutionMode::kCompiled}) {
      StepReport f = simulate_step(t, p, v7, opts(e, CollectiveMode::kFused));
      StepReport s = simulate_step(t, p, v7, opts(e, CollectiveMode::kSeparate));
      EXPECT_LE(f.step_time_s, s.step_time_s * (1 + 1e-12)) << "seed " << seed;
      EXPECT_LE(f.exposed_comm_s, s.exposed_comm_s + 1e-12) << "seed " << seed;
      EXPECT_GT(f.step_time_s, 0.0);
      if (f.step_time_s < 0.99 * s.step_time_s) ++strictly_faster;
    }
  }
  EXPECT_GE(strictly_faster, 50);  // overlap + coalescing pay off on almost every trace
}

TEST(StepSimulator, EagerSlowerThanDeferAndFuseOnPointwiseChains) {
  ChipSpec v7 = find_chip("tpu-v7");
  Placement p = place_on_device(v7, 4, mesh(4, 1));
  Trace t;
  const int64_t b = 8192LL * 4096 * 2;  // one bf16 activation of 8192 tokens x 4096
  for (int layer = 0; layer < 4; ++layer) {
    t.compute(matmul_op("aten::mm", {1, 8192, 4096, 4096}));
    for (int i = 0; i < 6; ++i) t.compute(pointwise_op("aten::mul", OpKind::kElementwise, b, b));
  }
  StepReport eager = simulate_step(t, p, v7, opts(ExecutionMode::kEager, CollectiveMode::kFused));
  StepReport fused =
      simulate_step(t, p, v7, opts(ExecutionMode::kDeferAndFuse, CollectiveMode::kFused));
  EXPECT_EQ(eager.kernels, 28);
  EXPECT_EQ(fused.kernels, 8);
  // Per layer: eager moves 6 x 2b through HBM, fused 2b; the matmuls are equal.
  ComputeModel m(v7, ExecutionMode::kEager);
  double mm = m.roofline_s(matmul_op("aten::mm", {1, 8192, 4096, 4096}));
  double hbm = 7.37e12 * 0.85;
  // The first kernel starts once the host has recorded it (2 us); after that the host runs
  // ahead of the device.
  double expect_fused = 2e-6 + 4 * (mm + 1e-6 + 2.0 * b / hbm + 1e-6);
  EXPECT_NEAR(fused.step_time_s, expect_fused, 1e-9);
  EXPECT_GT(eager.step_time_s, expect_fused + 4 * 5 * 2.0 * b / hbm);
}

TEST(StepSimulator, ReportsKernelTimeByOp) {
  ChipSpec v7 = find_chip("tpu-v7");
  Placement p = place_on_device(v7, 4, mesh(4, 1));
  Trace t;
  const int64_t b = 8192LL * 4096 * 2;
  const OpDesc mm = matmul_op("aten::mm", {1, 8192, 4096, 4096});
  for (int layer = 0; layer < 3; ++layer) {
    t.compute(mm);
    t.compute(pointwise_op("aten::mul", OpKind::kElementwise, b, b));
    t.compute(pointwise_op("aten::add", OpKind::kElementwise, 2 * b, b));
  }
  ComputeModel m(v7, ExecutionMode::kEager);
  const double hbm = 7.37e12 * 0.85;
  StepReport eager = simulate_step(t, p, v7, opts(ExecutionMode::kEager, CollectiveMode::kFused));
  ASSERT_EQ(eager.op_costs.size(), 3u);
  EXPECT_EQ(eager.op_costs[0].category, "aten::mm");
  EXPECT_NEAR(eager.op_costs[0].seconds, 3 * m.roofline_s(mm), 1e-12);
  EXPECT_EQ(eager.op_costs[1].category, "aten::add");
  EXPECT_NEAR(eager.op_costs[1].seconds, 3 * 3.0 * b / hbm, 1e-12);
  EXPECT_EQ(eager.op_costs[2].category, "aten::mul");
  EXPECT_NEAR(eager.op_costs[2].seconds, 3 * 2.0 * b / hbm, 1e-12);
  // Fused, each layer's mul and add are one kernel, named by its first op.
  StepReport fused = simulate_step(t, p, v7, opts(ExecutionMode::kDeferAndFuse, CollectiveMode::kFused));
  ASSERT_EQ(fused.op_costs.size(), 2u);
  EXPECT_EQ(fused.op_costs[1].category, "fused from aten::mul");
  EXPECT_LT(fused.op_costs[1].seconds, eager.op_costs[1].seconds + eager.op_costs[2].seconds);
}

TEST(StepSimulator, HostBoundEagerShowsDispatchIdle) {
  ChipSpec h100 = find_chip("h100");
  Placement p = place_on_device(h100, 1, mesh(1, 1));
  Trace t;
  for (int i = 0; i < 1000; ++i) t.compute(pointwise_op("aten::add", OpKind::kElementwise, 4096, 2048));
  StepReport r = simulate_step(t, p, h100, opts(ExecutionMode::kEager, CollectiveMode::kFused));
  // 6 us of host work per op vs ~2 us of device time: the host sets the pace.
  EXPECT_NEAR(r.step_time_s, 1000 * 6e-6 + (2e-6 + 6144 / (3.35e12 * 0.85)), 1e-9);
  EXPECT_EQ(r.costs[0].category, "host dispatch (device idle)");
  EXPECT_GT(r.idle_s, 0.5 * r.step_time_s);
}

TEST(StepSimulator, CostIndependentOfChipCount) {
  Trace t = random_trace(7, 20000);
  ChipSpec v7 = find_chip("tpu-v7");
  double wall[2];
  StepReport rep[2];
  int64_t chips[2] = {64, 65536};
  for (int i = 0; i < 2; ++i) {
    auto start = std::chrono::steady_clock::now();
    Placement p = place_on_device(v7, chips[i], mesh(chips[i] / 4, 4));
    rep[i] = simulate_step(t, p, v7, opts(ExecutionMode::kDeferAndFuse, CollectiveMode::kFused));
    wall[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  EXPECT_EQ(rep[0].kernels, rep[1].kernels);
  EXPECT_EQ(rep[0].collectives, rep[1].collectives);
  EXPECT_LT(wall[0], 1.0);
  EXPECT_LT(wall[1], 1.0);
  EXPECT_GT(rep[1].comm_s, rep[0].comm_s);  // more hops and DCN at 65,536 chips
}

TEST(StepSimulator, Errors) {
  ChipSpec h100 = find_chip("h100");
  Placement p = place_on_device(h100, 8, mesh(8, 1));
  Trace t;
  t.issue({CollectiveKind::kAllReduce, "ep", 1024, "comm"});
  EXPECT_THROW(simulate_step(t, p, h100, SimulationOptions{}), Error);
  EXPECT_THROW(t.wait(42), Error);
  EXPECT_EQ(parse_collective_mode("separate"), CollectiveMode::kSeparate);
  EXPECT_THROW(parse_collective_mode("bucketed"), Error);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
