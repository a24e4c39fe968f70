#include "trainer/config/config_loader.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/error.h"
#include "common/launcher_rank.h"
#include "common/remat_policy.h"
#include "trainer/config/torchtitan_keys.h"

namespace titan {

int64_t ActivationCheckpointSection::every() const {
  const std::string& o = selective_ac_option;
  if (o.empty() || o == "op") return selective_every;
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(o, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TITAN_CONFIG_CHECK(used == o.size() && n >= 1, "activation_checkpoint.selective_ac_option = \"", o,
                     "\": expected \"op\" (op-level selective AC) or a positive integer N (every Nth block)");
  return n;
}

void validate(const JobConfig& c) {
  c.activation_checkpoint.every();  // refuses a selective_ac_option that is neither "op" nor N
  if (c.activation_checkpoint.mode == AcMode::kPolicy)  // refuses unknown policies and names
    remat_policy(c.activation_checkpoint.policy, c.activation_checkpoint.save_on_device,
                 c.activation_checkpoint.offload_to_host);
  const auto& t = c.training;
  TITAN_CONFIG_CHECK(t.global_batch_size != 0,
                     "training.global_batch_size must be -1 (local x data-parallel degree) or >= 1, got 0");
  if (t.global_batch_size > 0) {
    TITAN_CONFIG_CHECK(t.global_batch_size % t.local_batch_size == 0,
                       "training.global_batch_size (", t.global_batch_size,
                       ") must be a multiple of training.local_batch_size (", t.local_batch_size,
                       ")");
  }
  TITAN_CONFIG_CHECK(c.parallelism.data_parallel_shard_degree != 0,
                     "parallelism.data_parallel_shard_degree must be -1 or >= 1, got 0");
  // 0 ran as -1 (one stage per rank) without a word.
  TITAN_CONFIG_CHECK(c.parallelism.pipeline_parallel_layers_per_stage != 0,
                     "parallelism.pipeline_parallel_layers_per_stage must be -1 (one stage per rank) or >= 1, got 0");
  // Resuming reads checkpoint.folder only with checkpoints on: else a fresh run would start
  // where a resume of that step was asked for.
  TITAN_CONFIG_CHECK(c.checkpoint.load_step < 0 || c.checkpoint.enable, "checkpoint.load_step = ",
                     c.checkpoint.load_step, " needs checkpoint.enable = true (without it nothing is loaded)");
  // As with dataset_path below: a file that would be ignored (not even read) is refused.
  TITAN_CONFIG_CHECK(c.parallelism.pipeline_parallel_schedule_csv.empty() ||
                         c.parallelism.pipeline_parallel_degree > 1,
                     "parallelism.pipeline_parallel_schedule_csv is set (", c.parallelism.pipeline_parallel_schedule_csv,
                     ") but parallelism.pipeline_parallel_degree is 1: the schedule would be ignored");
  TITAN_CONFIG_CHECK(c.optimizer.beta1 < 1 && c.optimizer.beta2 < 1, "optimizer betas must be < 1");
  // The dataset key chooses where text comes from; a path that would be ignored is refused.
  if (t.dataset == DatasetKind::kText) {
    TITAN_CONFIG_CHECK(!t.dataset_path.empty(),
                       "training.dataset = \"text\" needs training.dataset_path (a text file)");
  } else {
    TITAN_CONFIG_CHECK(t.dataset_path.empty(), "training.dataset_path is set (", t.dataset_path,
                       ") but training.dataset = \"corpus\" reads the shipped corpus; set "
                       "training.dataset = \"text\" to train on that file");
  }
}

JobConfig load_job_config(const std::vector<std::string>& args) {
  JobConfig cfg;
  std::vector<std::pair<std::string, std::string>> overrides;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    TITAN_CONFIG_CHECK(a.rfind("--", 0) == 0, "command line: unexpected argument '", a,
                       "' (options are --config FILE and --section.key VALUE)");
    std::string name = a.substr(2), value;
    auto eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else {
      TITAN_CONFIG_CHECK(i + 1 < args.size(), "command line: --", name, " needs a value");
      value = args[++i];
    }
    if (name == "config" || name == "job.config_file") {
      cfg.source_file = value;
    } else {
      overrides.emplace_back(name, value);
    }
  }
  // Without a file the built-in defaults would train a 10,000-step job nobody asked for.
  TITAN_CONFIG_CHECK(!cfg.source_file.empty(),
                     "command line: --config FILE is required (see --help for every key)");
  std::error_code ec;
  TITAN_CONFIG_CHECK(std::filesystem::exists(cfg.source_file, ec), "config file ",
                     cfg.source_file, ": cannot be read (no such file)");
  TITAN_CONFIG_CHECK(std::filesystem::is_regular_file(cfg.source_file, ec), "config file ",
                     cfg.source_file, ": cannot be read (not a regular file)");
  std::ifstream in(cfg.source_file);
  TITAN_CONFIG_CHECK(in.good(), "config file ", cfg.source_file, ": cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  apply_toml(cfg, ss.str(), cfg.source_file);
  for (auto& [k, v] : overrides) apply_override(cfg, k, v);
  if (!cfg.ignored_keys.empty() && launcher_first_rank()) {
    std::string list;
    for (const auto& k : cfg.ignored_keys) list += (list.empty() ? "" : ", ") + k;
    std::cerr << "titan-train: warning: TorchTitan settings titan does not implement were ignored: "
              << list << std::endl;
  }
  // Measured: 4 concurrent 2-thread runs of the debug model differ in the last bits of some
  // steps' losses (the work split of multi-threaded ATen/OpenBLAS ops varies under load);
  // one intra-op thread gives identical losses. An explicit training.threads is kept.
  if (cfg.training.deterministic && cfg.training.threads == 0) {
    cfg.training.threads = 1;
    if (launcher_first_rank())
      std::cerr << "titan-train: deterministic: 1 intra-op thread per rank (set training.threads to trade "
                   "bit-identical losses for speed)" << std::endl;
  }
  validate(cfg);
  return cfg;
}

}  // namespace titan
