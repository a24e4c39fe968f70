// Pipeline-parallel simulation (trainer/simulate/simulate_pipeline.h): every pipeline rank's
// step recorded and replayed in the schedule's order; bubbles and in-flight memory come out
// of the replay, so GPipe, 1F1B, interleaved and zero-bubble schedules differ as measured.
#include <gtest/gtest.h>

#include "trainer/config/config_loader.h"
#include "trainer/config/resolve_model.h"
#include "parallel/pipeline_schedule.h"
#include "tests/error_of.h"
#include "trainer/simulate/simulate.h"
#include "trainer/simulate/simulate_pipeline.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

// A small Qwen3 (8 layers, 2 per stage: the embedding and output not counted as layers) on 16
// simulated chips: pp 4 x dp_shard 4, 8 micro-batches.
JobConfig pp_config(const std::string& schedule, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--config", std::string(TITAN_SOURCE_DIR) + "/configs/qwen3_8b.toml",
                                   "--job.dump_folder", "/tmp/titan_simulate_pipeline_test",
                                   "--model.n_layers", "8", "--model.dim", "1024", "--model.ffn_dim", "3072",
                                   "--model.n_heads", "8", "--model.n_kv_heads", "4", "--model.head_dim", "128",
                                   "--model.vocab_size", "4096", "--training.seq_len", "1024",
                                   "--parallelism.pipeline_parallel_first_stage_less_layers", "0",
                                   "--parallelism.pipeline_parallel_last_stage_less_layers", "0",
                                   "--training.local_batch_size", "8", "--training.global_batch_size", "32",
                                   "--simulation.num_chips", "16", "--simulation.device", "tpu-v5p",
                                   "--activation_checkpoint.mode", "none",
                                   "--parallelism.pipeline_parallel_degree", "4",
                                   "--parallelism.data_parallel_shard_degree", "4",
                                   "--parallelism.pipeline_parallel_schedule", schedule};
  args.insert(args.end(), extra.begin(), extra.end());
  return load_job_config(args);
}

// Every micro-batch recorded (no micro-batch extrapolation): the recording's own structure.
const std::vector<std::string> kRecordAll = {"--simulation.microbatch_extrapolation", "false"};

TEST(SimulatePipeline, EveryStageRecordedWithSendsAndReceives) {
  RecordedStep rec = record_step(pp_config("1F1B", kRecordAll));
  ASSERT_TRUE(rec.pipeline);
  const RecordedPipeline& p = *rec.pipeline;
  ASSERT_EQ(p.ranks.size(), 4u);
  EXPECT_EQ(p.schedule.num_microbatches, 8);
  for (size_t q = 0; q < 4; ++q) {
    int sends = 0, recvs = 0, actions = 0;
    for (const auto& seg : p.ranks[q]) {
      actions += seg.is_action;
      if (seg.is_action && seg.action.p2p()) EXPECT_GT(seg.p2p_bytes, 0) << seg.action.to_string();
    }
    for (const auto& c : p.calls[q]) {
      if (c.type != SimCollectiveEvent::Type::kCall || c.group != "pp") continue;
      sends += c.op == "send";
      recvs += c.op == "recv";
    }
    // Activations forward and gradients back: 8 each way per neighbour.
    const int neighbours = (q == 0 || q == 3) ? 1 : 2;
    EXPECT_EQ(sends, 8 * neighbours) << q;
    EXPECT_EQ(recvs, 8 * neighbours) << q;
    EXPECT_EQ(actions, static_cast<int>(p.schedule.ranks[q].size())) << q;
  }
}

// A stage's FSDP units are gathered once per step by default (TorchTitan's default under PP),
// not once per micro-batch; "always" frees them after each forward and gathers them again.
TEST(SimulatePipeline, StagesAreGatheredOncePerStepByDefault) {
  auto gathers = [](const RecordedStep& rec, size_t q) {
    int n = 0;
    for (const auto& c : rec.pipeline->calls[q]) n += c.type == SimCollectiveEvent::Type::kCall && c.op == "all_gather";
    return n;
  };
  RecordedStep kept = record_step(pp_config("1F1B", kRecordAll));
  RecordedStep freed = record_step(pp_config("1F1B", {"--parallelism.fsdp_reshard_after_forward", "always",
                                                      "--simulation.microbatch_extrapolation", "false"}));
  ASSERT_TRUE(kept.pipeline && freed.pipeline);
  for (size_t q = 0; q < 4; ++q) {
    // Two blocks per stage, plus the embedding on the first and the output on the last.
    EXPECT_EQ(gathers(kept, q), (q == 0 || q == 3) ? 3 : 2) << q;
    EXPECT_GE(gathers(freed, q), 8) << q;  // at least one per micro-batch
  }
}

