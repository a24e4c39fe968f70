// The one matrix-product building block of the fused attention kernels
// (attention_kernel.cpp): a register-blocked C (+)= A * B on small tiles, with A read
// through arbitrary strides so that transposed operands (P^T, dS^T) need no copy.
#pragma once

#include "trainer/model/kernels/simd.h"

namespace titan::simd {

// C[M][N] (+)= sum_k A(r, k) * B[k][N], A(r, k) at a[r * ars + k * aks], B row-major with
// leading dim ldb, C row-major with leading dim ldc. Blocks of 4 rows x 2 vectors keep eight
// accumulators in registers; column and row tails fall back to narrower blocks.
template <typename T>
TITAN_INLINE void tile_gemm(int64_t M, int64_t N, int64_t K, const T* a, int64_t ars, int64_t aks,
                            const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  using V = vec_t<T>;
  constexpr int L = lanes<T>;
  int64_t r = 0;
  for (; r + 4 <= M; r += 4) {
    const T* a0 = a + r * ars;
    const T* a1 = a0 + ars;
    const T* a2 = a1 + ars;
    const T* a3 = a2 + ars;
    T* c0 = c + r * ldc;
    int64_t col = 0;
    for (; col + 2 * L <= N; col += 2 * L) {
      V s00{}, s01{}, s10{}, s11{}, s20{}, s21{}, s30{}, s31{};
      const T* bp = b + col;
      for (int64_t k = 0; k < K; ++k, bp += ldb) {
        const V b0 = load<T>(bp), b1 = load<T>(bp + L);
        const int64_t ka = k * aks;
        const V x0 = splat<T>(a0[ka]), x1 = splat<T>(a1[ka]), x2 = splat<T>(a2[ka]), x3 = splat<T>(a3[ka]);
        s00 += x0 * b0, s01 += x0 * b1;
        s10 += x1 * b0, s11 += x1 * b1;
        s20 += x2 * b0, s21 += x2 * b1;
        s30 += x3 * b0, s31 += x3 * b1;
      }
      const V s[4][2] = {{s00, s01}, {s10, s11}, {s20, s21}, {s30, s31}};
      for (int i = 0; i < 4; ++i) {
        T* cp = c0 + i * ldc + col;
        for (int j = 0; j < 2; ++j) {
          store<T>(cp + j * L, accumulate ? load<T>(cp + j * L) + s[i][j] : s[i][j]);
        }
      }
    }
    for (; col < N; col += L) {
      const int64_t n = N - col < L ? N - col : L;
      V s0{}, s1{}, s2{}, s3{};
      const T* bp = b + col;
      for (int64_t k = 0; k < K; ++k, bp += ldb) {
        const V b0 = n == L ? load<T>(bp) : load_part<T>(bp, n, T(0));
        const int64_t ka = k * aks;
        s0 += a0[ka] * b0, s1 += a1[ka] * b0, s2 += a2[ka] * b0, s3 += a3[ka] * b0;
      }
      const V s[4] = {s0, s1, s2, s3};
      for (int i = 0; i < 4; ++i) {
        T* cp = c0 + i * ldc + col;
        const V old = accumulate ? load_part<T>(cp, n, T(0)) : V{};
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
        s0 += ar[k * aks] * (n == L ? load<T>(bp) : load_part<T>(bp, n, T(0)));
      }
      T* cp = c + r * ldc + col;
      const V old = accumulate ? load_part<T>(cp, n, T(0)) : V{};
      store_part<T>(cp, old + s0, n);
    }
  }
}

}  // namespace titan::simd
