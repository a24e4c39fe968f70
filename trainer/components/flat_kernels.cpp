// Built without the precompiled header and with -fno-math-errno (trainer/CMakeLists.txt), so
// that the update's sqrt vectorizes.
#include "trainer/components/flat_kernels.h"

#include <atomic>
#include <cmath>
#include <vector>

#include <ATen/Parallel.h>

#include "trainer/model/kernels/simd.h"

namespace titan {
namespace {

using namespace simd;

// p = p * decay; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p += step_size * m / (sqrt(v) / bias2_sqrt + eps): plain loops the compiler vectorizes.
// *finite is cleared if a new p is inf or NaN (p - p is then NaN, not 0): the trainer's
// check that a step left the weights finite rides in this pass instead of one more per tensor.
template <typename T>
TITAN_INLINE void adamw_range(T* __restrict p, T* __restrict g, T* __restrict m, T* __restrict v, AdamWCoefs c,
                              int64_t begin, int64_t end, unsigned* finite) {
  const T decay = T(c.decay), b1 = T(c.beta1), b2 = T(c.beta2), a1 = T(1 - c.beta1), a2 = T(1 - c.beta2);
  const T eps = T(c.eps), step = T(c.step_size), bias2 = T(c.bias2_sqrt), scale = T(c.grad_scale);
  const bool scaled = c.grad_scale != 1.0;
  unsigned ok = 1;
  for (int64_t i = begin; i < end; ++i) {
    T gi = g[i];
    if (scaled) g[i] = gi = gi * scale;
    const T mi = m[i] * b1 + gi * a1;
    const T vi = v[i] * b2 + gi * gi * a2;
    m[i] = mi;
    v[i] = vi;
    const T pi = p[i] * decay + step * (mi / (std::sqrt(vi) / bias2 + eps));
    p[i] = pi;
    ok &= static_cast<unsigned>(pi - pi == T(0));
  }
  *finite = ok;
}

template <typename T>
TITAN_INLINE double sum_squares_range(const T* x, int64_t begin, int64_t end) {
  constexpr int L = lanes<T>;
  f64x4 acc{};
  int64_t i = begin;
  for (; i + L <= end; i += L) {
    const auto v = load<T>(x + i);
    for (int h = 0; h < L / 4; ++h) {
      const f64x4 d = {double(v[4 * h]), double(v[4 * h + 1]), double(v[4 * h + 2]), double(v[4 * h + 3])};
      acc += d * d;
    }
  }
  double s = acc[0] + acc[1] + acc[2] + acc[3];
  for (; i < end; ++i) s += double(x[i]) * double(x[i]);
  return s;
}

TITAN_SIMD_KERNEL(adamw_kernel, adamw_range)

template <typename T>
TITAN_AVX2 double sum_squares_avx2(const T* x, int64_t b, int64_t e) {
  return sum_squares_range<T>(x, b, e);
}
template <typename T>
double sum_squares_baseline(const T* x, int64_t b, int64_t e) {
  return sum_squares_range<T>(x, b, e);
}

constexpr int64_t kGrain = 1 << 15;

template <typename T>
bool adamw_all(T* p, T* g, T* m, T* v, int64_t n, const AdamWCoefs& c) {
  std::atomic<bool> all_finite{true};
  at::parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    unsigned finite = 1;
    adamw_kernel<T>(p, g, m, v, c, b, e, &finite);
    if (!finite) all_finite.store(false, std::memory_order_relaxed);
  });
  return all_finite.load();
}

// Fixed chunks summed in order: the result does not depend on the thread count.
template <typename T>
double sum_squares_all(const T* x, int64_t n) {
  const int64_t chunks = (n + kGrain - 1) / kGrain;
  std::vector<double> part(static_cast<size_t>(chunks), 0.0);
  const bool avx2 = use_avx2();
  at::parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const int64_t lo = k * kGrain, hi = std::min(n, lo + kGrain);
      part[k] = avx2 ? sum_squares_avx2<T>(x, lo, hi) : sum_squares_baseline<T>(x, lo, hi);
    }
  });
  double s = 0;
  for (double v : part) s += v;
  return s;
}

}  // namespace

bool adamw_update(float* p, float* g, float* m, float* v, int64_t n, const AdamWCoefs& c) {
  return adamw_all(p, g, m, v, n, c);
}
bool adamw_update(double* p, double* g, double* m, double* v, int64_t n, const AdamWCoefs& c) {
  return adamw_all(p, g, m, v, n, c);
}
double sum_squares(const float* x, int64_t n) { return sum_squares_all(x, n); }
double sum_squares(const double* x, int64_t n) { return sum_squares_all(x, n); }

}  // namespace titan
