// The one-process job the checkpoint tests save and load: the debug model, 32-token
// sequences, checkpointing on into <dir>/ckpt (extra flags appended), and a fresh temporary
// folder per test. Shared by checkpoint_test.cpp, checkpoint_damaged_step_test.cpp and
// checkpoint_hf_test.cpp.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "trainer/config/config_loader.h"

namespace titan {

inline std::string tmp_dir(const std::string& tag) {
  namespace fs = std::filesystem;
  const fs::path d = fs::temp_directory_path() / ("titan_ckpt_test_" + tag);
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

inline JobConfig tiny(const std::string& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--config", std::string(TITAN_SOURCE_DIR) + "/configs/debug_model.toml",
                                   "--job.dump_folder", dir, "--training.seq_len", "32",
                                   "--training.local_batch_size", "4", "--training.steps", "20",
                                   "--metrics.peak_flops", "1e11", "--checkpoint.enable", "true",
                                   "--checkpoint.folder", dir + "/ckpt", "--checkpoint.interval", "1000",
                                   "--checkpoint.last_save_model_only", "false"};
  args.insert(args.end(), extra.begin(), extra.end());
  return load_job_config(args);
}

}  // namespace titan
