// Remembered replays of resized steps: a probe's traces are named, resizing keeps the name of
// exactly the traces it leaves as the probe recorded them, and a study's memo
// (devices/replay_memo.h) then answers for them at other degrees with what a replay makes:
// replays through one memo across degrees, in an order that goes back and forth across
// bucket splits, equal replays of fresh resizes without one. The same holds for the kernels
// the memo keeps of each run of a probe's ops (devices/lowering_memo.h), which serve every
// resized step, single-stage ones included.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "devices/replay_memo.h"
#include "same_step.h"
#include "study/evaluate.h"
#include "study_fixture.h"
#include "trainer/simulate/shard_plan.h"
#include "trainer/simulate/shard_resize.h"

namespace titan::study {
namespace TITAN_UNIT_ID {
namespace {

using testing::expect_same_trace;
using testing::tiny_config;

const std::vector<std::string> kPipeline = {"--parallelism.pipeline_parallel_degree", "2",
                                            "--activation_checkpoint.mode", "none",
                                            "--training.local_batch_size", "2",
                                            "--parallelism.pipeline_parallel_microbatch_size", "1"};

void expect_same_result(const SimulationResult& a, const SimulationResult& b, const std::string& what) {
  EXPECT_EQ(a.report.step_time_s, b.report.step_time_s) << what;
  EXPECT_EQ(a.report.compute_s, b.report.compute_s) << what;
  EXPECT_EQ(a.report.exposed_comm_s, b.report.exposed_comm_s) << what;
  EXPECT_EQ(a.report.idle_s, b.report.idle_s) << what;
  EXPECT_EQ(a.report.executed_flops, b.report.executed_flops) << what;
  EXPECT_EQ(a.report.layout, b.report.layout) << what;
  EXPECT_EQ(a.pipeline_bubble_fraction, b.pipeline_bubble_fraction) << what;
  EXPECT_EQ(a.mfu_percent, b.mfu_percent) << what;
  ASSERT_EQ(a.report.costs.size(), b.report.costs.size()) << what;
  for (size_t i = 0; i < a.report.costs.size(); ++i) {
    EXPECT_EQ(a.report.costs[i].category, b.report.costs[i].category) << what;
    EXPECT_EQ(a.report.costs[i].seconds, b.report.costs[i].seconds) << what;
  }
  ASSERT_EQ(a.report.op_costs.size(), b.report.op_costs.size()) << what;
  for (size_t i = 0; i < a.report.op_costs.size(); ++i) {
    EXPECT_EQ(a.report.op_costs[i].category, b.report.op_costs[i].category) << what;
    EXPECT_EQ(a.report.op_costs[i].seconds, b.report.op_costs[i].seconds) << what;
  }
  ASSERT_EQ(a.exposed_comm_by_kind.size(), b.exposed_comm_by_kind.size()) << what;
  for (size_t i = 0; i < a.exposed_comm_by_kind.size(); ++i)
    EXPECT_EQ(a.exposed_comm_by_kind[i].seconds, b.exposed_comm_by_kind[i].seconds) << what;
}

JobConfig at_degree(std::vector<std::string> args, int64_t w, int64_t others) {
  args.insert(args.end(), {"--parallelism.data_parallel_shard_degree", std::to_string(w), "--simulation.num_chips",
                           std::to_string(w * others)});
  return tiny_config(args);
}

TEST(RememberedReplays, ResizedPipelineStepsReplayAsWithoutTheMemo) {
  struct Case {
    std::string label;
    std::vector<std::string> extra;
    int64_t others;
  };
  const std::vector<Case> cases = {
      {"pp 2 1F1B, fused", {}, 2},
      {"pp 2 1F1B, separate", {"--comm.collective_mode", "separate"}, 2},
      // The replica all-reduce splits anew between degrees: rebucketing rebuilds segments.
      {"pp 2 1F1B x hsdp 2, fused, 0.5 MiB buckets",
       {"--parallelism.data_parallel_replicate_degree", "2", "--comm.bucket_cap_mb", "0.5"},
       4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    std::vector<std::string> args = kPipeline;
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    const ProbeRecording probe = record_probe(at_degree(args, 2, c.others));
    const auto& ranks = probe.step.pipeline->ranks;
    for (size_t q = 0; q < ranks.size(); ++q)
      for (const auto& seg : ranks[q]) EXPECT_NE(seg.trace.content_id(), 0u);
    devices::ReplayMemo memo;
    RecordedStep reused;
    ResizeState state;
    int kept_names = 0;
    for (int64_t w : {64, 128, 2, 4, 64, 8, 2}) {
      const JobConfig cfg = at_degree(args, w, c.others);
      const std::string what = c.label + " at dp_shard " + std::to_string(w);
      RecordedStep fresh;
      std::string why;
      ASSERT_TRUE(resize_for_shard_degree(probe, cfg, &fresh, &why)) << what << ": " << why;
      ASSERT_TRUE(resize_for_shard_degree(probe, cfg, &reused, &why, &state)) << what << ": " << why;
      // A trace that keeps its name holds the probe's events.
      for (size_t q = 0; q < ranks.size(); ++q) {
        const auto& segs = reused.pipeline->ranks[q];
        ASSERT_EQ(segs.size(), ranks[q].size());
        for (size_t i = 0; i < segs.size(); ++i) {
          if (segs[i].trace.content_id() == 0) continue;
          EXPECT_EQ(segs[i].trace.content_id(), ranks[q][i].trace.content_id()) << what;
          expect_same_trace(ranks[q][i].trace, segs[i].trace, what + " segment " + std::to_string(i));
          ++kept_names;
        }
      }
      const devices::ChipSpec chip = simulated_chip(cfg);
      const devices::Placement placement =
          devices::place_on_device(chip, cfg.simulation.num_chips, mesh_dims(fresh.dims), cfg.simulation.topology);
      const SimulationResult a = replay_step(cfg, fresh, chip, placement);
      expect_same_result(a, replay_step(cfg, reused, chip, placement, /*keep_events=*/false, &memo), what);
    }
    EXPECT_GT(kept_names, 0);  // some segments hold no shard-sized tensor nor FSDP collective
    EXPECT_GT(memo.hits, 0);
  }
}

// Its lowerings are remembered all the same (devices/lowering_memo.h): single-stage steps
// resized back and forth through one memo replay as fresh resizes without it, in place or not.
TEST(RememberedReplays, ResizedSingleStageStepsReplayAsWithoutTheMemo) {
  for (const std::string mode : {"fused", "separate"}) {
    SCOPED_TRACE(mode);
    const std::vector<std::string> args = {"--comm.collective_mode", mode};
    const ProbeRecording probe = record_probe(at_degree(args, 2, 1));
    devices::ReplayMemo memo;
    RecordedStep reused;
    ResizeState state;
    for (int64_t w : {64, 2, 8, 64, 4}) {
      const JobConfig cfg = at_degree(args, w, 1);
      const std::string what = mode + " at dp_shard " + std::to_string(w);
      RecordedStep fresh;
      std::string why;
      ASSERT_TRUE(resize_for_shard_degree(probe, cfg, &fresh, &why)) << what << ": " << why;
      ASSERT_TRUE(resize_for_shard_degree(probe, cfg, &reused, &why, &state)) << what << ": " << why;
      const devices::ChipSpec chip = simulated_chip(cfg);
      const devices::Placement placement =
          devices::place_on_device(chip, cfg.simulation.num_chips, mesh_dims(fresh.dims), cfg.simulation.topology);
      const SimulationResult a = replay_step(cfg, fresh, chip, placement);
      expect_same_result(a, replay_step(cfg, reused, chip, placement, /*keep_events=*/false, &memo), what);
      expect_same_result(a, replay_step(cfg, fresh, chip, placement, /*keep_events=*/false, &memo), what + ", fresh");
    }
    const JobConfig cfg = at_degree(args, 2, 1);
    EXPECT_GT(memo.lowering(simulated_chip(cfg), execution_mode(cfg)).hits, 0);
  }
}

// A whole step under FSDP holds FSDP's collectives: resizing always drops its name, and the
// memo is never asked about it.
TEST(RememberedReplays, SingleStageStepsLoseTheirNameWhenResized) {
  const ProbeRecording probe = record_probe(at_degree({}, 2, 1));
  EXPECT_NE(probe.step.trace.content_id(), 0u);
  RecordedStep resized;
  std::string why;
  ASSERT_TRUE(resize_for_shard_degree(probe, at_degree({}, 8, 1), &resized, &why)) << why;
  EXPECT_EQ(resized.trace.content_id(), 0u);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::study
