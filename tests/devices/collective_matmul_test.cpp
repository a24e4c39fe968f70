// Async tensor parallelism in the replay (devices/collective_matmul.h): a tensor-parallel
// all-gather feeding a matmul, and a matmul feeding a reduce-scatter, take about
// max(matmul, transfer) + one chunk of the smaller instead of their sum; other collectives
// and the separate mode are untouched; the matmul's seconds stay what they were.
#include "devices/collective_matmul.h"

#include <gtest/gtest.h>

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

std::vector<MeshDim> mesh(int64_t dp_shard, int64_t tp) {
  return {{"pp", 1}, {"dp_replicate", 1}, {"dp_shard", dp_shard}, {"cp", 1}, {"tp", tp}};
}

SimulationOptions opts(bool async_tp, CollectiveMode mode = CollectiveMode::kFused) {
  SimulationOptions o;
  o.execution = ExecutionMode::kCompiled;
  o.collective_mode = mode;
  o.async_tensor_parallel = async_tp;
  return o;
}

double category_s(const StepReport& r, const std::string& name) {
  for (const CostItem& c : r.costs)
    if (c.category == name) return c.seconds;
  return 0;
}

struct H100Tp8 {
  ChipSpec chip = find_chip("h100");
  Placement placement = place_on_device(chip, 64, mesh(8, 8));
  ComputeModel model{chip, ExecutionMode::kCompiled};
  double launch = execution_overheads(chip, ExecutionMode::kCompiled).launch_per_kernel_s;
  // The whole collective on the tp group as one task (its launch included).
  double transfer_s(CollectiveKind kind, int64_t bytes) const {
    return collective_cost(placement, "tp", kind, bytes).total_s() + launch;
  }
  StepReport run(const Trace& t, bool async_tp) const { return simulate_step(t, placement, chip, opts(async_tp)); }
};

// Async TP moves work in time, never adds or removes any.
void expect_same_matmul_seconds(const StepReport& on, const StepReport& off) {
  EXPECT_NEAR(category_s(on, "matmul"), category_s(off, "matmul"), 1e-15);
  EXPECT_EQ(on.kernels, off.kernels);
  EXPECT_EQ(on.collectives, off.collectives);
}

// all-gather on tp -> wait -> matmul (what a column-parallel layer under sequence parallelism runs).
Trace gather_then_matmul(int64_t bytes, const OpDesc& mm) {
  Trace t;
  t.wait(t.issue({CollectiveKind::kAllGather, "tp", bytes, "tp"}));
  t.compute(mm);
  return t;
}

// matmul -> reduce-scatter on tp -> wait (a row-parallel layer's output).
Trace matmul_then_scatter(int64_t bytes, const OpDesc& mm) {
  Trace t;
  t.compute(mm);
  t.wait(t.issue({CollectiveKind::kReduceScatter, "tp", bytes, "tp"}));
  return t;
}

// One pair replayed without and with async TP: the transfer alone T (launch included), the
// matmul alone M (without its launch), its rate beside a transfer r.
struct PairRun {
  double T = 0, M = 0, r = 1;
  StepReport off, on;
};

PairRun run_pair(const H100Tp8& s, bool gather, MatmulShape shape, int64_t bytes) {
  const OpDesc mm = matmul_op("aten::mm", shape);
  const Trace t = gather ? gather_then_matmul(bytes, mm) : matmul_then_scatter(bytes, mm);
  PairRun p;
  p.T = s.transfer_s(gather ? CollectiveKind::kAllGather : CollectiveKind::kReduceScatter, bytes);
  const Kernel k = s.model.lower({mm})[0];
  p.M = k.exec_s;
  p.r = s.model.rate_under_comm(k);
  p.off = s.run(t, false);
  p.on = s.run(t, true);
  expect_same_matmul_seconds(p.on, p.off);
  EXPECT_NEAR(p.on.executed_flops, p.off.executed_flops, 1.0);
  return p;
}

const MatmulShape kSmall{1, 1024, 1024, 1024};  // ~3 us
const MatmulShape kLarge{1, 8192, 8192, 8192};  // ~1.4 ms
const int64_t kLargeBytes = 1000 * 1000 * 1000;  // ~2.7 ms over NVLink
const int64_t kSmallBytes = 10 * 1000 * 1000;    // ~30 us

TEST(CollectiveMatmul, TransferBoundGatherExposesOnlyTheLastMatmulChunk) {
  H100Tp8 s;
  const PairRun p = run_pair(s, true, kSmall, kLargeBytes);
  EXPECT_NEAR(p.off.step_time_s, p.T + s.launch + p.M, 1e-12);
  // Ring steps back to back; the last shard's matmul chunk (1/8) runs after the last step.
  EXPECT_NEAR(p.on.step_time_s, p.T + p.M / 8, 1e-12);
  EXPECT_NEAR(p.on.comm_s, p.off.comm_s, 1e-12);
}

TEST(CollectiveMatmul, ComputeBoundGatherHidesUnderTheMatmul) {
  H100Tp8 s;
  const PairRun p = run_pair(s, true, kLarge, kSmallBytes);
  EXPECT_NEAR(p.off.step_time_s, p.T + s.launch + p.M, 1e-12);
  EXPECT_NEAR(p.off.exposed_comm_s, p.T, 1e-12);
  // The matmul starts at once on the local shard and never waits for a step; it runs slower
  // (NCCL's SMs) while the transfer does.
  EXPECT_NEAR(p.on.step_time_s, s.launch + p.M + p.T * (1 - p.r), 1e-12);
  EXPECT_NEAR(p.on.exposed_comm_s, 0.0, 1e-12);
}

