// Sizes that cannot fit are refused before anything is allocated, with the key and the
// estimated bytes: no OOM kill, no libtorch trace, no simulator that grows without output.
#include <gtest/gtest.h>

#include <cstdio>

#include "common/error.h"
#include "tests/error_of.h"
#include "trainer/config/config_loader.h"
#include "trainer/step/memory_limits.h"
#include "trainer/step/parallelize.h"
#include "trainer/components/tensor_memory.h"
#include "trainer/config/resolve_model.h"
#include "trainer/step/trainer.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

JobConfig debug_config(std::vector<std::string> extra) {
  std::vector<std::string> args = {"--config", std::string(TITAN_SOURCE_DIR) + "/configs/debug_model.toml",
                                   "--job.dump_folder", "/tmp/titan_memory_limits_test"};
  args.insert(args.end(), extra.begin(), extra.end());
  return load_job_config(args);
}

std::string error_of(const std::function<void()>& f) { return titan::error_of(f, ErrorKind::kConfig); }

ParallelDims dims_of(const JobConfig& cfg, int64_t world) { return parallel_dims(cfg, world); }

// Llama 3 8B's shape with 8 sequences of 1024: sizes only, nothing is allocated.
JobConfig llama_8b(std::vector<std::string> extra) {
  std::vector<std::string> args = {"--model.name", "llama3", "--model.flavor", "8B", "--training.local_batch_size",
                                   "8", "--training.seq_len", "1024"};
  args.insert(args.end(), extra.begin(), extra.end());
  return debug_config(args);
}

MemoryEstimate estimate(const JobConfig& cfg, int64_t world, int pp_rank = 0) {
  return estimate_rank_memory(cfg, dims_of(cfg, world), resolve_model_args(cfg, 257), pp_rank);
}

TEST(MemoryLimits, HugeSizesAreConfigErrorsWithTheEstimate) {
  ASSERT_GT(machine_memory_bytes(), 1e8) << "/proc/meminfo unreadable";
  struct Case {
    std::vector<std::string> overrides;
    std::string key;
  };
  const std::vector<Case> cases = {
      {{"--training.seq_len", "100000000"}, "training.seq_len (100000000)"},
      {{"--training.local_batch_size", "1000000000"}, "training.local_batch_size (1000000000)"},
      {{"--training.local_batch_size", "1000000000", "--training.seq_len", "100000000"}, "training.seq_len"},
  };
  for (const auto& c : cases) {
    const JobConfig cfg = debug_config(c.overrides);
    const std::string msg = error_of([&] {
      check_fits_in_memory(cfg, dims_of(cfg, 1), resolve_model_args(cfg, 257), 0, 1, machine_memory_bytes());
    });
    EXPECT_NE(msg.find(c.key), std::string::npos) << msg;
    EXPECT_NE(msg.find(" bytes ("), std::string::npos) << msg;
    EXPECT_NE(msg.find("/proc/meminfo"), std::string::npos) << msg;
  }
  // Under PP the schedule is built to size a rank: a micro-batch count it cannot hold is refused first.
  const std::string pp_msg = error_of([] {
    estimate(llama_8b({"--parallelism.pipeline_parallel_degree", "2", "--training.local_batch_size", "1000000000"}),
             2, 0);
  });
  EXPECT_NE(pp_msg.find("training.local_batch_size (1000000000) / parallelism.pipeline_parallel_microbatch_size (1) "
                        "gives 1000000000 micro-batches per schedule run; at most 65536"),
            std::string::npos)
      << pp_msg;
  // The shipped debug config fits with room to spare.
  const JobConfig ok = debug_config({});
  EXPECT_LT(estimate(ok, 1).total(), 1e9);
}

