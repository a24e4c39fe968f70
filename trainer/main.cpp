// titan-train: parses the config, then trains (or simulates). Every failure ends in one clear
// line on stderr and a non-zero exit: 2 for mistakes in the input, 1 for runtime failures.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "collectives/job_abort.h"
#include "collectives/watchdog.h"
#include "common/error.h"
#include "common/launcher_rank.h"
#include "trainer/config/config_loader.h"
#include "trainer/simulate/simulate.h"
#include "trainer/step/trainer.h"
#include "trainer/stop_signals.h"
#include "trainer/train.h"

namespace {

// A runtime failure on one rank of a multi-rank job ends every rank now (through the
// collective layer's abort, when the launcher started peers) instead of leaving the others
// waiting for their timeout; the message starts "rank 3: " (titan::launcher_rank_prefix()).
[[noreturn]] void fail_runtime(const std::string& message) {
  if (titan::launched_with_peers()) titan::abort_job(titan::launcher_rank_prefix() + message);  // prints "titan: <message>"
  std::cerr << "titan-train: " << message << std::endl;
  std::exit(1);
}

// A config error on one rank of many (a dataset path only that host lacks) ends the job now
// with status 2: returning would finalize MPI, and mpirun would leave the other ranks in
// their next collective until its timeout. The same mistake on every rank (one config file
// for all) is printed once, by rank 0.
[[noreturn]] void fail_config(const std::string& message) {
  if (titan::launched_with_peers()) titan::abort_job_agreeing(titan::launcher_rank_prefix(), message, 2);
  std::cerr << "titan-train: " << message << std::endl;
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (auto& a : args) {
    if (a == "--help" || a == "-h") {
      std::cout << titan::config_help();
      return 0;
    }
  }
  try {
    titan::JobConfig cfg = titan::load_job_config(args);
    if (cfg.job.print_config) std::cout << titan::config_to_toml(titan::with_resolved_model(cfg)) << std::endl;
    if (cfg.simulation.enable) {
      titan::run_simulation(cfg);  // same step on simulated hardware (trainer/simulate/simulate.h)
    } else {
      titan::install_stop_handlers();  // the loop stops cleanly at a step end (stop_signals.h)
      const titan::TrainResult r = titan::train(cfg);
      if (r.stop_signal) return titan::stop_exit_code(r.stop_signal);
    }
    return 0;
  } catch (const titan::Error& e) {
    if (e.kind() == titan::ErrorKind::kConfig) fail_config("config error: " + std::string(e.what()) + " [" + e.where() + "]");
    fail_runtime("error: " + std::string(e.what()) + " [" + e.where() + "]");
  } catch (const std::exception& e) {
    fail_runtime("error: " + std::string(e.what()));
  }
}
