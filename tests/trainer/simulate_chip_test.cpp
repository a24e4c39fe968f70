// Simulated runs with a user chip file (--simulation.chip_file) and the refusal of a layout
// that does not fit in memory (--simulation.allow_oom reports it anyway).
#include <gtest/gtest.h>

#include <fstream>

#include "common/error.h"
#include "trainer/config/config_loader.h"
#include "trainer/simulate/simulate.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

// A narrow Qwen3 (2 layers, dim 512, 4096-token sequences) on 8 simulated chips.
JobConfig small(std::vector<std::string> extra) {
  std::vector<std::string> args = {
      "--config", std::string(TITAN_SOURCE_DIR) + "/configs/qwen3_8b.toml", "--job.dump_folder",
      "/tmp/titan_simulate_chip_test", "--model.n_layers", "2", "--model.dim", "512",
      "--model.ffn_dim", "1536", "--model.n_heads", "8", "--model.n_kv_heads", "4",
      "--model.head_dim", "64", "--model.vocab_size", "8192", "--training.seq_len", "4096",
      "--simulation.num_chips", "8", "--activation_checkpoint.mode", "none"};
  args.insert(args.end(), extra.begin(), extra.end());
  return load_job_config(args);
}

std::string chip_file(const std::string& name, double hbm_gb) {
  const std::string path = "/tmp/titan_simulate_chip_" + name + ".toml";
  std::ofstream(path) << "name = \"" << name << "\"\nbase = \"h100\"\n[memory]\n"
                      << "hbm_bytes = { value = " << hbm_gb << ", unit = \"GB\", source = \"test\" }\n"
                      << "hbm_bytes_per_s = { value = 6.7, unit = \"TB/s\", source = \"test\" }\n";
  return path;
}

TEST(SimulateChip, UserChipFileIsSimulatedWithoutRecompiling) {
  SimulationResult base = simulate(small({"--simulation.device", "h100"}), false);
  SimulationResult fast = simulate(small({"--simulation.device", "fast-h100",
                                          "--simulation.chip_file", chip_file("fast-h100", 80)}),
                                   false);
  EXPECT_EQ(fast.report.device, "fast-h100");
  EXPECT_DOUBLE_EQ(fast.peak_flops, base.peak_flops);
  EXPECT_LT(fast.report.step_time_s, base.report.step_time_s);  // twice the HBM bandwidth
}

TEST(SimulateChip, LayoutThatDoesNotFitIsRefusedUnlessAsked) {
  // 2 GB of HBM cannot hold 2 x 8192 tokens of activations and 8192-word logits (~2 GB).
  const std::vector<std::string> tiny = {"--simulation.device", "tiny-h100",
                                         "--simulation.chip_file", chip_file("tiny-h100", 2),
                                         "--training.seq_len", "8192"};
  try {
    simulate(small(tiny), false);
    ADD_FAILURE() << "expected the layout to be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    const std::string m = e.what();
    EXPECT_NE(m.find("does not fit in memory (8 x tiny-h100, dp_shard 8)"), std::string::npos) << m;
    EXPECT_NE(m.find("largest: activations"), std::string::npos) << m;
  }
  std::vector<std::string> anyway = tiny;
  anyway.insert(anyway.end(), {"--simulation.allow_oom", "true"});
  SimulationResult r = simulate(small(anyway), false);
  EXPECT_FALSE(r.memory.fits);
  EXPECT_GT(r.report.step_time_s, 0.0);
  EXPECT_NE(format_report(r).find("DOES NOT FIT"), std::string::npos);
}

// A framework without flash attention (simulation.flash_attention = false, Megatron-LM 2021)
// writes the S x S scores: the step costs the batched score GEMMs and softmax op by op, holds
// the scores in memory, and takes longer than the same step with one flash kernel.
TEST(SimulateChip, MaterialisedAttentionCostsScoresOpByOp) {
  auto cost_of = [](const SimulationResult& r, const std::string& name) {
    for (const auto& c : r.report.op_costs)
      if (c.category == name) return c.seconds;
    return 0.0;
  };
  const SimulationResult flash = simulate(small({"--simulation.device", "a100"}), false);
  const SimulationResult scores =
      simulate(small({"--simulation.device", "a100", "--simulation.flash_attention", "false"}), false);
  EXPECT_GT(cost_of(flash, "titan::attention"), 0);
  EXPECT_EQ(cost_of(scores, "titan::attention"), 0);
  EXPECT_GT(cost_of(scores, "aten::bmm"), 0);
  EXPECT_GT(scores.report.step_time_s, flash.report.step_time_s);
  EXPECT_GT(scores.memory.activations, flash.memory.activations);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
