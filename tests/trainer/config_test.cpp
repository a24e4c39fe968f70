// Config loading: precedence (command line > file > defaults) and the error for each bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <thread>

#include "common/error.h"
#include "trainer/config/config_keys.h"
#include "trainer/config/config_loader.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

std::string config_error(const std::string& toml, const std::vector<std::string>& overrides = {}) {
  JobConfig cfg;
  try {
    apply_toml(cfg, toml, "bad.toml");
    for (size_t i = 0; i + 1 < overrides.size(); i += 2) apply_override(cfg, overrides[i], overrides[i + 1]);
    validate(cfg);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    return e.what();
  }
  return "no error";
}

TEST(Config, DefaultsFileAndCommandLinePrecedence) {
  JobConfig cfg;
  EXPECT_EQ(cfg.training.seq_len, 2048);
  apply_toml(cfg, "[training]\nseq_len = 256\nsteps = 7\n", "t.toml");
  EXPECT_EQ(cfg.training.seq_len, 256);
  apply_override(cfg, "training.seq_len", "64");
  EXPECT_EQ(cfg.training.seq_len, 64);
  EXPECT_EQ(cfg.training.steps, 7);
  apply_override(cfg, "comm.collective_mode", "separate");
  EXPECT_EQ(to_string(cfg.comm.collective_mode), "separate");
  apply_override(cfg, "optimizer.lr", "1e-3");
  EXPECT_DOUBLE_EQ(cfg.optimizer.lr, 1e-3);
  apply_override(cfg, "checkpoint.enable", "true");
  EXPECT_TRUE(cfg.checkpoint.enable);
}

