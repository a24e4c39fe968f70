// TorchTitan's train_configs (current and 2024 spellings) load unchanged: implemented keys are
// honoured through their aliases, unimplemented ones give one warning line, unknown keys fail.
#include <gtest/gtest.h>

#include "common/error.h"
#include "trainer/config/config_loader.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

std::string data_file(const std::string& name) {
  return std::string(TITAN_SOURCE_DIR) + "/tests/trainer/data/" + name;
}

// Loads the file and returns the config with everything printed to stderr.
JobConfig load_capturing(const std::string& file, std::string* err, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--config", data_file(file)};
  args.insert(args.end(), extra.begin(), extra.end());
  testing::internal::CaptureStderr();
  JobConfig cfg = load_job_config(args);
  *err = testing::internal::GetCapturedStderr();
  return cfg;
}

size_t count_lines_with(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(TorchTitanConfig, Llama3LoadsWithOneWarning) {
  std::string err;
  JobConfig cfg = load_capturing("torchtitan_llama3_8b.toml", &err);
  EXPECT_EQ(count_lines_with(err, "warning"), 1u) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_EQ(err.find("profiling"), std::string::npos) << "[profiling] is implemented: " << err;
  EXPECT_TRUE(cfg.profiling.enable_profiling);
  EXPECT_EQ(cfg.profiling.save_traces_folder, "profile_trace");
  EXPECT_EQ(cfg.profiling.profile_freq, 100);
  for (const char* k : {"metrics.enable_tensorboard", "metrics.save_tb_folder",
                        "model.hf_assets_path", "compile.enable",
                        "quantize.linear.float8.filter_fqns", "validation.freq", "training.dataset = \"c4\""}) {
    EXPECT_NE(err.find(k), std::string::npos) << k << " missing from: " << err;
  }
  EXPECT_EQ(cfg.model.name, ModelFamily::kLlama3);
  EXPECT_EQ(cfg.model.flavor, "8B");
  EXPECT_DOUBLE_EQ(cfg.optimizer.lr, 3e-4);
  EXPECT_EQ(cfg.lr_scheduler.warmup_steps, 200);
  EXPECT_EQ(cfg.training.local_batch_size, 1);
  EXPECT_EQ(cfg.training.seq_len, 8192);
  EXPECT_EQ(cfg.training.steps, 1000);
  EXPECT_EQ(cfg.training.dataset, DatasetKind::kCorpus);
  EXPECT_EQ(cfg.activation_checkpoint.mode, AcMode::kSelective);
  // selective_ac_option = "op" is implemented (op-level selective AC), not ignored.
  EXPECT_EQ(err.find("selective_ac_option"), std::string::npos) << err;
  EXPECT_TRUE(cfg.activation_checkpoint.op_level());
  EXPECT_EQ(cfg.metrics.log_freq, 10);
}

TEST(TorchTitanConfig, OlderSpellingsAreAliases) {
  std::string err;
  JobConfig cfg = load_capturing("torchtitan_llama3_8b_2024.toml", &err);
  EXPECT_EQ(count_lines_with(err, "warning"), 1u) << err;
  EXPECT_EQ(cfg.training.local_batch_size, 2);           // training.batch_size
  EXPECT_EQ(cfg.lr_scheduler.warmup_steps, 200);         // training.warmup_steps
  EXPECT_EQ(cfg.parallelism.tensor_parallel_degree, 2);  // training.tensor_parallel_degree
  EXPECT_TRUE(cfg.checkpoint.enable);                    // checkpoint.enable_checkpoint
  EXPECT_FALSE(cfg.checkpoint.last_save_model_only);     // checkpoint.model_weights_only
  for (const char* k : {"float8.enable_float8_linear", "training.compile", "model.norm_type",
                        "checkpoint.interval_type"}) {
    EXPECT_NE(err.find(k), std::string::npos) << k << " missing from: " << err;
  }
  // Async TP is titan's (simulated) key now: read, not listed as unimplemented.
  EXPECT_EQ(err.find("enable_async_tensor_parallel"), std::string::npos) << err;
  EXPECT_FALSE(cfg.parallelism.enable_async_tensor_parallel);
}

TEST(TorchTitanConfig, Qwen3LoadsAndHonoursDebugSection) {
  std::string err;
  JobConfig cfg = load_capturing("torchtitan_qwen3_0.6b.toml", &err, {"--training.batch_size", "3"});
  EXPECT_EQ(count_lines_with(err, "warning"), 1u) << err;
  EXPECT_EQ(cfg.model.name, ModelFamily::kQwen3);
  EXPECT_EQ(cfg.model.flavor, "0.6B");
  EXPECT_EQ(cfg.training.local_batch_size, 3);  // the alias works on the command line too
  EXPECT_EQ(cfg.training.seq_len, 4096);
  EXPECT_EQ(cfg.checkpoint.export_dtype, Dtype::kFloat16);
  EXPECT_FALSE(cfg.checkpoint.last_save_model_only);
  EXPECT_EQ(cfg.training.seed, 42);  // [debug] seed
  EXPECT_TRUE(cfg.training.deterministic);
}

TEST(TorchTitanConfig, UnknownKeysStayErrors) {
  struct Case {
    std::string toml, expected;
  };
  const std::vector<Case> cases = {
      {"[training]\nbatch_sise = 2\n", "unknown key 'training.batch_sise'; did you mean"},
      {"[training.data]\ndatset = \"c4\"\n", "unknown key 'training.datset'; did you mean 'training.dataset'?"},
      {"[metrics]\nenable_tensorbord = true\n", "unknown key 'metrics.enable_tensorbord'"},
      {"[profilng]\nenable_profiling = true\n", "unknown section [profilng]"},
  };
  for (const auto& c : cases) {
    JobConfig cfg;
    try {
      apply_toml(cfg, c.toml, "t.toml");
      ADD_FAILURE() << "no error for " << c.toml;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what();
    }
  }
  JobConfig cfg;
  apply_toml(cfg, "[training.data]\ndataset = \"c4_test\"\n", "t.toml");
  EXPECT_EQ(cfg.training.dataset, DatasetKind::kCorpus);
  EXPECT_EQ(cfg.ignored_keys.size(), 1u);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
