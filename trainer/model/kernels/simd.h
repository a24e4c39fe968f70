// Portable SIMD for the fused CPU kernels (trainer/model/kernels) and the flat-buffer AdamW
// (trainer/components): GCC vector types of 32 bytes (8 floats, 4 doubles; the default) and
// 64 bytes (16 floats, 8 doubles; the width template argument W), loads and stores of full
// and partial vectors, an exp for float lanes, and the dispatch that compiles each kernel
// body twice (AVX2 + FMA, and the baseline x86-64 ISA) and picks one at run time; bodies
// written for a width W can also get an AVX-512 variant at 64 bytes (TITAN_SIMD_KERNEL_WIDE).
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
#define TITAN_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma")))

namespace titan::simd {

typedef float f32x8 __attribute__((vector_size(32)));
typedef double f64x4 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef float f32x16 __attribute__((vector_size(64)));
typedef double f64x8 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));

// Vec<T, W>: the vector of W bytes of T (the same type as the typedefs above).
template <typename T, int W = 32>
struct Vec {
  typedef T type __attribute__((vector_size(W)));
  static constexpr int lanes = W / static_cast<int>(sizeof(T));
};
template <typename T, int W = 32>
using vec_t = typename Vec<T, W>::type;
template <typename T, int W = 32>
constexpr int lanes = Vec<T, W>::lanes;
// Lanes of T in the vector type V (for helpers that take the vector and deduce its width).
template <typename T, typename V>
constexpr int lanes_of = static_cast<int>(sizeof(V) / sizeof(T));

template <typename T, int W = 32>
TITAN_INLINE vec_t<T, W> load(const T* p) {
  vec_t<T, W> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <typename T, typename V>
TITAN_INLINE void store(T* p, V v) {
  std::memcpy(p, &v, sizeof(v));
}
template <typename T, int W = 32>
TITAN_INLINE vec_t<T, W> splat(T s) {
  return vec_t<T, W>{} + s;
}
// The first n < lanes elements; the rest read as `fill`.
template <typename T, int W = 32>
TITAN_INLINE vec_t<T, W> load_part(const T* p, int64_t n, T fill) {
  T buf[lanes<T, W>];
  for (int i = 0; i < lanes<T, W>; ++i) buf[i] = i < n ? p[i] : fill;
  return load<T, W>(buf);
}
template <typename T, typename V>
TITAN_INLINE void store_part(T* p, V v, int64_t n) {
  T buf[lanes_of<T, V>];
  store<T>(buf, v);
  for (int64_t i = 0; i < n; ++i) p[i] = buf[i];
}
template <typename T, typename V>
TITAN_INLINE T hsum(V v) {
  T s = 0;
  for (int i = 0; i < lanes_of<T, V>; ++i) s += v[i];
  return s;
}
template <typename T, typename V>
TITAN_INLINE T hmax(V v) {
  T m = v[0];
  for (int i = 1; i < lanes_of<T, V>; ++i) m = v[i] > m ? v[i] : m;
  return m;
}
template <typename T, typename V>
TITAN_INLINE V vmax(V a, V b) {
  return a > b ? a : b;
}

// acc[0 .. lanes) += v, accumulated in double (for sums over many rows).
template <typename T, typename V>
TITAN_INLINE void accumulate_f64(double* acc, V v) {
  for (int h = 0; h < lanes_of<T, V>; h += 4) {
    const f64x4 d = {double(v[h]), double(v[h + 1]), double(v[h + 2]), double(v[h + 3])};
    store<double>(acc + h, load<double>(acc + h) + d);
  }
}

// e^x for float lanes (F: the float vector, I: the int32 vector of as many lanes):
// x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to r^7 (truncation below 6e-9
// relative, under half a float ulp), times 2^n built in the exponent bits. x < -87.3 (-inf
// included) gives 0, x > 88 +inf (float overflows near 88.7), NaN stays NaN.
template <typename F, typename I>
TITAN_INLINE F exp_float_lanes(F x) {
  const F lo = F{} - 87.33f, hi = F{} + 88.0f;
  F xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const F magic = F{} + 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  F n = (xc * 1.44269504088896341f + magic) - magic;
  F r = xc - n * 0.693359375f;  // ln 2 split in a part exact in float and the rest
  r = r - n * -2.12194440e-4f;
  F p = F{} + 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  I bits = (__builtin_convertvector(n, I) + 127) << 23;
  F scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  F y = p * scale;
  y = x < lo ? F{} : y;
  y = x > hi ? F{} + INFINITY : y;
  return x != x ? x : y;
}
TITAN_INLINE f32x8 exp(f32x8 x) { return exp_float_lanes<f32x8, i32x8>(x); }
TITAN_INLINE f32x16 exp(f32x16 x) { return exp_float_lanes<f32x16, i32x16>(x); }
// Doubles (the kernels' reference-precision path for tests) take libm lane by lane.
template <typename V>
TITAN_INLINE V exp_double_lanes(V x) {
  V y;
  for (int i = 0; i < lanes_of<double, V>; ++i) y[i] = std::exp(x[i]);
  return y;
}
TITAN_INLINE f64x4 exp(f64x4 x) { return exp_double_lanes(x); }
TITAN_INLINE f64x8 exp(f64x8 x) { return exp_double_lanes(x); }
template <typename T>
TITAN_INLINE T exp_scalar(T x) {
  return exp(splat<T>(x))[0];
}

// Whether the AVX2 + FMA variants run: the CPU has both and no test forced the baseline.
bool use_avx2();
// Tests run both variants of every kernel: true makes every dispatch take the baseline.
void force_baseline(bool on);
// Whether the AVX-512 variants of TITAN_SIMD_KERNEL_WIDE kernels run: the CPU has AVX-512
// F/DQ/VL/BW and neither force_baseline nor force_no_avx512 is on.
bool use_avx512();
// Tests run the AVX2 variant of the wide kernels on an AVX-512 host with this on.
void force_no_avx512(bool on);

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

// As TITAN_SIMD_KERNEL for a body templated on <T, W> (the vector width in bytes): a third
// variant at 64 bytes for AVX-512 hosts, where a 16-float FMA does twice the work of AVX2's.
// name##_narrow<T>(args...) dispatches among the 32-byte variants only, for shapes that the
// wide one would run on its tail paths.
#define TITAN_SIMD_KERNEL_WIDE(name, body)                                        \
  template <typename T, typename... A>                                            \
  TITAN_AVX512 void name##_avx512(A... a) {                                       \
    body<T, 64>(a...);                                                            \
  }                                                                               \
  template <typename T, typename... A>                                            \
  TITAN_AVX2 void name##_avx2(A... a) {                                           \
    body<T, 32>(a...);                                                            \
  }                                                                               \
  template <typename T, typename... A>                                            \
  void name##_baseline(A... a) {                                                  \
    body<T, 32>(a...);                                                            \
  }                                                                               \
  template <typename T, typename... A>                                            \
  void name##_narrow(A... a) {                                                    \
    if (::titan::simd::use_avx2()) {                                              \
      name##_avx2<T>(a...);                                                       \
    } else {                                                                      \
      name##_baseline<T>(a...);                                                   \
    }                                                                             \
  }                                                                               \
  template <typename T, typename... A>                                            \
  void name(A... a) {                                                             \
    if (::titan::simd::use_avx512()) {                                            \
      name##_avx512<T>(a...);                                                     \
    } else {                                                                      \
      name##_narrow<T>(a...);                                                     \
    }                                                                             \
  }