TEST(MemoryLimits, PipelineRanksHoldTheirStageAndTheMicrobatchesTheScheduleKeepsInFlight) {
  const std::vector<std::string> pp4 = {"--parallelism.pipeline_parallel_degree", "4",
                                        "--parallelism.pipeline_parallel_microbatch_size", "1"};
  const MemoryEstimate whole = estimate(llama_8b({}), 1);
  // The stages partition the parameters: the ranks' shares add up to the whole model's.
  double shares = 0;
  for (int r = 0; r < 4; ++r) shares += estimate(llama_8b(pp4), 4, r).weights;
  EXPECT_NEAR(shares / whole.weights, 1.0, 1e-12);
  // Every rank still builds the whole model before it frees the other stages.
  EXPECT_DOUBLE_EQ(estimate(llama_8b(pp4), 4, 2).init, whole.init);
  // 8 micro-batches of 1 over 4 ranks: 1F1B's first rank holds 4 at once, its last one 1,
  // GPipe's first all 8; the 34 effective layers split 9 (8 + embedding), 9, 8, 8 (7 + output).
  std::vector<std::string> gpipe = pp4;
  gpipe.insert(gpipe.end(), {"--parallelism.pipeline_parallel_schedule", "GPipe"});
  const MemoryEstimate first = estimate(llama_8b(pp4), 4, 0), last = estimate(llama_8b(pp4), 4, 3);
  EXPECT_NEAR(first.activations / last.activations, 4.0 * 8.0 / 7.0, 1e-12);
  EXPECT_NEAR(estimate(llama_8b(gpipe), 4, 0).activations / first.activations, 2.0, 1e-12);
  // One micro-batch of the 8 over the whole model against 4 micro-batches over 8 of its 32 layers.
  EXPECT_NEAR(first.activations / whole.activations, 4.0 / 8.0 * 8.0 / 32.0, 1e-12);
  EXPECT_EQ(first.logits, 0.0);  // the output lives on the last stage
  EXPECT_NEAR(last.logits / whole.logits, 1.0 / 8.0, 1e-12);
}

TEST(MemoryLimits, FsdpUnderPipelineHoldsTheGatheredStageAndItsGradientSums) {
  const std::vector<std::string> fsdp2_pp2 = {"--parallelism.pipeline_parallel_degree", "2",
                                              "--parallelism.data_parallel_shard_degree", "2"};
  const MemoryEstimate kept = estimate(llama_8b(fsdp2_pp2), 4, 1);
  const MemoryEstimate pp_only = estimate(llama_8b({"--parallelism.pipeline_parallel_degree", "2"}), 2, 1);
  EXPECT_NEAR(kept.weights / pp_only.weights, 0.5, 1e-12);  // dp_shard 2 halves the shards
  // fp32 parameters gathered and fp32 gradient sums, each the size of the stage: 16 bytes per
  // 4 stored in the four fp32 tensors of the weights' estimate at dp_shard 1.
  EXPECT_NEAR(kept.gathered / pp_only.weights, 0.5, 1e-12);
  std::vector<std::string> always = fsdp2_pp2;
  always.insert(always.end(), {"--parallelism.fsdp_reshard_after_forward", "always"});
  EXPECT_NEAR(estimate(llama_8b(always), 4, 1).gathered / kept.gathered, 0.5, 1e-12);
  EXPECT_EQ(estimate(llama_8b({"--parallelism.data_parallel_shard_degree", "2"}), 2).gathered, 0.0);
  // dp_shard -1 takes what the other degrees leave: 4 ranks shard over 4.
  EXPECT_NEAR(estimate(llama_8b({}), 4).weights / estimate(llama_8b({}), 1).weights, 0.25, 1e-12);
}

// The policy FSDP runs and the estimate sizes is one: "default" keeps units gathered under PP
// (TorchTitan's default there) and reshards blocks after forward without it.
TEST(MemoryLimits, ReshardPolicyUnderPipelineIsTheOneFsdpApplies) {
  using R = FsdpOptions::Reshard;
  const JobConfig def = debug_config({});
  EXPECT_EQ(fsdp_reshard_policy(def, false), R::kDefault);
  EXPECT_EQ(fsdp_reshard_policy(def, true), R::kNever);
  for (const auto& [name, want] : {std::pair{"always", R::kAlways}, std::pair{"never", R::kNever}}) {
    const JobConfig c = debug_config({"--parallelism.fsdp_reshard_after_forward", name});
    EXPECT_EQ(fsdp_reshard_policy(c, false), want) << name;
    EXPECT_EQ(fsdp_reshard_policy(c, true), want) << name;
  }
}

