// Shard resizing: a recording made at a probe dp_shard degree and resized for degree W is the
// recording made at W, event by event (sizes, data flow, collectives), and replays to the same
// step time, memory (shards, gradients and optimizer state) and throughput; FSDP, HSDP with
// TP, PP, both collective modes, degrees whose shards pad (a 32-element norm over 64 ranks),
// fused buckets that split differently at another degree.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "study/evaluate.h"
#include "same_step.h"
#include "study_fixture.h"
#include "devices/trace_memory.h"
#include "trainer/simulate/shard_rebucket.h"
#include "trainer/simulate/shard_resize.h"

namespace titan::study {
namespace TITAN_UNIT_ID {
namespace {

using testing::expect_same_step;
using testing::tiny_config;

JobConfig at_degree(const std::vector<std::string>& args, int64_t w, int64_t others) {
  std::vector<std::string> a = args;
  a.insert(a.end(), {"--parallelism.data_parallel_shard_degree", std::to_string(w), "--simulation.num_chips",
                     std::to_string(w * others)});
  return tiny_config(a);
}

struct Layout {
  std::string label;
  std::vector<std::string> args;
  int64_t others;  // chips per dp_shard rank (replicate x tp x pp)
  std::vector<int64_t> degrees;
};

TEST(ShardResize, ResizedRecordingsAreTheRecordingsAtThatDegree) {
  const std::vector<Layout> layouts = {
      {"fsdp, selective AC, fused", {}, 1, {2, 4, 64}},
      {"fsdp, op-level selective AC, fused", {"--activation_checkpoint.selective_ac_option", "op"}, 1, {2, 16}},
      {"hsdp 2 x tp 2, full AC, separate",
       {"--parallelism.tensor_parallel_degree", "2", "--parallelism.data_parallel_replicate_degree", "2",
        "--activation_checkpoint.mode", "full", "--comm.collective_mode", "separate"},
       4,
       {2, 8}},
      // The replica all-reduce of gradient shards: 0.8 MiB shards of the embedding at the
      // probe degree fill a 0.5 MiB bucket each, at 64 they share one.
      {"hsdp 2, fused, 0.5 MiB buckets",
       {"--parallelism.data_parallel_replicate_degree", "2", "--comm.bucket_cap_mb", "0.5"},
       2,
       {2, 64}},
      {"pp 2 1F1B, fused",
       {"--parallelism.pipeline_parallel_degree", "2", "--activation_checkpoint.mode", "none",
        "--training.local_batch_size", "2", "--parallelism.pipeline_parallel_microbatch_size", "1"},
       2,
       {2, 16}},
      // Tied embeddings: the ends' all-reduce of the table's gradient shard follows the degree.
      {"pp 2 1F1B tied, fused",
       {"--parallelism.pipeline_parallel_degree", "2", "--activation_checkpoint.mode", "none",
        "--training.local_batch_size", "2", "--parallelism.pipeline_parallel_microbatch_size", "1",
        "--model.tie_embeddings", "true"},
       2,
       {2, 16}},
  };
  // The first step a thread records carries libtorch's first-use work (recording_cache.h).
  (void)record_step(tiny_config());
  for (const Layout& l : layouts) {
    SCOPED_TRACE(l.label);
    const ProbeRecording probe = record_probe(at_degree(l.args, 2, l.others));
    ASSERT_TRUE(probe.degree % 2 == 1 && probe.degree >= 3) << probe.degree;
    for (int64_t w : l.degrees) {
      const JobConfig cfg = at_degree(l.args, w, l.others);
      const std::string what = l.label + " at dp_shard " + std::to_string(w);
      const RecordedStep fresh = record_step(cfg);
      RecordedStep resized;
      std::string why;
      ASSERT_TRUE(resize_for_shard_degree(probe, cfg, &resized, &why)) << what << ": " << why;
      expect_same_step(fresh, resized, what);
      const devices::ChipSpec chip = simulated_chip(cfg);
      const SimulationResult a = replay_step(cfg, fresh, chip, fresh.placement);
      const SimulationResult b = replay_step(cfg, resized, chip, fresh.placement);
      EXPECT_EQ(a.report.step_time_s, b.report.step_time_s) << what;
      EXPECT_EQ(a.report.exposed_comm_s, b.report.exposed_comm_s) << what;
      EXPECT_EQ(a.memory.total, b.memory.total) << what;
      EXPECT_EQ(a.memory.optimizer, b.memory.optimizer) << what;
      EXPECT_EQ(a.tokens_per_s_per_chip, b.tokens_per_s_per_chip) << what;
      EXPECT_EQ(a.mfu_percent, b.mfu_percent) << what;
    }
  }
}

// A step resized again from the same probe is rewritten in place (sizes only) when the
// buckets split as before, and is then the step resized afresh: degrees in an order that goes
// back and forth across bucket splits (the 0.5 MiB buckets split anew between 2 and 64).
TEST(ShardResize, ResizingIntoAStepResizedBeforeIsAFreshResize) {
  const std::vector<Layout> layouts = {
      {"fsdp, fused", {}, 1, {}},
      {"hsdp 2, fused, 0.5 MiB buckets",
       {"--parallelism.data_parallel_replicate_degree", "2", "--comm.bucket_cap_mb", "0.5"},
       2,
       {}},
      {"pp 2 1F1B, separate",
       {"--parallelism.pipeline_parallel_degree", "2", "--activation_checkpoint.mode", "none",
        "--training.local_batch_size", "2", "--parallelism.pipeline_parallel_microbatch_size", "1",
        "--comm.collective_mode", "separate"},
       2,
       {}},
      // A pipeline whose replica all-reduce splits anew between degrees: a resize into the
      // step at another split copies only the segments rebucketing moves.
      {"pp 2 1F1B x hsdp 2, fused, 0.5 MiB buckets",
       {"--parallelism.pipeline_parallel_degree", "2", "--activation_checkpoint.mode", "none",
        "--training.local_batch_size", "2", "--parallelism.pipeline_parallel_microbatch_size", "1",
        "--parallelism.data_parallel_replicate_degree", "2", "--comm.bucket_cap_mb", "0.5"},
       4,
       {}},
  };
  for (const Layout& l : layouts) {
    SCOPED_TRACE(l.label);
    const ProbeRecording probe = record_probe(at_degree(l.args, 2, l.others));
    RecordedStep reused;
    ResizeState state;
    int in_place = 0;
    for (int64_t w : {64, 128, 2, 4, 64, 64, 8, 2, 2}) {
      const JobConfig cfg = at_degree(l.args, w, l.others);
      const std::string what = l.label + " at dp_shard " + std::to_string(w);
      RecordedStep fresh;
      std::string why;
      ASSERT_TRUE(resize_for_shard_degree(probe, cfg, &fresh, &why)) << what << ": " << why;
      ASSERT_TRUE(resize_for_shard_degree(probe, cfg, &reused, &why, &state)) << what << ": " << why;
      in_place += state.last_in_place ? 1 : 0;
      expect_same_step(fresh, reused, what);
      const devices::ChipSpec chip = simulated_chip(cfg);
      const devices::Placement placement =
          devices::place_on_device(chip, cfg.simulation.num_chips, mesh_dims(fresh.dims), cfg.simulation.topology);
      const SimulationResult a = replay_step(cfg, fresh, chip, placement);
      const SimulationResult b = replay_step(cfg, reused, chip, placement);
      EXPECT_EQ(a.report.step_time_s, b.report.step_time_s) << what;
      EXPECT_EQ(a.report.exposed_comm_s, b.report.exposed_comm_s) << what;
      EXPECT_EQ(a.memory.total, b.memory.total) << what;
    }
    EXPECT_GE(in_place, 2);  // at least the repeated degrees
  }
}

void expect_same_walk(const devices::TraceMemory& a, const devices::TraceMemory& b, const std::string& what) {
  EXPECT_EQ(a.state_bytes, b.state_bytes) << what;
  EXPECT_EQ(a.peak_bytes, b.peak_bytes) << what;
  EXPECT_EQ(a.peak_temporaries, b.peak_temporaries) << what;
  EXPECT_EQ(a.peak_resized, b.peak_resized) << what;
  EXPECT_EQ(a.peak_op, b.peak_op) << what;
  EXPECT_EQ(a.peak_by_op, b.peak_by_op) << what;
}

// A resized step walks the probe's live ranges with its own bytes, so also the probe's flags
// for temporaries made and last used inside one run of element-wise ops (free where runs
// fuse). Runs end at collective issues and waits, which a call whose buckets split anew has
// rebuilt; a call's issues (and waits) come back to back with no op between them, so the
// rebuilt ones end the same runs and the flags are the recording's at that degree. Checked
// where the split changes (0.5 MiB buckets of 0.8 MiB embedding shards at the probe degree,
// shared at 64; separate mode's one collective per tensor never splits anew), replayed with
// the element-wise runs fused (defer_and_fuse) and eager.
TEST(ShardResize, RebuiltBucketsWalkTheFusedRunsOfTheRecordingAtThatDegree) {
  const std::vector<Layout> layouts = {
      {"hsdp 2, fused, 0.5 MiB buckets",
       {"--parallelism.data_parallel_replicate_degree", "2", "--comm.bucket_cap_mb", "0.5"},
       2,
       {64, 128}},
      {"fsdp, op-level selective AC, fused, 0.5 MiB buckets",
       {"--activation_checkpoint.selective_ac_option", "op", "--comm.bucket_cap_mb", "0.5"},
       1,
       {64}},
  };
  auto flags = [](const RecordedStep& s) {
    std::vector<bool> out;
    for (const devices::LiveRange& r : devices::live_ranges({&s.trace}, s.trace.storages(), s.trace.storage_resizes()).ranges)
      out.push_back(r.inside_fusion);
    return out;
  };
  for (const Layout& l : layouts) {
    SCOPED_TRACE(l.label);
    const ProbeRecording probe = record_probe(at_degree(l.args, 2, l.others));
    const std::vector<bool> probe_flags = flags(probe.step);
    ASSERT_NE(std::count(probe_flags.begin(), probe_flags.end(), true), 0);  // runs to fuse
    for (int64_t w : l.degrees) {
      const JobConfig cfg = at_degree(l.args, w, l.others);
      const std::string what = l.label + " at dp_shard " + std::to_string(w);
      ASSERT_EQ(cfg.simulation.execution, Execution::kDeferAndFuse) << what;
      RecordedStep resized;
      ResizeState state;
      std::string why;
      ASSERT_TRUE(resize_for_shard_degree(probe, cfg, &resized, &why, &state)) << what << ": " << why;
      ASSERT_TRUE(state.layout && !state.layout->ranks.empty());
      const auto& moved = state.layout->ranks[0].moved;
      ASSERT_TRUE(std::any_of(moved.begin(), moved.end(), [](const auto& m) { return !m.empty(); }))
          << what << ": no call's buckets were rebuilt";
      const RecordedStep fresh = record_step(cfg);
      expect_same_step(fresh, resized, what);
      EXPECT_EQ(flags(fresh), probe_flags) << what;
      EXPECT_EQ(flags(resized), probe_flags) << what;
      expect_same_walk(fresh.memory.fused(), resized.memory.fused(), what + " fused");
      expect_same_walk(fresh.memory.eager(), resized.memory.eager(), what + " eager");
      EXPECT_LT(fresh.memory.fused().peak_bytes, fresh.memory.eager().peak_bytes) << what;  // the flags count
      const devices::ChipSpec chip = simulated_chip(cfg);
      const SimulationResult a = replay_step(cfg, fresh, chip, fresh.placement);
      const SimulationResult b = replay_step(cfg, resized, chip, fresh.placement);
      EXPECT_EQ(a.memory.total, b.memory.total) << what;
      EXPECT_EQ(a.report.step_time_s, b.report.step_time_s) << what;
    }
  }
}

TEST(ShardResize, CacheRecordsOneProbePerLayoutForEveryDegree) {
  RecordingCache cache;
  cache.layer_extrapolation = false;
  std::vector<double> step;
  for (int64_t w : {4, 8, 32}) {
    const Point p = evaluate_config(at_degree({}, w, 1), cache);
    ASSERT_EQ(p.verdict, Verdict::kOk) << p.reason;
    step.push_back(p.result.report.step_time_s);
  }
  EXPECT_EQ(cache.recordings(), 1);  // the probe
  EXPECT_EQ(cache.resized.load(), 3);
  EXPECT_EQ(cache.not_resized.load(), 0) << cache.first_not_resized();
  // Replays at other degrees differ (group sizes, shard sizes): nothing was copied over.
  EXPECT_NE(step[0], step[2]);
}

TEST(ShardResize, CacheLetsAProbeGoOnceEveryPrefetchOfItIsResized) {
  // Prefetched points of one layout at three degrees, as a study queues them: the probe is
  // held until the last of them is resized, then let go; the points are those of a cache
  // that keeps it, and a later lookup records the probe again and keeps it. The layout's
  // dp_replicate 1 probe is derived from its dp_replicate 2 probe, which a prefetched
  // derivation holds until it is done and a lookup's keeps.
  const JobConfig base = tiny_config();
  auto overrides = [](int64_t w) {
    return Overrides{{"parallelism.data_parallel_shard_degree", std::to_string(w)},
                     {"simulation.num_chips", std::to_string(w)}};
  };
  RecordingCache cache, kept;
  cache.layer_extrapolation = kept.layer_extrapolation = false;
  std::vector<Prefetched> pre;
  for (int64_t w : {4, 8, 32}) pre.push_back(prefetch(base, overrides(w), cache));
  EXPECT_EQ(cache.probes_held(), 2u);
  const std::vector<int64_t> degrees = {4, 8, 32};
  for (size_t i = 0; i < degrees.size(); ++i) {
    const Point p = evaluate(base, overrides(degrees[i]), cache, &pre[i]);
    pre[i] = Prefetched{};
    ASSERT_EQ(p.verdict, Verdict::kOk) << p.reason;
    EXPECT_EQ(cache.probes_held(), i + 1 < degrees.size() ? 1u : 0u) << degrees[i];
    const Point q = evaluate(base, overrides(degrees[i]), kept);
    EXPECT_EQ(p.result.report.step_time_s, q.result.report.step_time_s) << degrees[i];
    EXPECT_EQ(p.result.memory.total_gib(), q.result.memory.total_gib()) << degrees[i];
  }
  EXPECT_EQ(cache.derived_replicas.load(), 1);
  // Lookups that were not prefetched keep theirs, and the dp_replicate 2 probe derived from.
  EXPECT_EQ(kept.probes_held(), 2u);
  EXPECT_EQ(cache.recordings(), 1);
  const Point again = evaluate(base, overrides(8), cache);
  EXPECT_EQ(again.verdict, Verdict::kOk) << again.reason;
  EXPECT_EQ(cache.recordings(), 2);
  EXPECT_EQ(cache.probes_held(), 2u);
}

TEST(ShardResize, APrefetchDroppedUnusedLetsItsProbeGo) {
  // A point that fails before it takes its recordings drops its prefetch unused (evaluate()
  // stops at the first sample that fails): that use is released too, so the probe goes once
  // the others have been resized.
  const JobConfig base = tiny_config();
  auto overrides = [](int64_t w) {
    return Overrides{{"parallelism.data_parallel_shard_degree", std::to_string(w)},
                     {"simulation.num_chips", std::to_string(w)}};
  };
  RecordingCache cache;
  cache.layer_extrapolation = false;
  std::vector<Prefetched> pre;
  for (int64_t w : {4, 8, 32}) pre.push_back(prefetch(base, overrides(w), cache));
  ASSERT_EQ(cache.probes_held(), 2u);  // the dp_replicate 1 probe and the one it derives from
  pre[1] = Prefetched{};
  for (size_t i : {0, 2}) {
    EXPECT_EQ(evaluate(base, overrides(i == 0 ? 4 : 32), cache, &pre[i]).verdict, Verdict::kOk);
    pre[i] = Prefetched{};
  }
  EXPECT_EQ(cache.probes_held(), 0u);
  EXPECT_EQ(cache.recordings(), 1);
}

TEST(ShardResize, OnlyLayoutsWithAShardDegreeThatFollowsTheBatch) {
  EXPECT_TRUE(shard_resizable(at_degree({}, 8, 1)));
  EXPECT_FALSE(shard_resizable(at_degree({}, 1, 1)));
  // A fixed global batch: the micro-batch count follows the data-parallel degree.
  EXPECT_FALSE(shard_resizable(at_degree({"--training.global_batch_size", "64"}, 8, 1)));
  const JobConfig c = with_shard_degree(at_degree({"--parallelism.tensor_parallel_degree", "2"}, 4, 2), 5);
  EXPECT_EQ(c.simulation.num_chips, 10);
  EXPECT_EQ(c.parallelism.data_parallel_shard_degree, 5);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan::study
