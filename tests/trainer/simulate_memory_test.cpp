// Memory from the recorded step (devices/trace_memory.h) on the trainer's own steps: state is
// what the trainer stores, activations follow the batch and activation checkpointing, FSDP's
// gathered buffers are a unit or two at a time, and the report adds them up.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "devices/compute_cost.h"
#include "tests/trainer/placeholder_cpu_calibration.h"
#include "trainer/components/tensor_memory.h"
#include "trainer/config/config_loader.h"
#include "trainer/config/resolve_model.h"
#include "trainer/simulate/simulate.h"
#include "trainer/step/parallelize.h"
#include "trainer/step/trainer.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

JobConfig memory_config(std::vector<std::string> extra) {
  std::vector<std::string> args = {"--config", std::string(TITAN_SOURCE_DIR) + "/configs/qwen3_8b.toml",
                                   "--job.dump_folder", "/tmp/titan_simulate_memory_test",
                                   "--model.n_layers", "4", "--model.dim", "256", "--model.ffn_dim", "768",
                                   "--model.n_heads", "4", "--model.n_kv_heads", "2", "--model.head_dim", "64",
                                   "--model.vocab_size", "4096", "--training.seq_len", "512",
                                   "--simulation.num_chips", "8", "--simulation.device", "tpu-v5p",
                                   "--training.local_batch_size", "2"};
  args.insert(args.end(), extra.begin(), extra.end());
  return load_job_config(args);
}

TEST(SimulateMemory, StateIsWhatTheTrainerStores) {
  const RecordedStep rec = record_step(memory_config({"--activation_checkpoint.mode", "none"}));
  // Parameters, their gradients and two AdamW states, all in the parameter dtype; anything
  // else the trainer keeps across steps is small.
  const int64_t params = rec.local_params * rec.param_elem_bytes;
  EXPECT_GE(rec.memory.eager().state_bytes, 4 * params);
  EXPECT_LT(rec.memory.eager().state_bytes, 4 * params + (int64_t{1} << 20));
  EXPECT_EQ(rec.memory.fused().state_bytes, rec.memory.eager().state_bytes);
}

TEST(SimulateMemory, Bf16MastersHalveTheState) {
  // training.master_dtype = bfloat16 (MaxText's weight_dtype): shards, gradients and AdamW
  // moments in bf16, 8 bytes a parameter where fp32 masters take 16.
  const RecordedStep fp32 = record_step(memory_config({"--activation_checkpoint.mode", "full"}));
  const RecordedStep bf16 =
      record_step(memory_config({"--activation_checkpoint.mode", "full", "--training.master_dtype", "bfloat16"}));
  EXPECT_EQ(fp32.param_elem_bytes, 4);
  EXPECT_EQ(bf16.param_elem_bytes, 2);
  EXPECT_EQ(bf16.local_params, fp32.local_params);
  const int64_t params = bf16.local_params * 2;
  EXPECT_GE(bf16.memory.eager().state_bytes, 4 * params);
  EXPECT_LT(bf16.memory.eager().state_bytes, 4 * params + (int64_t{1} << 20));
}

TEST(SimulateMemory, ActivationsFollowTheBatchAndCheckpointing) {
  auto peak = [](std::vector<std::string> extra) { return record_step(memory_config(extra)).memory.eager().peak_temporaries; };
  const int64_t none = peak({"--activation_checkpoint.mode", "none"});
  const int64_t none4 = peak({"--activation_checkpoint.mode", "none", "--training.local_batch_size", "4"});
  const int64_t full = peak({"--activation_checkpoint.mode", "full"});
  const int64_t every2 = peak({"--activation_checkpoint.mode", "selective", "--activation_checkpoint.selective_every", "2"});
  // Twice the rows: twice the saved tensors and logits (a few buffers do not scale).
  EXPECT_GT(none4, 1.8 * none);
  EXPECT_LT(none4, 2.05 * none);
  EXPECT_LT(full, every2);
  EXPECT_LT(every2, none);
}

TEST(SimulateMemory, OpLevelCheckpointingKeepsItsSavedOutputsLive) {
  const std::vector<std::string> op_ac = {"--activation_checkpoint.mode", "selective",
                                          "--activation_checkpoint.selective_ac_option", "op"};
  auto peak = [](std::vector<std::string> extra) { return record_step(memory_config(extra)).memory.eager().peak_temporaries; };
  const int64_t none = peak({"--activation_checkpoint.mode", "none"});
  const int64_t full = peak({"--activation_checkpoint.mode", "full"});
  const int64_t op = peak(op_ac);
  // What op-level AC keeps per token and block: the q, v, gate and down-projection products
  // and the attention output, in the compute dtype (the config's mixed-precision parameter
  // dtype), for every token a rank takes and every block, taken from the config the step is
  // recorded with. The walk must see all of it live when backward starts, on top of what
  // full AC keeps.
  const JobConfig cfg = memory_config(op_ac);
  const ModelArgs m = resolve_model_args(cfg, /*tokenizer_vocab=*/0);
  const int64_t q = m.n_heads * m.head_dim, v = m.n_kv_heads * m.head_dim;
  const int64_t per_token = q + v + m.ffn_dim + m.dim + q;
  const int64_t tokens = cfg.training.local_batch_size * cfg.training.seq_len;
  const int64_t elem = static_cast<int64_t>(c10::elementSize(scalar_type(cfg.training.mixed_precision_param)));
  const int64_t kept = per_token * elem * tokens * m.n_layers;
  std::printf("peak temporaries: none %.2f MB, op %.2f MB, full %.2f MB, kept %.2f MB\n", none / 1e6, op / 1e6,
              full / 1e6, kept / 1e6);
  EXPECT_GE(op - full, kept);
  EXPECT_LT(op, none);
}

