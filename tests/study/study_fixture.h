// Shared pieces of the study tests: a narrow Qwen3 on a few simulated chips (records in a
// blink) and a chip file with little HBM, so that a search has layouts that do not fit.
#pragma once

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "trainer/config/config_loader.h"

namespace titan::study::testing {

inline std::string tmp_dir(const std::string& name) { return "/tmp/titan_study_test/" + name; }

// A file's bytes ("" if it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// A TPU v5e with 2 GiB of HBM (1 GiB of it runtime reserve): the narrow model's bigger micro-batches do not fit.
inline std::string small_hbm_chip_file() {
  const std::string path = "/tmp/titan_study_test_small_hbm.toml";
  std::ofstream f(path);
  f << "name = \"small-hbm\"\ndescription = \"TPU v5e with 2 GiB HBM (study tests)\"\nbase = \"tpu-v5e\"\n"
       "[memory]\nsource = \"test chip\"\nhbm_bytes = { value = 2, unit = \"GiB\" }\n";
  return path;
}

inline JobConfig tiny_config(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--config", std::string(TITAN_SOURCE_DIR) + "/configs/qwen3_8b.toml",
                                   "--job.dump_folder", tmp_dir("dump"),
                                   "--model.n_layers", "4", "--model.dim", "256", "--model.ffn_dim", "768",
                                   "--model.n_heads", "8", "--model.n_kv_heads", "4", "--model.head_dim", "32",
                                   "--model.vocab_size", "4096", "--training.seq_len", "512",
                                   "--simulation.num_chips", "8", "--simulation.device", "tpu-v5p"};
  args.insert(args.end(), extra.begin(), extra.end());
  return load_job_config(args);
}

}  // namespace titan::study::testing
