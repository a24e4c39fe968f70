// Layer extrapolation: figures extended from three shallow recordings equal those of a
// recording at the config's own depth (FSDP, TP, HSDP, PP 1F1B and interleaved, both
// collective modes, a depth that does not divide over the stages), and a step that is not
// affine in depth is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "study/evaluate.h"
#include "study_fixture.h"
#include "trainer/config/resolve_model.h"
#include "trainer/simulate/layer_extrapolation.h"
#include "trainer/step/trainer.h"

namespace titan::study {
namespace TITAN_UNIT_ID {
namespace {

using testing::tiny_config;

constexpr double kTol = 1e-9;  // relative; the replay's sums round near 1e-15

// floor: a time is compared next to the step time (a part of 1e-17 s is rounding noise).
void expect_close(double full, double x, const std::string& what, double floor = 1e-30) {
  EXPECT_LE(std::abs(full - x), kTol * std::max(std::abs(full), floor)) << what << ": full " << full << " vs " << x;
}

std::map<std::string, double> by_category(const std::vector<devices::CostItem>& items) {
  std::map<std::string, double> m;
  for (const auto& c : items) m[c.category] += c.seconds;
  return m;
}

void expect_same_items(const std::vector<devices::CostItem>& full, const std::vector<devices::CostItem>& x,
                       const std::string& what, double step) {
  const auto a = by_category(full), b = by_category(x);
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [k, v] : a) {
    ASSERT_TRUE(b.count(k)) << what << " " << k;
    expect_close(v, b.at(k), what + " " + k, step);
  }
}

void expect_same_result(const Point& full, const Point& x, const std::string& label) {
  SCOPED_TRACE(label);
  ASSERT_EQ(full.verdict, x.verdict) << full.reason << " / " << x.reason;
  const SimulationResult &a = full.result, &b = x.result;
  const auto &ra = a.report, &rb = b.report;
  expect_close(ra.step_time_s, rb.step_time_s, "step time");
  expect_close(ra.compute_s, rb.compute_s, "compute", ra.step_time_s);
  expect_close(ra.comm_s, rb.comm_s, "comm busy", ra.step_time_s);
  expect_close(ra.exposed_comm_s, rb.exposed_comm_s, "exposed comm", ra.step_time_s);
  expect_close(ra.idle_s, rb.idle_s, "idle", ra.step_time_s);
  expect_close(ra.executed_flops, rb.executed_flops, "executed FLOPs");
  EXPECT_EQ(ra.ops, rb.ops);
  EXPECT_EQ(ra.kernels, rb.kernels);
  EXPECT_EQ(ra.collectives, rb.collectives);
  const double step = ra.step_time_s;
  expect_same_items(ra.costs, rb.costs, "cost", step);
  expect_same_items(ra.uncertain, rb.uncertain, "unmeasured basis", step);
  expect_same_items(ra.op_costs, rb.op_costs, "op", step);
  expect_same_items(a.exposed_comm_by_kind, b.exposed_comm_by_kind, "exposed", step);
  ASSERT_EQ(ra.streams.size(), rb.streams.size());
  for (size_t i = 0; i < ra.streams.size(); ++i) {
    EXPECT_EQ(ra.streams[i].name, rb.streams[i].name);
    expect_close(ra.streams[i].busy_s, rb.streams[i].busy_s, "stream " + ra.streams[i].name, step);
  }
  expect_close(a.tokens_per_s_per_chip, b.tokens_per_s_per_chip, "tokens/s/chip");
  expect_close(a.mfu_percent, b.mfu_percent, "MFU");
  EXPECT_EQ(a.memory.total, b.memory.total);
  EXPECT_EQ(a.memory.fits, b.memory.fits);
  EXPECT_EQ(a.global_batch, b.global_batch);
  EXPECT_EQ(a.microbatches, b.microbatches);
  expect_close(a.pipeline_bubble_fraction, b.pipeline_bubble_fraction, "bubble");
  ASSERT_EQ(a.pipeline_rank_busy_s.size(), b.pipeline_rank_busy_s.size());
  for (size_t q = 0; q < a.pipeline_rank_busy_s.size(); ++q)
    expect_close(a.pipeline_rank_busy_s[q], b.pipeline_rank_busy_s[q], "rank busy");
  EXPECT_EQ(a.pipeline_rank_memory_gib, b.pipeline_rank_memory_gib);
  expect_close(full.breakdown.compute_s, x.breakdown.compute_s, "breakdown compute");
  expect_close(full.breakdown.bubble_s, x.breakdown.bubble_s, "breakdown bubble");
}

struct Layout {
  std::string label;
  std::vector<std::string> args;
};

TEST(LayerExtrapolation, MatchesFullDepthRecordings) {
  const std::vector<Layout> layouts = {
      {"fsdp 8, selective AC, fused, 36 layers", {"--model.n_layers", "36"}},
      {"fsdp 8, op-level selective AC, 20 layers",
       {"--model.n_layers", "20", "--activation_checkpoint.selective_ac_option", "op"}},
      {"tp 2 x fsdp 4, separate",
       {"--model.n_layers", "16", "--parallelism.tensor_parallel_degree", "2", "--comm.collective_mode", "separate"}},
      {"hsdp 2x2 x tp 2, full AC",
       {"--model.n_layers", "16", "--parallelism.tensor_parallel_degree", "2",
        "--parallelism.data_parallel_replicate_degree", "2", "--activation_checkpoint.mode", "full"}},
      {"pp 2 x fsdp 4 1F1B, 41 layers (odd over 2 stages)",
       {"--model.n_layers", "41", "--parallelism.pipeline_parallel_degree", "2", "--activation_checkpoint.mode",
        "none", "--training.local_batch_size", "2", "--parallelism.pipeline_parallel_microbatch_size", "1"}},
      {"pp 2 x tp 2 x fsdp 2 interleaved, separate",
       {"--model.n_layers", "34", "--parallelism.pipeline_parallel_degree", "2",
        "--parallelism.tensor_parallel_degree", "2", "--parallelism.pipeline_parallel_schedule", "Interleaved1F1B",
        "--activation_checkpoint.mode", "full", "--training.local_batch_size", "2",
        "--parallelism.pipeline_parallel_microbatch_size", "1", "--comm.collective_mode", "separate"}},
  };
  RecordingCache cache;
  for (const Layout& l : layouts) {
    const JobConfig cfg = tiny_config(l.args);
    const LayerSamples s = layer_samples(cfg);
    ASSERT_TRUE(s.ok) << l.label << ": " << s.why;
    cache.layer_extrapolation = false;
    const Point full = evaluate_config(cfg, cache);
    ASSERT_FALSE(full.extrapolated);
    cache.layer_extrapolation = true;
    const int64_t failed_before = cache.failed_fits.load();
    const Point x = evaluate_config(cfg, cache);
    EXPECT_TRUE(x.extrapolated) << l.label << " was recorded at full depth: " << x.full_depth_reason;
    expect_same_result(full, x, l.label);
    // Each failed fit moved the samples one layer step deeper, and the study counted it.
    ASSERT_EQ(x.result.extrapolated_from_layers.size(), 3u) << l.label;
    EXPECT_EQ(cache.failed_fits.load() - failed_before, (x.result.extrapolated_from_layers[0] - s.layers[0]) / s.step)
        << l.label;
  }
}

TEST(LayerExtrapolation, SamplesKeepTheStageSplitAndTheCheckpointPeriod) {
  // No PP, selective AC every 2nd block: blocks repeat in pairs.
  LayerSamples s = layer_samples(tiny_config({"--model.n_layers", "36"}));
  ASSERT_TRUE(s.ok) << s.why;
  EXPECT_EQ(s.step, 2);
  EXPECT_EQ(s.layers, (std::array<int64_t, 3>{2, 4, 6}));
  // 2 stages, full AC, 17 layers: one layer per stage per step, remainder 1 kept.
  s = layer_samples(tiny_config({"--model.n_layers", "17", "--parallelism.pipeline_parallel_degree", "2",
                                 "--activation_checkpoint.mode", "full"}));
  ASSERT_TRUE(s.ok) << s.why;
  EXPECT_EQ(s.step, 2);
  EXPECT_EQ(s.layers, (std::array<int64_t, 3>{3, 5, 7}));
  // One stage, full AC, fused collectives: one block has no next block to prefetch, so the
  // samples start at two blocks; separate collectives and pipeline stages start at one.
  s = layer_samples(tiny_config({"--model.n_layers", "36", "--activation_checkpoint.mode", "full"}));
  ASSERT_TRUE(s.ok) << s.why;
  EXPECT_EQ(s.layers, (std::array<int64_t, 3>{2, 3, 4}));
  s = layer_samples(tiny_config(
      {"--model.n_layers", "36", "--activation_checkpoint.mode", "full", "--comm.collective_mode", "separate"}));
  ASSERT_TRUE(s.ok) << s.why;
  EXPECT_EQ(s.layers, (std::array<int64_t, 3>{1, 2, 3}));
  s = layer_samples(tiny_config({"--model.n_layers", "36", "--activation_checkpoint.mode", "full",
                                 "--parallelism.pipeline_parallel_degree", "2"}));
  ASSERT_TRUE(s.ok) << s.why;
  EXPECT_EQ(s.layers, (std::array<int64_t, 3>{2, 4, 6}));
  // Too shallow to gain: recorded at its own depth.
  EXPECT_FALSE(layer_samples(tiny_config({"--model.n_layers", "4"})).ok);
  // One step deeper only the deepest sample is new: it pays while that one holds at most half
  // the config's layers (36 layers, step 4: 4 8 12 -> 8 12 16 -> refused at 12 16 20).
  s = layer_samples(tiny_config({"--model.n_layers", "36", "--parallelism.pipeline_parallel_degree", "2"}));
  ASSERT_TRUE(s.ok) << s.why;
  EXPECT_EQ(s.layers, (std::array<int64_t, 3>{4, 8, 12}));
  s = deeper_samples(s);
  ASSERT_TRUE(s.ok) << s.why;
  EXPECT_EQ(s.layers, (std::array<int64_t, 3>{8, 12, 16}));
  s = deeper_samples(s);
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.why.find("too shallow"), std::string::npos) << s.why;
}

TEST(LayerExtrapolation, RefusesAFigureThatIsNotAffineInDepth) {
  LayerSamples s;
  s.ok = true;
  s.target_layers = 10, s.step = 1, s.layers = {1, 2, 3};
  std::array<ReplayFigures, 3> f;
  for (int j = 0; j < 3; ++j) {
    f[j].report.step_time_s = 1.0 + j;  // affine
    f[j].report.compute_s = 0.5 * (j + 1);
    f[j].local_params = 100 + 10 * j;
  }
  Extrapolation x = extrapolate_layers(s, f);
  ASSERT_TRUE(x.ok) << x.why;
  EXPECT_DOUBLE_EQ(x.figures.report.step_time_s, 10.0);  // 3 + 7 x 1
  EXPECT_EQ(x.figures.local_params, 190);
  f[2].report.idle_s = 1e-3;  // idle appears only at the deepest sample: a regime change
  x = extrapolate_layers(s, f);
  EXPECT_FALSE(x.ok);
  EXPECT_NE(x.why.find("idle"), std::string::npos) << x.why;
}

// The study orders its points by what they record before it queues anything: the plan names
// the layer samples it will ask for (or the config's own depth, as its model resolves it),
// queueing asks for exactly those, and a combination that does not apply plans and queues
// nothing.
TEST(LayerExtrapolation, PrefetchPlansTheSamplesItQueues) {
  const JobConfig base = tiny_config({"--model.n_layers", "12"});
  RecordingCache cache;
  Prefetched p = plan_prefetch(base, {{"activation_checkpoint.mode", "full"}}, cache);
  ASSERT_TRUE(p.ok);
  EXPECT_TRUE(p.sampled);
  const LayerSamples s = layer_samples(p.cfg);
  ASSERT_TRUE(s.ok) << s.why;
  EXPECT_EQ(p.layers, std::vector<int64_t>(s.layers.begin(), s.layers.end()));
  EXPECT_TRUE(p.recs.empty());
  queue_prefetch(p, cache);
  EXPECT_EQ(p.recs.size(), 3u);
  for (auto& r : p.recs) EXPECT_EQ(r.get()->trace.events().empty(), false);

  RecordingCache whole;
  whole.layer_extrapolation = false;
  Prefetched q = plan_prefetch(base, {}, whole);
  ASSERT_TRUE(q.ok);
  EXPECT_FALSE(q.sampled);
  EXPECT_EQ(q.layers, std::vector<int64_t>{12});
  queue_prefetch(q, whole);
  EXPECT_EQ(q.recs.size(), 1u);
  // Under a flavor model.n_layers is 0: the depth is the flavor's.
  JobConfig flavored = base;
  flavored.model.n_layers = 0;
  const int64_t flavor_layers = resolve_model_args(flavored, vocab_without_data(flavored)).n_layers;
  ASSERT_GT(flavor_layers, 0);
  EXPECT_EQ(plan_prefetch(flavored, {}, whole).layers, std::vector<int64_t>{flavor_layers});

  Prefetched bad = plan_prefetch(base, {{"parallelism.tensor_parallel_degree", "3"}}, cache);
  EXPECT_FALSE(bad.ok);
  queue_prefetch(bad, cache);
  EXPECT_TRUE(bad.recs.empty());
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::study