TEST(SimulatePipeline, BubblesAndMemoryFollowTheSchedule) {
  SimulationResult gpipe = simulate(pp_config("GPipe"), false);
  SimulationResult one = simulate(pp_config("1F1B"), false);
  SimulationResult inter = simulate(pp_config("Interleaved1F1B"), false);
  SimulationResult izb = simulate(pp_config("InterleavedZeroBubble"), false);
  for (const auto* r : {&gpipe, &one, &inter, &izb}) {
    EXPECT_GT(r->report.step_time_s, 0);
    EXPECT_GT(r->pipeline_bubble_fraction, 0);
    EXPECT_LT(r->pipeline_bubble_fraction, 1);
    EXPECT_EQ(r->pipeline_rank_busy_s.size(), 4u);
    EXPECT_EQ(r->pipeline_rank_memory_gib.size(), 4u);
    ASSERT_FALSE(r->report.op_costs.empty());  // the report's by-aten-op costs, first rank
    EXPECT_GT(r->report.op_costs.front().seconds, 0);
  }
  // Same work, same fill and drain: GPipe and 1F1B bubbles agree (the closed form
  // (p-1)/(m+p-1) = 3/11 holds for balanced stages and free transfers, tested on the replay in
  // tests/parallel/pipeline_schedule_test.cpp; here the last stage also runs the output).
  EXPECT_NEAR(gpipe.pipeline_bubble_fraction, one.pipeline_bubble_fraction, 0.02);
  // Two stages per rank shrink the fill and drain. (The zero-bubble split is measured, not
  // asserted: its extra weight-gradient kernels and dispatch can cost more than it fills.)
  EXPECT_LT(inter.pipeline_bubble_fraction, one.pipeline_bubble_fraction);
  EXPECT_GT(izb.report.step_time_s, 0);
  // GPipe keeps all 8 micro-batches' activations on the first rank, 1F1B at most 4.
  EXPECT_GT(gpipe.pipeline_rank_memory_gib[0], one.pipeline_rank_memory_gib[0]);
  EXPECT_GT(one.pipeline_rank_memory_gib[0], one.pipeline_rank_memory_gib[2]);
}

// Tied embeddings under PP: the first and the last pipeline ranks each hold the embedding
// (input lookup / output projection) and sum its gradient shard over "pp_ends" once per step,
// in the recorded step that the replay costs; middle ranks do not take part.
TEST(SimulatePipeline, TiedEmbeddingsSumTheirGradientOverThePipelineEnds) {
  const JobConfig cfg = pp_config("1F1B", {"--model.tie_embeddings", "true"});
  RecordedStep rec = record_step(cfg);
  ASSERT_TRUE(rec.pipeline);
  const RecordedPipeline& p = *rec.pipeline;
  // The fp32 gradient shard: vocab 4096 x dim 1024 over dp_shard 4.
  const int64_t shard_bytes = 4096 * 1024 / 4 * 4;
  for (size_t q = 0; q < 4; ++q) {
    int calls = 0;
    for (const auto& c : p.calls[q]) {
      if (c.type != SimCollectiveEvent::Type::kCall || c.group != "pp_ends") continue;
      ++calls;
      EXPECT_EQ(c.op, "all_reduce");
      EXPECT_EQ(c.group_size, 2);
      EXPECT_EQ(c.bytes, shard_bytes);
    }
    int issued = 0;
    for (const auto& seg : p.ranks[q])
      for (const auto& ev : seg.trace.events())
        issued += ev.type == devices::TraceEvent::Type::kIssue && ev.collective.group == "pp_ends";
    const bool end = q == 0 || q == 3;
    EXPECT_EQ(calls, end ? 1 : 0) << q;
    EXPECT_EQ(issued, end ? 1 : 0) << q;
  }
  // Both ends hold the embedding: the last rank's parameters exceed a middle one's by it.
  EXPECT_EQ(p.local_params[3] - p.local_params[1], (4096 * 1024 + 1024) / 4);
  SimulationResult r = simulate(cfg, false);
  EXPECT_GT(r.report.step_time_s, 0);
  // MFU counts the tied weight once (as the output projection), not once per copy:
  // 6 x (8 layers + final norm + one 4096 x 1024 table) + attention.
  ModelArgs a = resolve_model_args(cfg, 0);
  const double expected = 6.0 * static_cast<double>(8 * a.layer_params() + 1024 + 4096 * 1024) +
                          12.0 * 8 * 8 * 128 * 1024;
  EXPECT_DOUBLE_EQ(r.flops_per_token, expected);
}

