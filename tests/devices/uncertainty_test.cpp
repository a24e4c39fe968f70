// Tests for the report of what a simulated step is least sure of (StepReport::uncertain): the
// basis each kernel's time rests on, exposed communication split by latency- and
// bandwidth-bound collectives, and the timeline's per-basis accounting.
#include <gtest/gtest.h>

#include <string>

#include "devices/step_simulator.h"

namespace titan::devices {
namespace TITAN_UNIT_ID {
namespace {

std::vector<MeshDim> fsdp(int64_t n) {
  return {{"pp", 1}, {"dp_replicate", 1}, {"dp_shard", n}, {"cp", 1}, {"tp", 1}};
}

SimulationOptions compiled_separate() {
  SimulationOptions o;
  o.execution = ExecutionMode::kCompiled;
  o.collective_mode = CollectiveMode::kSeparate;
  return o;
}

double seconds_of(const StepReport& r, CostBasis b) {
  for (const CostItem& c : r.uncertain)
    if (c.category == cost_basis_name(b)) return c.seconds;
  return 0;
}

double seconds_starting(const StepReport& r, const std::string& prefix) {
  for (const CostItem& c : r.uncertain)
    if (c.category.rfind(prefix, 0) == 0) return c.seconds;
  return 0;
}

TEST(Uncertainty, TimelineAddsComputeByBasisAndOnlyExposedCommunication) {
  Timeline tl;
  const int compute = tl.add_stream("compute", false);
  const int comm = tl.add_stream("comm", true);
  TimelineTask a;
  a.stream = compute;
  a.duration_s = 1.0;
  a.overhead_s = 0.25;
  a.basis = 0;
  a.overhead_basis = 2;
  tl.add(a);
  TimelineTask c;  // runs from 0 to 3: 1 s under compute, 2 s exposed
  c.stream = comm;
  c.duration_s = 3.0;
  c.basis = 1;
  tl.add(c);
  const TimelineSummary s = tl.summarize();
  ASSERT_EQ(s.basis_s.size(), 3u);
  EXPECT_DOUBLE_EQ(s.basis_s[0], 0.75);
  EXPECT_DOUBLE_EQ(s.basis_s[1], 2.0);
  EXPECT_DOUBLE_EQ(s.basis_s[2], 0.25);
}

// Collectives of two bases exposed at once on two streams: the stretch counts once, so the
// bases add up to the exposed time.
TEST(Uncertainty, OverlappingExposedCollectivesCountOnce) {
  Timeline tl;
  const int comm_a = tl.add_stream("comm a", true);
  const int comm_b = tl.add_stream("comm b", true);
  TimelineTask a;  // 0 to 2
  a.stream = comm_a;
  a.duration_s = 2.0;
  a.basis = 1;
  tl.add(a);
  TimelineTask lead;  // delays the next task on comm b to 1
  lead.stream = comm_b;
  lead.duration_s = 1.0;
  tl.add(lead);
  TimelineTask b;  // 1 to 3: overlaps a from 1 to 2
  b.stream = comm_b;
  b.duration_s = 2.0;
  b.basis = 2;
  tl.add(b);
  const TimelineSummary s = tl.summarize();
  ASSERT_DOUBLE_EQ(s.exposed_comm_s, 3.0);
  ASSERT_EQ(s.basis_s.size(), 3u);
  EXPECT_DOUBLE_EQ(s.basis_s[1], 2.0);
  EXPECT_DOUBLE_EQ(s.basis_s[2], 1.0);
  EXPECT_DOUBLE_EQ(s.basis_s[1] + s.basis_s[2], s.exposed_comm_s);
}

TEST(Uncertainty, MatmulRateIsSureOnlyWhereMeasured) {
  const OpDesc big = matmul_op("aten::mm", {1, 8192, 8192, 8192});
  Trace t;
  t.compute(big);
  // TPU v7: no measured rate, so the whole step rests on the clock share fitted on its
  // published runs.
  const ChipSpec v7 = find_chip("tpu-v7");
  const StepReport r7 = simulate_step(t, place_on_device(v7, 1, fsdp(1)), v7, compiled_separate());
  EXPECT_NEAR(seconds_of(r7, CostBasis::kMatmulFitted), r7.step_time_s - 0.5e-6, 1e-9);
  EXPECT_GT(uncertain_share(r7), 0.99);
  // v5e borrows v5p's fitted share: named as borrowed.
  const ChipSpec v5e = find_chip("tpu-v5e");
  const StepReport r5 = simulate_step(t, place_on_device(v5e, 1, fsdp(1)), v5e, compiled_separate());
  EXPECT_NEAR(seconds_of(r5, CostBasis::kMatmulBorrowed), r5.step_time_s - 0.5e-6, 1e-9);
  // Without a fitted or borrowed share: the datasheet clock, and named so.
  ChipSpec bare = v7;
  bare.fitted_clock_share = 0;
  bare.borrowed_clock_ratio = 0;
  const StepReport rb = simulate_step(t, place_on_device(bare, 1, fsdp(1)), bare, compiled_separate());
  EXPECT_NEAR(seconds_of(rb, CostBasis::kMatmulDatasheet), rb.step_time_s - 0.5e-6, 1e-9);
  EXPECT_LT(rb.step_time_s, r7.step_time_s);
  // H100: the sustained clock comes from a timed GEMM of this shape; only the launch gap is
  // an estimate.
  const ChipSpec h100 = find_chip("h100");
  const StepReport rh = simulate_step(t, place_on_device(h100, 1, fsdp(1)), h100, compiled_separate());
  EXPECT_EQ(seconds_of(rh, CostBasis::kMatmulDatasheet), 0.0);
  EXPECT_LT(uncertain_share(rh), 0.01);
  EXPECT_NEAR(seconds_starting(rh, "per-kernel launch"), 1e-6, 1e-12);
}

TEST(Uncertainty, ThinMatmulAndMemoryBoundKernelsAreNamed) {
  const ChipSpec h100 = find_chip("h100");
  Trace t;
  // 8 rows: one partial tile per column block, memory bound.
  t.compute(matmul_op("aten::mm", {1, 8, 8192, 8192}));
  t.compute(pointwise_op("aten::add", OpKind::kElementwise, 2 << 28, 1 << 28));
  const StepReport r = simulate_step(t, place_on_device(h100, 1, fsdp(1)), h100, compiled_separate());
  EXPECT_GT(seconds_of(r, CostBasis::kMatmulShape), 0.0);
  EXPECT_GT(seconds_of(r, CostBasis::kMemory), seconds_of(r, CostBasis::kMatmulShape));
  EXPECT_EQ(seconds_of(r, CostBasis::kMatmulMeasured), 0.0);  // sure parts are not listed
  EXPECT_GT(uncertain_share(r), 0.99);
  for (size_t i = 1; i < r.uncertain.size(); ++i)
    EXPECT_GE(r.uncertain[i - 1].seconds, r.uncertain[i].seconds);
}

TEST(Uncertainty, ExposedCollectivesSplitByLatencyAndBandwidth) {
  const ChipSpec v7 = find_chip("tpu-v7");
  const Placement p = place_on_device(v7, 4096, fsdp(4096));
  Trace small, large;
  small.blocking({CollectiveKind::kAllGather, "dp_shard", 64 * 1024, "fsdp"});   // 16 B per chip
  large.blocking({CollectiveKind::kAllGather, "dp_shard", int64_t{4} << 30, "fsdp"});
  const StepReport rs = simulate_step(small, p, v7, compiled_separate());
  const StepReport rl = simulate_step(large, p, v7, compiled_separate());
  EXPECT_NEAR(seconds_starting(rs, "exposed latency-bound"), rs.step_time_s, 1e-12);
  EXPECT_EQ(seconds_starting(rs, "exposed bandwidth-bound"), 0.0);
  EXPECT_NEAR(seconds_starting(rl, "exposed bandwidth-bound"), rl.step_time_s, 1e-12);
  EXPECT_EQ(seconds_starting(rl, "exposed latency-bound"), 0.0);
}

TEST(Uncertainty, HiddenCommunicationIsNotListed) {
  const ChipSpec v7 = find_chip("tpu-v7");
  const Placement p = place_on_device(v7, 64, fsdp(64));
  Trace t;
  const int64_t w = t.issue({CollectiveKind::kAllGather, "dp_shard", 1 << 20, "fsdp"});
  t.compute(matmul_op("aten::mm", {1, 8192, 8192, 8192}));
  t.wait(w);
  SimulationOptions o = compiled_separate();
  o.collective_mode = CollectiveMode::kFused;
  const StepReport r = simulate_step(t, p, v7, o);
  EXPECT_EQ(seconds_starting(r, "exposed"), 0.0);
  EXPECT_LE(uncertain_share(r), 1.0);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::devices
