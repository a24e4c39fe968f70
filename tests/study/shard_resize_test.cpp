// Shard resizing: a recording made at a probe dp_shard degree and resized for degree W is the
// recording made at W, event by event (sizes, data flow, collectives), and replays to the same
// step time, memory (shards, gradients and optimizer state) and throughput; FSDP, HSDP with
// TP, PP, both collective modes, degrees whose shards pad (a 32-element norm over 64 ranks),
// fused buckets that split differently at another degree.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "study/evaluate.h"
#include "study_fixture.h"
#include "trainer/simulate/shard_resize.h"

namespace titan::study {
namespace {

using testing::tiny_config;

void expect_same_trace(const devices::Trace& fresh, const devices::Trace& resized, const std::string& what) {
  const auto &a = fresh.events(), &b = resized.events();
  ASSERT_EQ(a.size(), b.size()) << what;
  int64_t differences = 0;
  for (size_t i = 0; i < a.size() && differences < 5; ++i) {
    const devices::TraceEvent &x = a[i], &y = b[i];
    const std::string at = what + " event " + std::to_string(i) + " (" + x.op.name + ")";
    bool same = x.type == y.type && x.work == y.work;
    if (x.type == devices::TraceEvent::Type::kCompute) {
      const devices::OpDesc &p = x.op, &q = y.op;
      same = same && p.name == q.name && p.kind == q.kind && p.bytes_read == q.bytes_read &&
             p.bytes_written == q.bytes_written && p.flops == q.flops && p.dtype_bytes == q.dtype_bytes &&
             p.read_from == q.read_from && p.last_read_by == q.last_read_by && p.reads.size() == q.reads.size() &&
             p.writes.size() == q.writes.size();
      for (size_t k = 0; same && k < p.reads.size(); ++k)
        same = p.reads[k].id == q.reads[k].id && p.reads[k].bytes == q.reads[k].bytes;
      for (size_t k = 0; same && k < p.writes.size(); ++k)
        same = p.writes[k].id == q.writes[k].id && p.writes[k].bytes == q.writes[k].bytes;
      EXPECT_TRUE(same) << at << ": bytes " << p.bytes_read << "/" << p.bytes_written << " vs " << q.bytes_read
                        << "/" << q.bytes_written;
    } else if (x.type == devices::TraceEvent::Type::kIssue) {
      same = same && x.collective.kind == y.collective.kind && x.collective.group == y.collective.group &&
             x.collective.bytes == y.collective.bytes && x.collective.stream == y.collective.stream;
      EXPECT_TRUE(same) << at << ": collective on " << x.collective.group << " " << x.collective.bytes << " vs "
                        << y.collective.group << " " << y.collective.bytes << " bytes";
    } else {
      EXPECT_TRUE(same) << at;
    }
    differences += same ? 0 : 1;
  }
}

void expect_same_step(const RecordedStep& fresh, const RecordedStep& resized, const std::string& what) {
  EXPECT_EQ(fresh.local_params, resized.local_params) << what;
  EXPECT_EQ(fresh.global_batch, resized.global_batch) << what;
  EXPECT_EQ(fresh.microbatches, resized.microbatches) << what;
  EXPECT_EQ(fresh.dims.to_string(), resized.dims.to_string()) << what;
  ASSERT_EQ(!fresh.pipeline, !resized.pipeline) << what;
  if (!fresh.pipeline) return expect_same_trace(fresh.trace, resized.trace, what);
  const RecordedPipeline &a = *fresh.pipeline, &b = *resized.pipeline;
  EXPECT_EQ(a.local_params, b.local_params) << what;
  ASSERT_EQ(a.ranks.size(), b.ranks.size()) << what;
  for (size_t q = 0; q < a.ranks.size(); ++q) {
    ASSERT_EQ(a.ranks[q].size(), b.ranks[q].size()) << what << " rank " << q;
    for (size_t s = 0; s < a.ranks[q].size(); ++s)
      expect_same_trace(a.ranks[q][s].trace, b.ranks[q][s].trace,
                        what + " rank " + std::to_string(q) + " segment " + std::to_string(s));
  }
}

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
}  // namespace titan::study
