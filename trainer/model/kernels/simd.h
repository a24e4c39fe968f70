// Portable SIMD for the fused CPU kernels (trainer/model/kernels) and the flat-buffer AdamW
// (trainer/components): 32-byte GCC vector types (8 floats, 4 doubles), loads and stores
// of full and partial vectors, an exp for float lanes, and the dispatch that compiles each
// kernel body twice (AVX2 + FMA, and the baseline x86-64 ISA) and picks one at run time.
//
// Rules for code built on this header: kernel bodies and their helpers are TITAN_INLINE
// templates that take raw pointers, so that they are compiled into whichever variant calls
// them; nothing that allocates or calls into libtorch runs inside a variant (their inline
// copies would be built for AVX2 and could be picked by the linker for every caller).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

// 32-byte vectors cross no call boundary (every helper is inlined), so the ABI note is moot.
#pragma GCC diagnostic ignored "-Wpsabi"

#define TITAN_INLINE inline __attribute__((always_inline))
#define TITAN_AVX2 __attribute__((target("avx2,fma")))

namespace titan::simd {

typedef float f32x8 __attribute__((vector_size(32)));
typedef double f64x4 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));

template <typename T>
struct Vec;
template <>
struct Vec<float> {
  using type = f32x8;
  static constexpr int lanes = 8;
};
template <>
struct Vec<double> {
  using type = f64x4;
  static constexpr int lanes = 4;
};
template <typename T>
using vec_t = typename Vec<T>::type;
template <typename T>
constexpr int lanes = Vec<T>::lanes;

template <typename T>
TITAN_INLINE vec_t<T> load(const T* p) {
  vec_t<T> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <typename T>
TITAN_INLINE void store(T* p, vec_t<T> v) {
  std::memcpy(p, &v, sizeof(v));
}
template <typename T>
TITAN_INLINE vec_t<T> splat(T s) {
  return vec_t<T>{} + s;
}
// The first n < lanes elements; the rest read as `fill`.
template <typename T>
TITAN_INLINE vec_t<T> load_part(const T* p, int64_t n, T fill) {
  T buf[lanes<T>];
  for (int i = 0; i < lanes<T>; ++i) buf[i] = i < n ? p[i] : fill;
  return load<T>(buf);
}
template <typename T>
TITAN_INLINE void store_part(T* p, vec_t<T> v, int64_t n) {
  T buf[lanes<T>];
  store<T>(buf, v);
  for (int64_t i = 0; i < n; ++i) p[i] = buf[i];
}
template <typename T>
TITAN_INLINE T hsum(vec_t<T> v) {
  T s = 0;
  for (int i = 0; i < lanes<T>; ++i) s += v[i];
  return s;
}
template <typename T>
TITAN_INLINE T hmax(vec_t<T> v) {
  T m = v[0];
  for (int i = 1; i < lanes<T>; ++i) m = v[i] > m ? v[i] : m;
  return m;
}
template <typename T>
TITAN_INLINE vec_t<T> vmax(vec_t<T> a, vec_t<T> b) {
  return a > b ? a : b;
}

// acc[0 .. lanes) += v, accumulated in double (for sums over many rows).
template <typename T>
TITAN_INLINE void accumulate_f64(double* acc, vec_t<T> v) {
  for (int h = 0; h < lanes<T>; h += 4) {
    const f64x4 d = {double(v[h]), double(v[h + 1]), double(v[h + 2]), double(v[h + 3])};
    store<double>(acc + h, load<double>(acc + h) + d);
  }
}

// e^x for float lanes: x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to r^7
// (truncation below 6e-9 relative, under half a float ulp), times 2^n built in the exponent
// bits. x < -87.3 (-inf included) gives 0, x > 88 +inf (float overflows near 88.7), NaN
// stays NaN.
TITAN_INLINE f32x8 exp(f32x8 x) {
  const f32x8 lo = splat<float>(-87.33f), hi = splat<float>(88.0f);
  f32x8 xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const f32x8 magic = splat<float>(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  f32x8 n = (xc * 1.44269504088896341f + magic) - magic;
  f32x8 r = xc - n * 0.693359375f;  // ln 2 split in a part exact in float and the rest
  r = r - n * -2.12194440e-4f;
  f32x8 p = splat<float>(1.0f / 5040);
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  i32x8 bits = (__builtin_convertvector(n, i32x8) + 127) << 23;
  f32x8 scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  f32x8 y = p * scale;
  y = x < lo ? splat<float>(0.0f) : y;
  y = x > hi ? splat<float>(INFINITY) : y;
  return x != x ? x : y;
}
// Doubles (the kernels' reference-precision path for tests) take libm lane by lane.
TITAN_INLINE f64x4 exp(f64x4 x) {
  f64x4 y;
  for (int i = 0; i < 4; ++i) y[i] = std::exp(x[i]);
  return y;
}
template <typename T>
TITAN_INLINE T exp_scalar(T x) {
  return exp(splat<T>(x))[0];
}

// Whether the AVX2 + FMA variants run: the CPU has both and no test forced the baseline.
bool use_avx2();
// Tests run both variants of every kernel: true makes every dispatch take the baseline.
void force_baseline(bool on);

}  // namespace titan::simd

// Declares kernel `name`, callable as name<T>(args...), that runs `body<T>(args...)` built for
// AVX2 + FMA where the CPU has them and for the baseline ISA elsewhere.
#define TITAN_SIMD_KERNEL(name, body)                                             \
  template <typename T, typename... A>                                            \
  TITAN_AVX2 void name##_avx2(A... a) {                                           \
    body<T>(a...);                                                                \
  }                                                                               \
  template <typename T, typename... A>                                            \
  void name##_baseline(A... a) {                                                  \
    body<T>(a...);                                                                \
  }                                                                               \
  template <typename T, typename... A>                                            \
  void name(A... a) {                                                             \
    if (::titan::simd::use_avx2()) {                                              \
      name##_avx2<T>(a...);                                                       \
    } else {                                                                      \
      name##_baseline<T>(a...);                                                   \
    }                                                                             \
  }
