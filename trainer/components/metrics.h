// Training metrics: TorchTitan's log line, a JSON-lines file in the dump folder, the CPU's
// measured peak FLOP/s and this process's memory. Used by the train loop.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace titan {

// FLOP/s of an fp32 GEMM on this host with the current torch thread count (a short probe).
double measure_peak_flops();

struct HostMemory {
  double peak_rss_gib;  // this process's high-water resident set
  double total_gib;     // the host's memory
};
HostMemory host_memory();

struct StepMetrics {
  int64_t step = 0;
  double loss = 0, grad_norm = 0, lr = 0;
  double tps = 0;  // tokens per second per rank (device)
  double tflops = 0, mfu_percent = 0;
  double step_time_s = 0;
  double param_gib = 0, grad_gib = 0, optimizer_gib = 0;  // this rank's bytes
};

class MetricsLogger {
 public:
  // Only the writer rank prints and writes; others keep silent. append: a resumed job adds
  // to the metrics of the run it continues instead of starting the file again.
  MetricsLogger(const std::string& dump_folder, bool writer, bool append = false);
  void log(const StepMetrics& m);

 private:
  bool writer_;
  std::ofstream jsonl_;
};

}  // namespace titan
