// Pipeline rank reuse (simulation.pipeline_rank_reuse, trainer/simulate/pipeline_rank_reuse.h):
// a deep pipeline records one rank per kind of stage and builds the others from its segments
// in their own schedule's order. Checked against recording every rank.
#include <gtest/gtest.h>

#include "trainer/config/config_loader.h"
#include "trainer/config/resolve_model.h"
#include "trainer/simulate/pipeline_rank_reuse.h"
#include "trainer/simulate/recording_wire.h"
#include "trainer/simulate/simulate.h"
#include "trainer/simulate/simulate_pipeline.h"
#include "trainer/step/pipeline_model.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

// A tiny Qwen3 with 18 layers over 8 pipeline ranks x dp_shard 2 (16 chips): with the
// embedding and output counted as a layer each, 1F1B's stages hold 2, 3, 3, 3, 2, 2, 2, 1
// layers, so two kinds of middle rank are built from a recorded one.
JobConfig deep_config(const std::string& schedule, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--config", std::string(TITAN_SOURCE_DIR) + "/configs/qwen3_8b.toml",
                                   "--job.dump_folder", "/tmp/titan_simulate_pipeline_reuse_test",
                                   "--model.n_layers", "18", "--model.dim", "256", "--model.ffn_dim", "768",
                                   "--model.n_heads", "4", "--model.n_kv_heads", "2", "--model.head_dim", "64",
                                   "--model.vocab_size", "1024", "--training.seq_len", "256",
                                   "--training.local_batch_size", "16", "--training.global_batch_size", "32",
                                   "--simulation.num_chips", "16", "--simulation.device", "a100",
                                   "--activation_checkpoint.mode", "none",
                                   "--parallelism.pipeline_parallel_degree", "8",
                                   "--parallelism.data_parallel_shard_degree", "2",
                                   "--parallelism.pipeline_parallel_schedule", schedule};
  args.insert(args.end(), extra.begin(), extra.end());
  return load_job_config(args);
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The kinds of rank: 1F1B's middle ranks with as many layers share one; the first and last
// stay their own; ZBV's turn of the V (both stages on one rank, no send between) is its own;
// layer-level selective AC tells ranks apart by which of their layers it recomputes.
TEST(SimulatePipelineReuse, RanksWithTheSameStagesShareAKey) {
  auto keys = [](const JobConfig& cfg) {
    const PipelinePlan plan = plan_pipeline(cfg, resolve_model_args(cfg, 0), 8, true);
    std::vector<std::vector<int64_t>> out;
    for (int r = 0; r < 8; ++r) out.push_back(pipeline_rank_key(plan.schedule, plan.stages, cfg, r));
    return out;
  };
  const auto k = keys(deep_config("1F1B"));
  EXPECT_EQ(k[1], k[2]);
  EXPECT_EQ(k[2], k[3]);
  EXPECT_NE(k[3], k[4]);  // 3 layers, 2 layers
  EXPECT_EQ(k[4], k[5]);
  EXPECT_EQ(k[5], k[6]);
  for (int r = 1; r < 8; ++r) EXPECT_NE(k[0], k[r]) << r;
  for (int r = 0; r < 7; ++r) EXPECT_NE(k[7], k[r]) << r;
  const auto v = keys(deep_config("ZBVZeroBubble"));
  EXPECT_EQ(v[4], v[5]);
  EXPECT_NE(v[6], v[7]);  // rank 7 holds stages 7 and 8: a hand-off, no send
  const auto ac = keys(deep_config("1F1B", {"--activation_checkpoint.mode", "selective",
                                            "--activation_checkpoint.selective_every", "2"}));
  EXPECT_NE(ac[1], ac[2]);  // layers 2-4 and 5-7: every second recomputed, in another place
  EXPECT_EQ(ac[1], ac[3]);
}