TEST(SimulateMemory, FsdpBuffersHoldAUnitOrTwoAndTheReportAddsUp) {
  const JobConfig cfg = memory_config({"--activation_checkpoint.mode", "none", "--simulation.execution", "eager"});
  const RecordedStep rec = record_step(cfg);
  const SimulationResult r = replay_step(cfg, rec, rec.chip, rec.placement);
  const devices::TraceMemory& m = rec.memory.eager();
  // The gathered parameters of the current block and the prefetched next one, never the
  // whole model (8 shards of it are stored).
  const int64_t unsharded = rec.local_params * 8 * rec.param_elem_bytes;
  EXPECT_GT(m.peak_resized, 0);
  EXPECT_LT(m.peak_resized, unsharded / 2);
  EXPECT_EQ(r.memory.activations, m.peak_temporaries);
  EXPECT_EQ(r.memory.collective_buffers, m.peak_resized);
  EXPECT_EQ(r.memory.params + r.memory.grads + r.memory.optimizer, m.state_bytes);
  EXPECT_EQ(r.memory.total, m.state_bytes + m.peak_bytes + r.memory.runtime_reserve);
  ASSERT_FALSE(r.memory.peak_by_op.empty());
  EXPECT_EQ(r.memory.peak_by_op.front().first.rfind("aten::", 0), 0u) << r.memory.peak_by_op.front().first;
}

TEST(SimulateMemory, FusedElementwiseTemporariesTakeNoMemory) {
  // The same recording: compiled and defer_and_fuse replays keep a run of element-wise ops in
  // registers (the loss's fp32 upcast and log-softmax temporaries, the norms' squares).
  JobConfig cfg = memory_config({"--activation_checkpoint.mode", "none"});
  const RecordedStep rec = record_step(cfg);
  EXPECT_LT(rec.memory.fused().peak_bytes, rec.memory.eager().peak_bytes);
  EXPECT_GT(rec.memory.fused().peak_bytes, rec.memory.eager().peak_bytes / 2);  // saved tensors stay
  for (Execution mode : {Execution::kEager, Execution::kDeferAndFuse, Execution::kCompiled}) {
    cfg.simulation.execution = mode;
    const SimulationResult r = replay_step(cfg, rec, rec.chip, rec.placement);
    // A compiled step on a chip whose compiler covers it walks under XLA's buffer rules.
    const bool xla = devices::compiles_whole_step(
        rec.chip, mode == Execution::kCompiled ? devices::ExecutionMode::kCompiled : devices::ExecutionMode::kEager);
    EXPECT_EQ(r.memory.activations, rec.memory.of(mode != Execution::kEager, xla).peak_temporaries);
  }
}

// The walk against a real step on this host: the debug model trained by the real trainer (one
// process), its tensor bytes counted by the CPU allocator, and the same config recorded for the
// cpu device; with the fused kernels (their scopes' saved inputs) and with the composite ATen
// path (autograd's own saved tensors).
TEST(SimulateMemory, CpuDevicePredictsTheRealStepsTensorPeak) {
  const std::string dir = "/tmp/titan_simulate_memory_test";
  std::filesystem::create_directories(dir);
  testing::use_placeholder_cpu_calibration(dir + "/cpu_calibration.toml");  // to name the cpu device
  // And under op-level selective AC: what it keeps from the forward, live in both.
  for (const auto& [fused, ac] : std::vector<std::pair<const char*, const char*>>{
           {"true", ""}, {"false", ""}, {"true", "op"}, {"false", "op"}}) {
    const JobConfig cfg = load_job_config({"--config", std::string(TITAN_SOURCE_DIR) + "/configs/debug_model.toml",
                                           "--job.dump_folder", dir, "--training.local_batch_size", "4",
                                           "--training.seq_len", "256", "--simulation.device", "cpu",
                                           "--simulation.num_chips", "1", "--metrics.peak_flops", "1e11",
                                           "--training.fused_kernels", fused, "--activation_checkpoint.mode",
                                           *ac ? "selective" : "none", "--activation_checkpoint.selective_ac_option", ac});
    int64_t held = 0, peak = 0;
    {
      TensorMemoryTracker tensors;
      Trainer trainer(cfg);
      trainer.train_step();  // the first step makes every buffer the later ones reuse
      held = tensors.current();
      tensors.reset_peak();
      trainer.train_step();
      peak = tensors.peak();
    }
    const RecordedStep rec = record_step(cfg);
    const devices::TraceMemory& m = rec.memory.eager();  // the real run is eager
    const int64_t predicted = m.state_bytes + m.peak_bytes;
    std::printf("  debug model B4 x S256, fused kernels %s, AC %s: predicted %.2f MB (state %.2f, step peak %.2f), "
                "measured %.2f MB (held between steps %.2f)\n",
                fused, *ac ? ac : "none", predicted / 1e6, m.state_bytes / 1e6, m.peak_bytes / 1e6, peak / 1e6,
                held / 1e6);
    // What stays between steps is the state, byte for byte (parameters, gradients, AdamW).
    EXPECT_NEAR(static_cast<double>(m.state_bytes) / static_cast<double>(held), 1.0, 0.01) << fused << " " << ac;
    // Within 10% (seen: -1.6% and -5.9% without AC, -5.9% and -7.4% under op-level AC, whose
    // reused ops' inputs are live from the recompute on: the recorder's titan::kept_output
    // touch; without it the fused walk read -13%).
    EXPECT_NEAR(static_cast<double>(predicted) / static_cast<double>(peak), 1.0, 0.10) << fused << " " << ac;
  }
  unsetenv("TITAN_CPU_CALIBRATION");
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
