#include "trainer/model/kernels/simd.h"

#include <atomic>

namespace titan::simd {
namespace {
std::atomic<bool> forced_baseline{false};
}

bool use_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has && !forced_baseline.load(std::memory_order_relaxed);
}

void force_baseline(bool on) { forced_baseline.store(on); }

}  // namespace titan::simd