TEST(SimulatePipeline, SeparateSendsCostMoreThanFused) {
  JobConfig f = pp_config("1F1B");
  JobConfig s = f;
  s.comm.collective_mode = CollectiveMode::kSeparate;
  EXPECT_LT(simulate(f, false).report.step_time_s, simulate(s, false).report.step_time_s);
}

// Fused mode posts sends and receives (mpi, NCCL): under ZBVZeroBubble, whose V puts a rank's
// two stages at both ends of the pipe, a send queued behind a receive that waits for the other
// end would hold the neighbour back. The same recording composed as an in-order queue (one
// transfer at a time per rank) is slower.
TEST(SimulatePipeline, PostedSendsBeatTheInOrderQueueUnderZeroBubble) {
  const JobConfig cfg = pp_config("ZBVZeroBubble");
  const RecordedStep rec = record_step(cfg);
  const ReplayFigures posted = replay_figures(cfg, rec, simulated_chip(cfg), rec.placement);
  ASSERT_TRUE(posted.pipeline_structure);
  EXPECT_TRUE(posted.options.p2p_posted);
  devices::SimulationOptions queued = posted.options;
  queued.p2p_posted = false;
  const double queued_s = compose_pipeline_step(*posted.pipeline_structure, posted.segment_costs, queued).report.step_time_s;
  EXPECT_GT(queued_s, posted.report.step_time_s * 1.01);
  EXPECT_NEAR(compose_pipeline_step(*posted.pipeline_structure, posted.segment_costs, posted.options).report.step_time_s,
              posted.report.step_time_s, 1e-12);

}

// Blocking sends stall the rank on fabric estimates: the uncertainty report names them in
// separate mode; asynchronous sends hide under compute and are not listed.
TEST(SimulatePipeline, BlockingSendsAreInTheUncertaintyReport) {
  auto comm_uncertain_s = [](const SimulationResult& r) {
    double s = 0;
    for (const auto& c : r.report.uncertain)
      if (c.category.find("exposed") != std::string::npos) s += c.seconds;
    return s;
  };
  JobConfig f = pp_config("1F1B");
  JobConfig s = f;
  s.comm.collective_mode = CollectiveMode::kSeparate;
  const SimulationResult rf = simulate(f, false), rs = simulate(s, false);
  double sends = 0;
  for (const auto& c : rs.report.costs)
    if (c.category == "send/recv pp") sends = c.seconds;
  ASSERT_GT(sends, 0);
  // Separate mode adds every blocking send to what was exposed in fused mode's segments.
  EXPECT_GE(comm_uncertain_s(rs), sends * (1 - 1e-9));
  EXPECT_LT(comm_uncertain_s(rf), comm_uncertain_s(rs));
}