TEST(CollectiveMatmul, TransferBoundScatterWaitsForTheFirstChunkOnly) {
  H100Tp8 s;
  const PairRun p = run_pair(s, false, kSmall, kLargeBytes);
  EXPECT_NEAR(p.off.step_time_s, s.launch + p.M + p.T, 1e-12);
  // Chunk 0 alone, then the steps back to back while the other chunks run beside them.
  EXPECT_NEAR(p.on.step_time_s, s.launch + p.M / 8 + p.T, 1e-12);
  EXPECT_LT(p.on.exposed_comm_s, p.off.exposed_comm_s);
}

TEST(CollectiveMatmul, ComputeBoundScatterHidesUnderTheMatmul) {
  H100Tp8 s;
  const PairRun p = run_pair(s, false, kLarge, kSmallBytes);
  EXPECT_NEAR(p.off.exposed_comm_s, p.T, 1e-12);
  // Each step sends a chunk's partial sums while the next chunk is computed; the last step
  // (one chunk's share of the transfer, ~T / 7) ends before the last chunk does.
  EXPECT_NEAR(p.on.exposed_comm_s, 0.0, 1e-12);
  // Saves the transfer less what the matmul lost to running beside it (~12% of T on the H100).
  EXPECT_LT(p.on.step_time_s, p.off.step_time_s - 0.8 * p.T);
}

TEST(CollectiveMatmul, OnlyTensorParallelGathersAndScattersInFusedModeDecompose) {
  H100Tp8 s;
  const OpDesc mm = matmul_op("aten::mm", {1, 4096, 4096, 4096});
  const int64_t bytes = 200 * 1000 * 1000;
  auto same = [&](const Trace& t, CollectiveMode mode) {
    const double off = simulate_step(t, s.placement, s.chip, opts(false, mode)).step_time_s;
    EXPECT_NEAR(simulate_step(t, s.placement, s.chip, opts(true, mode)).step_time_s, off, 1e-12 * off);
  };
  Trace fsdp;  // an FSDP gather before a matmul: not a collective matmul
  fsdp.wait(fsdp.issue({CollectiveKind::kAllGather, "dp_shard", bytes, "fsdp"}));
  fsdp.compute(mm);
  same(fsdp, CollectiveMode::kFused);
  Trace all_reduce;  // TP without sequence parallelism
  all_reduce.compute(mm);
  all_reduce.wait(all_reduce.issue({CollectiveKind::kAllReduce, "tp", bytes, "tp"}));
  all_reduce.compute(mm);
  same(all_reduce, CollectiveMode::kFused);
  same(gather_then_matmul(bytes, mm), CollectiveMode::kSeparate);  // each collective runs alone
  // A gather whose compute starts with other work than a matmul (attention) waits whole.
  Trace attention;
  attention.wait(attention.issue({CollectiveKind::kAllGather, "tp", bytes, "tp"}));
  attention.compute(attention_op({1, 32, 32, 4096, 4096, 128, true, false}));
  attention.compute(mm);
  same(attention, CollectiveMode::kFused);
}

TEST(CollectiveMatmul, PartnersAreTheMatmulRunsNextToTheCollective) {
  auto kernel = [](const char* category, double s, const std::string* lead = nullptr) {
    Kernel k;
    k.category = category;
    k.exec_s = s;
    k.lead = lead;
    return k;
  };
  const std::string clone = "aten::clone", add = "aten::add", silu = "aten::silu";
  // After a gather: layout copy, q, view, k, v, then attention: the copy and the three matmuls.
  std::vector<Kernel> fwd = {kernel("other", 1, &clone), kernel("matmul", 1), kernel("view", 0), kernel("matmul", 1),
                             kernel("matmul", 1), kernel("attention", 1), kernel("matmul", 1), kernel("other", 1, &clone)};
  KernelSpan g = matmuls_fed_by_gather(fwd);
  EXPECT_EQ(g.begin, 0u);
  EXPECT_EQ(g.end, 5u);
  // Before a scatter: the output projection and its layout copy, after the attention.
  KernelSpan r = matmuls_feeding_scatter(fwd, g.end);
  EXPECT_EQ(r.begin, 6u);
  EXPECT_EQ(r.end, 8u);
  // Backward's input gradients summed before the scatter join it; an activation does not.
  std::vector<Kernel> bwd = {kernel("elementwise", 1, &silu), kernel("matmul", 1), kernel("matmul", 1),
                             kernel("elementwise", 1, &add), kernel("other", 1, &clone)};
  r = matmuls_feeding_scatter(bwd, 0);
  EXPECT_EQ(r.begin, 1u);
  EXPECT_EQ(r.end, 5u);
  // A row-wise kernel ahead of the first matmul joins a gather's run; one after it does not.
  g = matmuls_fed_by_gather(bwd);
  EXPECT_EQ(g.end, 3u);
  EXPECT_TRUE(matmuls_fed_by_gather({kernel("attention", 1), kernel("matmul", 1)}).empty());
  EXPECT_TRUE(matmuls_feeding_scatter({kernel("elementwise", 1, &silu)}, 0).empty());
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