// Overrides share one key table (config_keys.h, KeyTable) and write through an offset into
// the config given: each lands in its own config only, from several threads at once (a study
// applies them on every replay thread), and the table's own config keeps its defaults.
TEST(Config, OverridesWriteOnlyTheirOwnConfig) {
  std::vector<JobConfig> cfgs(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < cfgs.size(); ++i)
    threads.emplace_back([&cfgs, i] {
      for (int rep = 0; rep < 200; ++rep) {
        apply_override(cfgs[i], "training.seq_len", std::to_string(100 + i));
        apply_override(cfgs[i], "comm.collective_mode", i % 2 ? "separate" : "fused");
        apply_override(cfgs[i], "checkpoint.exclude_from_loading", "a" + std::to_string(i) + ",b");
        apply_override(cfgs[i], "training.data.dataset", "text");  // an alias of training.dataset
      }
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < cfgs.size(); ++i) {
    EXPECT_EQ(cfgs[i].training.seq_len, static_cast<int64_t>(100 + i));
    EXPECT_EQ(to_string(cfgs[i].comm.collective_mode), i % 2 ? "separate" : "fused");
    EXPECT_EQ(cfgs[i].checkpoint.exclude_from_loading, (std::vector<std::string>{"a" + std::to_string(i), "b"}));
    EXPECT_EQ(to_string(cfgs[i].training.dataset), "text");
  }
  const JobConfig defaults;
  JobConfig fresh;
  apply_override(fresh, "model.n_layers", "3");
  EXPECT_EQ(fresh.training.seq_len, defaults.training.seq_len);
  EXPECT_EQ(fresh.model.n_layers, 3);
  const JobConfig& table = KeyTable::get().proto();
  EXPECT_EQ(table.training.seq_len, defaults.training.seq_len);
  EXPECT_EQ(table.model.n_layers, defaults.model.n_layers);
  EXPECT_EQ(table.checkpoint.exclude_from_loading, defaults.checkpoint.exclude_from_loading);
  EXPECT_EQ(table.comm.collective_mode, defaults.comm.collective_mode);
}

// A TOML file and the command line find keys in the one KeyTable and write through the same
// offset: each type of key (and a TorchTitan alias and value) gives the same config either
// way, from several threads at once, and the table's own config keeps its defaults.
TEST(Config, TomlAndOverridesGiveTheSameConfig) {
  const std::vector<std::pair<std::string, std::string>> keys = {
      {"training.seq_len", "77"},           {"optimizer.lr", "0.25"},
      {"checkpoint.enable", "true"},        {"job.description", "\"two words\""},
      {"comm.collective_mode", "\"separate\""}, {"checkpoint.exclude_from_loading", "[\"optimizer\", \"dataloader\"]"},
      {"training.batch_size", "3"},         {"training.data.dataset", "\"c4_test\""},
      {"metrics.enable_tensorboard", "true"}};
  std::map<std::string, std::string> sections;  // TOML defines each table once
  for (const auto& [k, v] : keys) {
    const auto dot = k.find('.');
    sections[k.substr(0, dot)] += k.substr(dot + 1) + " = " + v + "\n";
  }
  std::string toml;
  for (const auto& [section, lines] : sections) toml += "[" + section + "]\n" + lines;
  JobConfig by_override;
  for (auto [k, v] : keys) {
    if (v.front() == '"') v = v.substr(1, v.size() - 2);  // the command line's text has no quotes
    apply_override(by_override, k, v);
  }
  std::vector<JobConfig> by_toml(4);
  std::vector<std::thread> threads;
  for (auto& c : by_toml) threads.emplace_back([&c, &toml] { apply_toml(c, toml, "same.toml"); });
  for (auto& t : threads) t.join();
  // The values themselves (both ways share the key lookup and the write, so equal configs
  // alone would not show a key landing in the wrong field).
  EXPECT_EQ(by_override.training.seq_len, 77);
  EXPECT_EQ(by_override.optimizer.lr, 0.25);
  EXPECT_TRUE(by_override.checkpoint.enable);
  EXPECT_EQ(by_override.job.description, "two words");
  EXPECT_EQ(by_override.comm.collective_mode, CollectiveMode::kSeparate);
  EXPECT_EQ(by_override.training.local_batch_size, 3);
  EXPECT_EQ(by_override.checkpoint.exclude_from_loading, (std::vector<std::string>{"optimizer", "dataloader"}));
  auto sorted = [](std::vector<std::string> v) {  // the file lists the keys by section
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_EQ(by_override.ignored_keys.size(), 2u);
  for (const auto& c : by_toml) {
    EXPECT_EQ(config_to_toml(c), config_to_toml(by_override));
    EXPECT_EQ(sorted(c.ignored_keys), sorted(by_override.ignored_keys));
  }
  EXPECT_EQ(config_to_toml(KeyTable::get().proto()), config_to_toml(JobConfig{}));
}

TEST(Config, LoadJobConfigParsesBothOverrideForms) {
  JobConfig cfg = load_job_config({"--config", std::string(TITAN_SOURCE_DIR) + "/configs/debug_model.toml",
                                   "--training.steps=3", "--model.flavor", "debugmodel"});
  EXPECT_EQ(cfg.training.steps, 3);
  EXPECT_EQ(cfg.training.seq_len, 128);
  EXPECT_EQ(cfg.model.tokenizer_path, "byte");
}

// On the command line a list is a,b or, as in a TOML file, ["a", "b"] (which was taken as one
// string '["a", "b"]'); a TOML list of other things is a type error.
TEST(Config, CommandLineListsTakeBothForms) {
  const std::vector<std::string> want = {"optimizer", "dataloader"};
  for (const char* v : {"optimizer,dataloader", "[\"optimizer\", \"dataloader\"]", "[ 'optimizer','dataloader' ]"}) {
    JobConfig cfg;
    apply_override(cfg, "checkpoint.exclude_from_loading", v);
    EXPECT_EQ(cfg.checkpoint.exclude_from_loading, want) << v;
  }
  EXPECT_NE(config_error("", {"checkpoint.exclude_from_loading", "[1, 2]"})
                .find("invalid value [ 1, 2 ] for 'checkpoint.exclude_from_loading': expected a list of strings"),
            std::string::npos);
  EXPECT_NE(config_error("", {"checkpoint.exclude_from_loading", "[\"optimizer\""}).find("invalid value '[\"optimizer\"'"),
            std::string::npos);
}

TEST(Config, IntegerAcceptedForFloatKey) {
  JobConfig cfg;
  apply_toml(cfg, "[optimizer]\nlr = 1\n", "t.toml");
  EXPECT_DOUBLE_EQ(cfg.optimizer.lr, 1.0);
}

TEST(Config, RoundTripsThroughToml) {
  JobConfig cfg;
  apply_override(cfg, "training.seq_len", "77");
  apply_override(cfg, "checkpoint.exclude_from_loading", "optimizer,dataloader");
  JobConfig back;
  apply_toml(back, config_to_toml(cfg), "saved.toml");
  EXPECT_EQ(back.training.seq_len, 77);
  EXPECT_EQ(back.checkpoint.exclude_from_loading.size(), 2u);
  EXPECT_EQ(config_to_toml(back), config_to_toml(cfg));
}

TEST(Config, HelpListsEveryKeyWithDefault) {
  std::string help = config_help();
  EXPECT_NE(help.find("--training.seq_len = 2048"), std::string::npos);
  EXPECT_NE(help.find("--comm.collective_mode = \"fused\""), std::string::npos);
  EXPECT_NE(help.find("--simulation.num_chips = 8192"), std::string::npos);
}

TEST(Config, HelpShowsRangesAndChoices) {
  std::string help = config_help();
  EXPECT_EQ(help.find("in [0, 0]"), std::string::npos) << "a non-number printed a range";
  EXPECT_NE(help.find("--comm.collective_mode = \"fused\"   (one of fused | separate)"), std::string::npos);
  EXPECT_NE(help.find("--training.seq_len = 2048   (an integer >= 1)"), std::string::npos);
  EXPECT_NE(help.find("--optimizer.beta1 = 0.90000000000000002   (a number in [0, 0.999999])"), std::string::npos);
  EXPECT_NE(help.find("--checkpoint.enable = false   (a boolean (true or false))"), std::string::npos);
}

TEST(Config, ChoicesLoadAsEnums) {
  JobConfig cfg;
  apply_toml(cfg, "[simulation]\nexecution = \"compiled\"\n[training]\nmixed_precision_param = \"bfloat16\"\n", "t.toml");
  EXPECT_EQ(cfg.simulation.execution, Execution::kCompiled);
  EXPECT_EQ(cfg.training.mixed_precision_param, Dtype::kBFloat16);
  apply_override(cfg, "parallelism.fsdp_reshard_after_forward", "never");
  EXPECT_EQ(cfg.parallelism.fsdp_reshard_after_forward, ReshardPolicy::kNever);
  EXPECT_EQ(cfg.model.mlp_activation, MlpActivation::kSwiglu);  // the default
  apply_override(cfg, "model.mlp_activation", "gelu");
  EXPECT_EQ(cfg.model.mlp_activation, MlpActivation::kGelu);
  apply_toml(cfg, "[model]\nmlp_activation = \"relu\"\n", "t.toml");
  EXPECT_EQ(cfg.model.mlp_activation, MlpActivation::kRelu);
}

TEST(Config, DatasetKeyDecidesWhatIsRead) {
  EXPECT_NE(config_error("[training]\ndataset = \"text\"\n", {}).find("needs training.dataset_path"), std::string::npos);
  EXPECT_NE(config_error("[training]\ndataset_path = \"/tmp/x.txt\"\n", {}).find("reads the shipped corpus"),
            std::string::npos);
  EXPECT_EQ(config_error("[training]\ndataset = \"text\"\ndataset_path = \"/tmp/x.txt\"\n", {}), "no error");
}

struct BadInput {
  std::string toml;
  std::vector<std::string> overrides;
  std::string expected;
};

TEST(Config, BadInputsNameWhatIsWrong) {
  const std::vector<BadInput> cases = {
      {"[training]\nsq_len = 5\n", {}, "bad.toml:2: unknown key 'training.sq_len'; did you mean 'training.seq_len'?"},
      {"[trainig]\nseq_len = 5\n", {}, "bad.toml:1: unknown section [trainig]; did you mean [training]?"},
      {"[training]\nseq_len = \"long\"\n", {}, "bad.toml:2: invalid value \"long\" for 'training.seq_len': expected an integer >= 1"},
      {"[training]\nseq_len = 0\n", {}, "invalid value 0 for 'training.seq_len': expected an integer >= 1"},
      {"[optimizer]\nlr = -1.0\n", {}, "invalid value -1.0 for 'optimizer.lr': expected a number >= 0"},
      {"[comm]\ncollective_mode = \"fast\"\n", {}, "invalid value \"fast\" for 'comm.collective_mode': expected one of fused, separate"},
      {"[checkpoint]\nenable = \"yes\"\n", {}, "invalid value \"yes\" for 'checkpoint.enable': expected a boolean (true or false)"},
      {"[training\nseq_len = 5\n", {}, "bad.toml:1: TOML syntax error"},
      {"seq_len = 5\n", {}, "bad.toml:1: 'seq_len' is outside any [section]"},
      {"", {"training.steps", "ten"}, "command line --training.steps: invalid value 'ten' for 'training.steps': expected an integer >= 0"},
      {"", {"training.stepz", "10"}, "command line --training.stepz: unknown key 'training.stepz'; did you mean 'training.steps'?"},
      {"", {"steps", "10"}, "expected --section.key, got --steps"},
      {"[training]\nlocal_batch_size = 3\nglobal_batch_size = 8\n", {}, "training.global_batch_size (8) must be a multiple of training.local_batch_size (3)"},
      {"[lr_scheduler]\ndecay_type = \"exp\"\n", {}, "expected one of linear, sqrt, cosine"},
      {"[activation_checkpoint]\nmode = \"some\"\n", {}, "expected one of none, selective, full"},
      {"", {"model.mlp_activation", "silu"},
       "command line --model.mlp_activation: invalid value \"silu\" for 'model.mlp_activation': expected one of swiglu, gelu, relu"},
      {"[parallelism]\ndata_parallel_shard_degree = 0\n", {}, "data_parallel_shard_degree must be -1 or >= 1, got 0"},
      {"[optimizer]\nbeta1 = 1.5\n", {}, "invalid value 1.5 for 'optimizer.beta1': expected a number in [0, 0.999999]"},
      // A table where a key takes a value: its type, not "unknown key '...exclude_from_loading.a'".
      {"[checkpoint]\nexclude_from_loading = { a = 1 }\n", {},
       "bad.toml:2: invalid value { a = 1 } for 'checkpoint.exclude_from_loading': expected a list of strings"},
      {"[training.steps]\nx = 1\n", {}, "bad.toml:1: invalid value x = 1 for 'training.steps': expected an integer >= 0"},
  };
  for (const auto& c : cases) {
    std::string msg = config_error(c.toml, c.overrides);
    EXPECT_NE(msg.find(c.expected), std::string::npos) << "input:\n" << c.toml << "\ngot: " << msg
                                                     << "\nexpected to contain: " << c.expected;
  }
}

TEST(Config, ConfigMustBeAnExistingRegularFile) {
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{}, "--config FILE is required"},
      {{"--training.steps", "3"}, "--config FILE is required"},
      {{"--config", "/tmp"}, "config file /tmp: cannot be read (not a regular file)"},
      {{"--config", "/nonexistent/y.toml"}, "config file /nonexistent/y.toml: cannot be read (no such file)"},
  };
  for (const auto& c : cases) {
    try {
      load_job_config(c.args);
      ADD_FAILURE() << "no error for " << c.expected;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what();
    }
  }
}

TEST(Config, MissingFileIsNamed) {
  try {
    load_job_config({"--config", "/nonexistent/x.toml"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config file /nonexistent/x.toml: cannot be read"), std::string::npos);
  }
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
