// The one matrix-product building block of the fused attention kernels
// (attention_kernel.cpp): a register-blocked C (+)= A * B on small tiles, with A read
// through arbitrary strides so that transposed operands (P^T, dS^T) need no copy.
#pragma once

#include "trainer/model/kernels/simd.h"

namespace titan::simd {

// R rows x 2 vectors of C at (r, col), K deep: 2R accumulators in registers.
template <typename T, int W, int R>
TITAN_INLINE void tile_block(int64_t r, int64_t col, int64_t K, const T* a, int64_t ars, int64_t aks, const T* b,
                             int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  using V = vec_t<T, W>;
  constexpr int L = lanes<T, W>;
  V s0[R], s1[R];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) s0[i] = s1[i] = V{};
  const T* ar = a + r * ars;
  const T* bp = b + col;
  for (int64_t k = 0; k < K; ++k, bp += ldb) {
    const V b0 = load<T, W>(bp), b1 = load<T, W>(bp + L);
    const T* ak = ar + k * aks;
    // Scalar times vector, not a splat first: the compiler then broadcasts straight from
    // memory instead of a scalar add plus a register broadcast, which competes with the
    // FMAs for a port.
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const T x = ak[i * ars];
      s0[i] += x * b0, s1[i] += x * b1;
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    T* cp = c + (r + i) * ldc + col;
    store<T>(cp, accumulate ? load<T, W>(cp) + s0[i] : s0[i]);
    store<T>(cp + L, accumulate ? load<T, W>(cp + L) + s1[i] : s1[i]);
  }
}

// C[M][N] (+)= sum_k A(r, k) * B[k][N], A(r, k) at a[r * ars + k * aks], B row-major with
// leading dim ldb, C row-major with leading dim ldc, in vectors of W bytes. Blocks of R rows
// x 2 vectors keep 2R accumulators in registers: R = 4 at 32 bytes (AVX2 has 16 vector
// registers), 8 at 64 bytes (AVX-512 has 32, and eight accumulators cannot hide its FMA
// latency at two FMAs per cycle); column and row tails fall back to narrower blocks.
template <typename T, int W = 32>
TITAN_INLINE void tile_gemm(int64_t M, int64_t N, int64_t K, const T* a, int64_t ars, int64_t aks,
                            const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  using V = vec_t<T, W>;
  constexpr int L = lanes<T, W>;
  constexpr int R = W == 64 ? 8 : 4;
  int64_t r = 0;
  for (; r + R <= M; r += R) {
    for (int64_t col = 0; col + 2 * L <= N; col += 2 * L) {
      tile_block<T, W, R>(r, col, K, a, ars, aks, b, ldb, c, ldc, accumulate);
    }
  }
  for (; r + 4 <= M; r += 4) {
    for (int64_t col = 0; col + 2 * L <= N; col += 2 * L) {
      tile_block<T, W, 4>(r, col, K, a, ars, aks, b, ldb, c, ldc, accumulate);
    }
  }
  // Column tails of the rows done above, then the last rows one at a time.
  for (int64_t r4 = 0; r4 + 4 <= r; r4 += 4) {
    const T* a0 = a + r4 * ars;
    const T* a1 = a0 + ars;
    const T* a2 = a1 + ars;
    const T* a3 = a2 + ars;
    T* c0 = c + r4 * ldc;
    int64_t col = N - N % (2 * L);
    for (; col < N; col += L) {
      const int64_t n = N - col < L ? N - col : L;
      V s0{}, s1{}, s2{}, s3{};
      const T* bp = b + col;
      for (int64_t k = 0; k < K; ++k, bp += ldb) {
        const V b0 = n == L ? load<T, W>(bp) : load_part<T, W>(bp, n, T(0));
        const int64_t ka = k * aks;
        s0 += a0[ka] * b0, s1 += a1[ka] * b0, s2 += a2[ka] * b0, s3 += a3[ka] * b0;
      }
      const V s[4] = {s0, s1, s2, s3};
      for (int i = 0; i < 4; ++i) {
        T* cp = c0 + i * ldc + col;
        const V old = accumulate ? load_part<T, W>(cp, n, T(0)) : V{};
        store_part<T>(cp, old + s[i], n);
      }
    }
  }
  for (; r < M; ++r) {
    const T* ar = a + r * ars;
    for (int64_t col = 0; col < N; col += L) {
      const int64_t n = N - col < L ? N - col : L;
      V s0{};
      const T* bp = b + col;
      for (int64_t k = 0; k < K; ++k, bp += ldb) {
        s0 += ar[k * aks] * (n == L ? load<T, W>(bp) : load_part<T, W>(bp, n, T(0)));
      }
      T* cp = c + r * ldc + col;
      const V old = accumulate ? load_part<T, W>(cp, n, T(0)) : V{};
      store_part<T>(cp, old + s0, n);
    }
  }
}

}  // namespace titan::simd