TEST(MemoryLimits, RecomputedLayersKeepOnlyTheirInput) {
  const MemoryEstimate none = estimate(llama_8b({}), 1);
  const MemoryEstimate full = estimate(llama_8b({"--activation_checkpoint.mode", "full"}), 1);
  const MemoryEstimate half = estimate(llama_8b({"--activation_checkpoint.mode", "selective",
                                                 "--activation_checkpoint.selective_ac_option", "2"}), 1);
  // Llama 3 8B per token: a kept layer 2 x 4096 + 2 x 4096 + 2 x 1024 + 3 x 14336 elements, a
  // recomputed one its 4096-wide input; one layer's full set exists again during its recompute.
  const double kept = 2 * 4096 + 2 * 4096 + 2 * 1024 + 3 * 14336, input = 4096;
  EXPECT_NEAR(full.activations / none.activations, (32 * input + kept) / (32 * kept), 1e-12);
  EXPECT_NEAR(half.activations / none.activations, (16 * input + 17 * kept) / (32 * kept), 1e-12);
}

TEST(MemoryLimits, RanksOnOneHostShareItsMemory) {
  const JobConfig cfg = llama_8b({"--parallelism.pipeline_parallel_degree", "2"});
  const ParallelDims dims = dims_of(cfg, 2);
  const ModelArgs args = resolve_model_args(cfg, 257);
  const double one = estimate_rank_memory(cfg, dims, args, 0).total();
  EXPECT_NO_THROW(check_fits_in_memory(cfg, dims, args, 0, 1, one * 1.01));
  const std::string msg = error_of([&] { check_fits_in_memory(cfg, dims, args, 0, 2, one * 1.01); });
  EXPECT_NE(msg.find("pipeline rank 0 needs at least"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the 1 other ranks on this host"), std::string::npos) << msg;
  EXPECT_NO_THROW(check_fits_in_memory(cfg, dims, args, 0, 2, one * 2.01));
}

// A lower bound of what a real step holds: the debug model trained here, its tensor bytes
// counted by the CPU allocator from before the Trainer is built to the end of its second step.
TEST(MemoryLimits, EstimateStaysBelowWhatARealRunHolds) {
  for (const char* ac : {"none", "full", "selective"}) {
    const JobConfig cfg = debug_config({"--training.local_batch_size", "4", "--training.seq_len", "256",
                                        "--activation_checkpoint.mode", ac});
    int64_t peak = 0;
    {
      TensorMemoryTracker tensors;
      Trainer trainer(cfg);
      trainer.train_step();
      trainer.train_step();
      peak = tensors.peak();
    }
    const MemoryEstimate e = estimate(cfg, 1);
    std::printf("  debug model B4 x S256, AC %s: estimate %.2f MB (activations %.2f, logits %.2f, weights %.2f), "
                "measured peak %.2f MB\n",
                ac, e.total() / 1e6, e.activations / 1e6, e.logits / 1e6, e.weights / 1e6, peak / 1e6);
    EXPECT_LE(e.total(), static_cast<double>(peak)) << ac;
  }
}

TEST(MemoryLimits, TrainerRefusesBeforeAllocating) {
  const std::string msg = error_of([] { Trainer t(debug_config({"--training.local_batch_size", "1000000000"})); });
  EXPECT_NE(msg.find("training.local_batch_size (1000000000)"), std::string::npos) << msg;
}

TEST(MemoryLimits, SimulatedChipsAreBounded) {
  const std::string msg = error_of([] { debug_config({"--simulation.num_chips", "1000000000"}); });
  EXPECT_NE(msg.find("invalid value '1000000000' for 'simulation.num_chips': expected an integer in [1, 1048576]"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
