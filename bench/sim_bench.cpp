// sim_bench: wall time to simulate one training step of a config at several chip counts
// (the simulator's cost must not grow with chips). Run by launch/bench-sim.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "common/error.h"
#include "trainer/config/config_loader.h"
#include "trainer/simulate/simulate.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::vector<int64_t> chips = {64, 8192, 65536};
  try {
    for (int64_t n : chips) {
      std::vector<std::string> a = args;
      a.insert(a.end(), {"--simulation.num_chips", std::to_string(n)});
      titan::JobConfig cfg = titan::load_job_config(a);
      const auto t0 = std::chrono::steady_clock::now();
      titan::SimulationResult r = titan::simulate(cfg, /*other_mode=*/false);
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%6lld chips: simulated one step in %.3f s wall (%lld ops, %lld collectives; "
                  "step %.3f s, MFU %.1f %%)\n",
                  static_cast<long long>(n), wall, static_cast<long long>(r.report.ops),
                  static_cast<long long>(r.report.collectives), r.report.step_time_s, r.mfu_percent);
    }
  } catch (const titan::Error& e) {
    std::fprintf(stderr, "sim_bench: %s\n", e.what());
    return 2;
  }
  return 0;
}
