#include "trainer/model/kernels/simd.h"

#include <atomic>

namespace titan::simd {
namespace {
std::atomic<bool> forced_baseline{false};
std::atomic<bool> forced_no_avx512{false};
}

bool use_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has && !forced_baseline.load(std::memory_order_relaxed);
}

bool use_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has && !forced_baseline.load(std::memory_order_relaxed) &&
         !forced_no_avx512.load(std::memory_order_relaxed);
}

void force_baseline(bool on) { forced_baseline.store(on); }
void force_no_avx512(bool on) { forced_no_avx512.store(on); }

}  // namespace titan::simd
