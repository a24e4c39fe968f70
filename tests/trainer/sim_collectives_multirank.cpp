// Under mpirun -np 4: every rank runs one real training step of the debug model (mpi backend)
// and logs each collective call (op, group, bytes); rank 0 then records the same config as a
// simulated 4-chip step and checks that the sim backend received exactly the same calls, group
// by group, in the same order. With pipeline parallelism every pipeline rank's representative
// (all other mesh coordinates 0) compares its own calls, sends and receives included, with
// the simulated rank of its stage. Each representative also counts its tensor bytes over a
// second step (TensorMemoryTracker) and checks them against the memory walk of the same config
// recorded for the cpu device (devices/trace_memory.h): within 6% in separate mode, 20% in fused
// mode (the progress thread frees reduced buffers; it reports to the issuer's tracker). The
// real-run memory pre-check's estimate (trainer/step/memory_limits.h) must stay below them.
// Args: <collective_mode> [--section.key value ...].
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.h"
#include "tests/trainer/placeholder_cpu_calibration.h"
#include "trainer/components/tensor_memory.h"
#include "trainer/config/config_loader.h"
#include "trainer/simulate/simulate.h"
#include "trainer/step/memory_limits.h"
#include "trainer/step/trainer.h"

namespace {

using Call = std::tuple<std::string, int64_t>;  // op, bytes
using Log = std::map<std::string, std::vector<Call>>;  // per group, in issue order

std::string str(const std::vector<Call>& v) {
  std::string s;
  for (auto& [op, b] : v) s += " " + op + ":" + std::to_string(b);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args = {"--config", std::string(TITAN_SOURCE_DIR) + "/configs/debug_model.toml",
                                   "--job.dump_folder", "/tmp/titan_sim_collectives",
                                   "--training.seq_len", "32", "--training.local_batch_size", "2",
                                   "--metrics.peak_flops", "1e11"};
  std::string mode = argc > 1 ? argv[1] : "fused";
  args.insert(args.end(), {"--comm.collective_mode", mode});
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  try {
    titan::JobConfig cfg = titan::load_job_config(args);
    Log real;
    std::mutex mu;
    int rank = 0, size = 1;
    int64_t pp_rank = 0;
    bool representative = false;
    int64_t tensor_peak = 0;
    titan::MemoryEstimate estimate;
    {
      titan::TensorMemoryTracker tensors;
      titan::Trainer trainer(cfg);
      rank = trainer.world().rank();
      size = trainer.world().size();
      pp_rank = trainer.mesh().coordinate("pp");
      representative = rank == pp_rank * (size / trainer.mesh().size("pp"));
      estimate = titan::estimate_rank_memory(cfg, trainer.dims(), trainer.model_args(), static_cast<int>(pp_rank));
      titan::set_collective_observer([&](const titan::OpInfo& info) {
        std::lock_guard<std::mutex> lock(mu);
        real[info.group].emplace_back(info.op, info.bytes);
      });
      trainer.train_step();
      titan::set_collective_observer(nullptr);
      tensors.reset_peak();  // the first step made the optimizer state and every buffer
      trainer.train_step();
      tensor_peak = tensors.peak();
    }
    int failed = 0;
    if (representative) {
      titan::JobConfig sim = cfg;
      sim.simulation.enable = true;
      sim.simulation.num_chips = size;
      sim.simulation.device = "tpu-v5p";
      titan::RecordedStep rec = titan::record_step(sim);
      Log simulated;
      if (rec.pipeline) {
        for (const auto& c : rec.pipeline->calls[pp_rank])
          if (c.type == titan::SimCollectiveEvent::Type::kCall) simulated[c.group].emplace_back(c.op, c.bytes);
      } else {
        for (const auto& c : rec.calls) simulated[c.group].emplace_back(c.op, c.bytes);
      }
      int64_t n = 0;
      for (auto& [g, v] : real) n += static_cast<int64_t>(v.size());
      std::printf("%s, %d ranks, pipeline rank %lld: real step issued %lld collective calls on %zu groups\n",
                  mode.c_str(), size, static_cast<long long>(pp_rank), static_cast<long long>(n), real.size());
      for (auto& [g, v] : real) std::printf("  %-12s real %3zu calls:%s\n", g.c_str(), v.size(), str(v).substr(0, 160).c_str());
      if (simulated != real) {
        failed = 1;
        std::set<std::string> groups;
        for (auto& [g, v] : real) groups.insert(g);
        for (auto& [g, v] : simulated) groups.insert(g);
        for (auto& g : groups) {
          if (real[g] == simulated[g]) continue;
          std::printf("MISMATCH on group %s\n  real:%s\n  sim: %s\n", g.c_str(), str(real[g]).c_str(),
                      str(simulated[g]).c_str());
        }
      } else {
        std::printf("simulated 4-chip trace: same calls, groups and bytes\n");
      }
      // Memory: the same config recorded for the cpu device (its fused kernels, as this run;
      // the calibration's rates do not enter the memory), walked unfused (a real run is eager).
      titan::testing::use_placeholder_cpu_calibration("/tmp/titan_sim_collectives_cal_" + std::to_string(rank) +
                                                      ".toml");
      sim.simulation.device = "cpu";
      const titan::RecordedStep mem = titan::record_step(sim);
      const titan::devices::TraceMemory& m =
          mem.pipeline ? mem.pipeline->memory[pp_rank].eager() : mem.memory.eager();
      const double predicted = static_cast<double>(m.state_bytes + m.peak_bytes);
      const double error = predicted / static_cast<double>(std::max<int64_t>(1, tensor_peak)) - 1;
      std::printf("tensor memory: real step %.2f MB, predicted %.2f MB (state %.2f, step peak %.2f): %+.1f%%\n",
                  tensor_peak / 1e6, predicted / 1e6, m.state_bytes / 1e6, m.peak_bytes / 1e6, 100 * error);
      // Seen: separate mode within 3.2% on every layout; fused mode -5% to -14.5% where FSDP
      // reduces gradients (the real step holds more: the progress thread frees its buffers in
      // an order the walk does not model), within 3.2% on PP 4 without FSDP.
      const double bound = mode == "fused" ? 0.20 : 0.06;
      if (std::abs(error) > bound) {
        std::printf("MISMATCH: tensor memory off by more than %.0f%%\n", 100 * bound);
        failed = 1;
      }
      // The pre-check's lower bound of a step (without the whole model every rank builds first).
      std::printf("memory pre-check: at least %.2f MB (activations %.2f, logits %.2f, weights %.2f, gathered %.2f)\n",
                  estimate.steady() / 1e6, estimate.activations / 1e6, estimate.logits / 1e6,
                  estimate.weights / 1e6, estimate.gathered / 1e6);
      if (estimate.steady() > static_cast<double>(tensor_peak)) {
        std::printf("MISMATCH: the memory pre-check's lower bound exceeds the real step\n");
        failed = 1;
      }
    }
    int any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any;
  } catch (const titan::Error& e) {
    std::fprintf(stderr, "sim_collectives_multirank: %s [%s]\n", e.what(), e.where().c_str());
    return 1;
  }
}
