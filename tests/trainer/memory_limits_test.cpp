// Sizes that cannot fit are refused before anything is allocated, with the key and the
// estimated bytes: no OOM kill, no libtorch trace, no simulator that grows without output.
#include <gtest/gtest.h>

#include "common/error.h"
#include "tests/error_of.h"
#include "trainer/config/config_loader.h"
#include "trainer/config/memory_limits.h"
#include "trainer/config/resolve_model.h"
#include "trainer/step/trainer.h"

namespace titan {
namespace {

JobConfig debug_config(std::vector<std::string> extra) {
  std::vector<std::string> args = {"--config", std::string(TITAN_SOURCE_DIR) + "/configs/debug_model.toml",
                                   "--job.dump_folder", "/tmp/titan_memory_limits_test"};
  args.insert(args.end(), extra.begin(), extra.end());
  return load_job_config(args);
}

std::string error_of(const std::function<void()>& f) { return titan::error_of(f, ErrorKind::kConfig); }

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
    const std::string msg =
        error_of([&] { check_fits_in_memory(cfg, resolve_model_args(cfg, 257), machine_memory_bytes()); });
    EXPECT_NE(msg.find(c.key), std::string::npos) << msg;
    EXPECT_NE(msg.find(" bytes ("), std::string::npos) << msg;
    EXPECT_NE(msg.find("/proc/meminfo"), std::string::npos) << msg;
  }
  // The shipped debug config fits with room to spare.
  const JobConfig ok = debug_config({});
  EXPECT_LT(estimate_rank_memory(ok, resolve_model_args(ok, 257)).total(), 1e9);
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
}  // namespace titan