// The figures of the sped-up path are the full recording's: step time, bubble, busy time and
// memory of every rank (eager and fused walks, to the byte), and every segment's content.
TEST(SimulatePipelineReuse, ReusedRanksMatchRecordingEveryRank) {
  const std::vector<std::string> off = {"--simulation.pipeline_rank_reuse", "false"};
  struct Case {
    std::string schedule;
    std::vector<std::string> extra;
  };
  const std::vector<Case> cases = {
      {"1F1B", {}},
      {"1F1B", {"--parallelism.fsdp_reshard_after_forward", "always"}},  // FSDP resizes in every action
      {"1F1B", {"--comm.collective_mode", "separate", "--activation_checkpoint.mode", "selective",
                "--activation_checkpoint.selective_every", "2"}},
      {"1F1B", {"--activation_checkpoint.mode", "full", "--simulation.execution", "compiled"}},
      {"1F1B", {"--training.local_batch_size", "8", "--simulation.microbatch_extrapolation", "false"}},  // 2 runs
      {"Interleaved1F1B", {}},
      {"ZBVZeroBubble", {}},
      {"InterleavedZeroBubble", {}},
  };
  for (const Case& c : cases) {
    std::string what = c.schedule;
    for (const auto& e : c.extra) what += " " + e;
    SCOPED_TRACE(what);
    const JobConfig fast = deep_config(c.schedule, c.extra), full = deep_config(c.schedule, with(c.extra, off));
    const RecordedStep a = record_step(fast), b = record_step(full);
    ASSERT_TRUE(a.pipeline && b.pipeline);
    const RecordedPipeline &p = *a.pipeline, &f = *b.pipeline;
    // Rank 3 was built from rank 1 (one storage table), where recording it gave its own
    // (its storages seen in its own order). Not under "always", which records every rank.
    auto sizes = [](const std::vector<devices::StorageRecord>& t) {
      std::vector<int64_t> out;
      for (const auto& s : t) out.push_back(s.outlives_step ? -s.bytes : s.bytes);
      return out;
    };
    const bool reused = sizes(p.storages[3]) == sizes(p.storages[1]);
    EXPECT_EQ(reused, what.find("always") == std::string::npos);
    EXPECT_EQ(p.copied_from[3], reused ? 1 : -1);
    for (int from : f.copied_from) EXPECT_EQ(from, -1);
    if (c.schedule == "1F1B") EXPECT_NE(sizes(f.storages[3]), sizes(f.storages[1]));
    ASSERT_EQ(p.ranks.size(), f.ranks.size());
    EXPECT_EQ(p.recorded_microbatches, f.recorded_microbatches);
    EXPECT_EQ(p.program, f.program);
    for (size_t q = 0; q < p.ranks.size(); ++q) {
      SCOPED_TRACE("pipeline rank " + std::to_string(q));
      ASSERT_EQ(p.ranks[q].size(), f.ranks[q].size());
      for (size_t i = 0; i < p.ranks[q].size(); ++i) {
        const PipelineSegment &x = p.ranks[q][i], &y = f.ranks[q][i];
        ASSERT_EQ(x.is_action, y.is_action) << i;
        EXPECT_EQ(x.action, y.action) << i;
        EXPECT_EQ(x.run, y.run) << i;
        EXPECT_EQ(x.p2p_bytes, y.p2p_bytes) << i;
        ASSERT_EQ(x.trace.size(), y.trace.size()) << i << " " << y.action.to_string();
        for (size_t e = 0; e < x.trace.size(); ++e) {
          const auto &u = x.trace.events()[e], &v = y.trace.events()[e];
          ASSERT_EQ(u.type, v.type) << i << " " << e;
          EXPECT_EQ(u.op.name, v.op.name) << i << " " << e;
          EXPECT_EQ(u.op.bytes_written, v.op.bytes_written) << i << " " << e;
          EXPECT_EQ(u.collective.bytes, v.collective.bytes) << i << " " << e;
        }
      }
      EXPECT_EQ(p.storage_resizes[q].size(), f.storage_resizes[q].size());
      EXPECT_EQ(p.local_params[q], f.local_params[q]);
      EXPECT_EQ(p.calls[q].size(), f.calls[q].size());
      for (bool fused : {false, true}) {
        const devices::TraceMemory &m = p.memory[q].of(fused), &n = f.memory[q].of(fused);
        EXPECT_EQ(m.peak_bytes, n.peak_bytes) << fused;
        EXPECT_EQ(m.peak_temporaries, n.peak_temporaries) << fused;
        EXPECT_EQ(m.peak_resized, n.peak_resized) << fused;
        EXPECT_EQ(m.state_bytes, n.state_bytes) << fused;
      }
    }
    // The reuse map travels with a recording (recording_wire.h): the decoded one copies the
    // same segments and encodes to the same bytes.
    const RecordedStep back = decode_step(encode_step(a));
    EXPECT_EQ(back.pipeline->copied_from, p.copied_from);
    EXPECT_EQ(back.pipeline->copied_segment, p.copied_segment);
    EXPECT_EQ(encode_step(back), encode_step(a));
    const SimulationResult r = simulate(fast, false), s = simulate(full, false);
    EXPECT_EQ(r.report.step_time_s, s.report.step_time_s);
    EXPECT_EQ(r.pipeline_bubble_fraction, s.pipeline_bubble_fraction);
    EXPECT_EQ(r.memory.total, s.memory.total);
    EXPECT_EQ(r.pipeline_rank_busy_s, s.pipeline_rank_busy_s);
    EXPECT_EQ(r.pipeline_rank_memory_gib, s.pipeline_rank_memory_gib);
  }
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