// Micro-batch extrapolation records the fewest micro-batches that pass through every memory
// state of the full schedule and replays all of them on those traces: the same step time,
// bubble, per-rank busy time and memory, and counts as recording every micro-batch.
TEST(SimulatePipeline, MicrobatchExtrapolationMatchesTheFullRecording) {
  struct Case {
    std::string schedule;
    std::vector<std::string> extra;
  };
  const std::vector<std::string> many = {"--training.local_batch_size", "24", "--training.global_batch_size", "96"};
  // The one part of memory that grows with micro-batches: the step's batch of token ids and
  // labels (8 bytes each per token) on the first and last ranks, recorded for fewer of them.
  auto batch_gib = [](const JobConfig& c) { return c.training.global_batch_size / 4 * 1024.0 * 16 / (1 << 30); };
  auto with = [&](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::vector<Case> cases = {
      {"1F1B", many},
      {"1F1B", with(many, {"--comm.collective_mode", "separate"})},
      {"1F1B", {"--training.local_batch_size", "12", "--training.global_batch_size", "96"}},  // 2 runs of 12 a step
      {"Interleaved1F1B", many},
      {"ZBVZeroBubble", many},
      {"InterleavedZeroBubble", many},
  };
  int extrapolated = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.schedule + (c.extra.size() > 4 ? " " + c.extra.back() : ""));
    const JobConfig some = pp_config(c.schedule, c.extra);
    const JobConfig all = pp_config(c.schedule, with(c.extra, kRecordAll));
    const RecordedStep rec = record_step(some);
    ASSERT_TRUE(rec.pipeline);
    const int m = rec.pipeline->schedule.num_microbatches;
    EXPECT_EQ(m, some.training.local_batch_size);
    EXPECT_GE(rec.pipeline->recorded_microbatches, 3);
    extrapolated += rec.pipeline->recorded_microbatches < m;
    std::printf("%s: %d of %d micro-batches recorded\n", c.schedule.c_str(), rec.pipeline->recorded_microbatches, m);
    const SimulationResult a = simulate(some, false), b = simulate(all, false);
    EXPECT_NEAR(a.report.step_time_s, b.report.step_time_s, 1e-9 * b.report.step_time_s);
    EXPECT_NEAR(a.pipeline_bubble_fraction, b.pipeline_bubble_fraction, 1e-9);
    EXPECT_NEAR(a.report.exposed_comm_s, b.report.exposed_comm_s, 1e-9 * b.report.step_time_s);
    EXPECT_NEAR(a.report.compute_s, b.report.compute_s, 1e-9 * b.report.step_time_s);
    EXPECT_EQ(a.report.ops, b.report.ops);
    EXPECT_EQ(a.report.kernels, b.report.kernels);
    EXPECT_EQ(a.report.collectives, b.report.collectives);
    ASSERT_EQ(a.pipeline_rank_busy_s.size(), b.pipeline_rank_busy_s.size());
    for (size_t q = 0; q < a.pipeline_rank_busy_s.size(); ++q) {
      EXPECT_NEAR(a.pipeline_rank_busy_s[q], b.pipeline_rank_busy_s[q], 1e-9 * b.report.step_time_s) << q;
      EXPECT_NEAR(a.pipeline_rank_memory_gib[q], b.pipeline_rank_memory_gib[q], batch_gib(some)) << q;
    }
  }
  EXPECT_GE(extrapolated, 4);  // not every case may find fewer; most must
}

// A config the trainer refuses after planning its pipeline (here tp 3 of 8 heads) is refused
// with the trainer's error for the config itself, whether or not fewer micro-batches would be
// recorded (the schedule is planned without building a trainer).
TEST(SimulatePipeline, RefusedAsTheTrainerRefusesTheConfig) {
  const std::vector<std::string> tp3 = {"--training.local_batch_size", "24", "--training.global_batch_size", "24",
                                        "--parallelism.tensor_parallel_degree", "3",
                                        "--parallelism.data_parallel_shard_degree", "1",
                                        "--simulation.num_chips", "12"};
  auto recording_error = [](const JobConfig& c) { return error_of([&] { (void)record_step(c, /*place=*/false); }); };
  std::vector<std::string> all = tp3;
  all.insert(all.end(), kRecordAll.begin(), kRecordAll.end());
  const std::string some_error = recording_error(pp_config("1F1B", tp3)),
                    all_error = recording_error(pp_config("1F1B", all));
  EXPECT_NE(all_error.find("tensor_parallel"), std::string::npos) << all_error;
  EXPECT_EQ(some_error, all_error);
}

// GPipe holds every micro-batch at its peak: no fewer can stand in for them.
TEST(SimulatePipeline, GPipeIsRecordedWhole) {
  EXPECT_EQ(recorded_microbatch_count(make_pipeline_schedule("GPipe", 4, 4, 12)), 12);
  const int k = recorded_microbatch_count(make_pipeline_schedule("1F1B", 4, 4, 64));
  EXPECT_GE(k, 3);
  EXPECT_LE(k, 12);
}

// A completed send's buffer is released once its stage's backward is done: the step's memory
// does not grow with the micro-batch count (it held every send until the run ended).
TEST(SimulatePipeline, MemoryDoesNotGrowWithMicrobatchesUnder1F1B) {
  const SimulationResult eight = simulate(pp_config("1F1B", kRecordAll), false);
  const SimulationResult sixteen = simulate(
      pp_config("1F1B", {"--training.local_batch_size", "16", "--training.global_batch_size", "64",
                         "--simulation.microbatch_extrapolation", "false"}),
      false);
  ASSERT_EQ(eight.pipeline_rank_memory_gib.size(), 4u);
  // But for the batch itself: 8 more sequences of 1024 token ids (first rank) or labels (last).
  const double batch_gib = 8.0 * 1024 * 8 / (1 << 30);
  for (size_t q = 0; q < 4; ++q) {
    const double grown = sixteen.pipeline_rank_memory_gib[q] - eight.pipeline_rank_memory_gib[q];
    EXPECT_NEAR(grown, q == 0 || q == 3 ? batch_gib : 0.0, 1e-9) << q;
  }
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
