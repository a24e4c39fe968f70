#include "trainer/components/metrics.h"

#include <sys/sysinfo.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include <torch/torch.h>

#include "common/error.h"
#include "trainer/config/config_folders.h"

namespace titan {

double measure_peak_flops() {
  const int64_t n = 512;
  auto a = torch::randn({n, n}), b = torch::randn({n, n}), c = torch::empty({n, n});
  torch::mm_out(c, a, b);  // warm up threads and caches
  int64_t reps = 0;
  auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (elapsed < 0.25) {
    torch::mm_out(c, a, b);
    ++reps;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return 2.0 * n * n * n * reps / elapsed;
}

HostMemory host_memory() {
  HostMemory m{0, 0};
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f) {
    char line[256];
    while (std::fgets(line, sizeof line, f)) {
      long kb = 0;
      if (std::sscanf(line, "VmHWM: %ld kB", &kb) == 1) m.peak_rss_gib = kb / 1048576.0;
    }
    std::fclose(f);
  }
  struct sysinfo si;
  if (sysinfo(&si) == 0) m.total_gib = double(si.totalram) * si.mem_unit / (1024.0 * 1024 * 1024);
  return m;
}

MetricsLogger::MetricsLogger(const std::string& dump_folder, bool writer, bool append) : writer_(writer) {
  if (!writer_) return;
  create_folder_for("job.dump_folder", dump_folder);
  const std::string path = dump_folder + "/metrics.jsonl";
  jsonl_.open(path, append ? std::ios::app : std::ios::trunc);
  TITAN_CHECK(jsonl_.good(), "cannot write metrics file ", path);
}

void MetricsLogger::log(const StepMetrics& m) {
  if (!writer_) return;
  const HostMemory mem = host_memory();
  const double mem_pct = mem.total_gib > 0 ? 100.0 * mem.peak_rss_gib / mem.total_gib : 0;
  std::printf("step: %2lld  loss: %7.4f  grad_norm: %7.4f  memory: %5.2fGiB(%.2f%%)  tps: %s  "
              "tflops: %.2f  mfu: %.2f%%\n",
              static_cast<long long>(m.step), m.loss, m.grad_norm, mem.peak_rss_gib, mem_pct,
              [&] {
                // thousands separators, as TorchTitan prints tps
                std::string s = std::to_string(static_cast<long long>(std::llround(m.tps)));
                for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(i, ",");
                return s;
              }().c_str(),
              m.tflops, m.mfu_percent);
  std::fflush(stdout);
  nlohmann::json j = {{"step", m.step},
                      {"loss", m.loss},
                      {"grad_norm", m.grad_norm},
                      {"lr", m.lr},
                      {"tps", m.tps},
                      {"tflops", m.tflops},
                      {"mfu", m.mfu_percent},
                      {"step_time_s", m.step_time_s},
                      {"memory_peak_gib", mem.peak_rss_gib},
                      {"memory_peak_percent", mem_pct},
                      {"memory_params_gib", m.param_gib},
                      {"memory_grads_gib", m.grad_gib},
                      {"memory_optimizer_gib", m.optimizer_gib}};
  jsonl_ << j.dump() << "\n";
  jsonl_.flush();
}

}  // namespace titan
