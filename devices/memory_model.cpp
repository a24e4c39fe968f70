#include "devices/memory_model.h"

#include <algorithm>
#include <cstdio>

#include "common/error.h"

namespace titan::devices {
namespace {

// Runtime context and library workspaces that training cannot use (CUDA context + cuBLAS /
// NCCL workspaces, XLA runtime buffers): ~1 GiB on accelerators. The cpu device's memory
// figure is already what a process may use.
constexpr int64_t kRuntimeReserveBytes = int64_t{1} << 30;

}  // namespace

MemoryReport memory_of_step(const TraceMemory& m, int64_t param_bytes, int64_t optimizer_bytes, const ChipSpec& chip) {
  MemoryReport r;
  r.params = param_bytes;
  r.optimizer = optimizer_bytes;
  r.grads = std::max<int64_t>(0, m.state_bytes - param_bytes - optimizer_bytes);
  r.activations = m.peak_temporaries;
  r.collective_buffers = m.peak_resized;
  r.runtime_reserve = chip.is_host() ? 0 : kRuntimeReserveBytes;
  r.total = r.params + r.grads + r.optimizer + r.activations + r.collective_buffers + r.runtime_reserve;
  r.capacity = chip.hbm_bytes;
  r.fits = r.total <= r.capacity;
  r.peak_by_op = m.peak_by_op;
  return r;
}

std::string MemoryReport::describe() const {
  auto g = [](int64_t b) { return static_cast<double>(b) / kGiB; };
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "%.2f GiB of %.2f GiB (%s): params %.2f, grads %.2f, optimizer %.2f, "
                "activations %.2f, collective buffers %.2f, runtime %.2f",
                g(total), g(capacity), fits ? "fits" : "DOES NOT FIT", g(params), g(grads),
                g(optimizer), g(activations), g(collective_buffers), g(runtime_reserve));
  return buf;
}

std::vector<std::pair<std::string, int64_t>> MemoryReport::consumers() const {
  std::vector<std::pair<std::string, int64_t>> c = {
      {"activations", activations},       {"optimizer states", optimizer},
      {"parameters", params},             {"gradients", grads},
      {"collective buffers", collective_buffers},
      {"runtime reserve", runtime_reserve}};
  std::stable_sort(c.begin(), c.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return c;
}

void require_fits(const MemoryReport& r, const std::string& what, const std::string& advice) {
  if (r.fits) return;
  auto g = [](int64_t b) { return static_cast<double>(b) / kGiB; };
  const auto parts = r.consumers();
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "%.1f GiB per chip against %.1f GiB (%.1f GiB, %.1f%% over); largest: %s %.1f GiB, %s %.1f GiB, "
                "%s %.1f GiB",
                g(r.total), g(r.capacity), g(r.total - r.capacity),
                100.0 * static_cast<double>(r.total - r.capacity) / static_cast<double>(r.capacity),
                parts[0].first.c_str(), g(parts[0].second),
                parts[1].first.c_str(), g(parts[1].second), parts[2].first.c_str(),
                g(parts[2].second));
  std::string peak;
  for (size_t i = 0; i < r.peak_by_op.size() && i < 3; ++i) {
    char one[160];
    std::snprintf(one, sizeof(one), "%s%s %.1f GiB", i ? ", " : "; the activations at the peak were made by ",
                  r.peak_by_op[i].first.c_str(), g(r.peak_by_op[i].second));
    peak += one;
  }
  TITAN_CONFIG_FAIL("the layout does not fit in memory (", what, "): ", buf, peak, advice,
                    ". Use more activation checkpointing, more chips or more sharding, or "
                    "--simulation.allow_oom true to report its step time anyway");
}

}  // namespace titan::devices
