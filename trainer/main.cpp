// titan-train: parses the config, then trains (or simulates). Every failure ends in one clear
// line on stderr and a non-zero exit: 2 for mistakes in the input, 1 for runtime failures.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "devices/error.h"
#include "trainer/config_loader.h"
#include "trainer/simulate.h"
#include "trainer/train.h"

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
    if (cfg.job.print_config) std::cout << titan::config_to_toml(cfg) << std::endl;
    if (cfg.simulation.enable) {
      titan::run_simulation(cfg);  // the same step on simulated hardware (trainer/simulate.h)
    } else {
      titan::train(cfg);
    }
    return 0;
  } catch (const titan::Error& e) {
    const bool config = e.kind() == titan::ErrorKind::kConfig;
    std::cerr << "titan-train: " << (config ? "config error: " : "error: ") << e.what() << " ["
              << e.where() << "]" << std::endl;
    return config ? 2 : 1;
  } catch (const std::exception& e) {
    std::cerr << "titan-train: error: " << e.what() << std::endl;
    return 1;
  }
}
