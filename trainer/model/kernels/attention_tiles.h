// The per-task bodies of the fused causal attention (attention_kernel.cpp): one task is one
// (batch, kv head) pair with all the query heads that read it, so the key and value
// gradients of a kv head are summed by one thread without locks. Header-only because they
// are compiled three times, at vector width W (simd.h's TITAN_SIMD_KERNEL_WIDE: AVX-512,
// AVX2, baseline); attention_kernel.cpp is the only user.
#pragma once

#include <limits>

#include "trainer/model/kernels/simd.h"
#include "trainer/model/kernels/tile_gemm.h"

namespace titan::simd {

constexpr int64_t kQueryBlock = 32;

template <typename T>
struct AttentionShape {
  int64_t B, H, KV, S, D;
  T scale;
};

// A [B, heads, S, D] tensor: element (b, h, s, d) at p[b * sb + h * sh + s * ss + d].
template <typename T>
struct View {
  T* p;
  int64_t sb, sh, ss;
  TITAN_INLINE T* at(int64_t b, int64_t h) const { return p + b * sb + h * sh; }
};

template <typename T>
int64_t forward_workspace(const AttentionShape<T>& s) {
  return s.D * s.S + kQueryBlock * s.S + kQueryBlock;
}
template <typename T>
int64_t backward_workspace(const AttentionShape<T>& s) {
  return 4 * s.D * s.S + 2 * kQueryBlock * s.S;
}

// dst[d][j] = src row j, dim d, for j < S: the transposed copy that makes q k^T a plain
// row-major product.
// In blocks of 16 rows, d outer: each store run is 16 contiguous elements and the 16 source
// rows stay in L1 (row by row, every element went to its own cache line of dst: this copy
// was 9% of the attention backward at the 0.6B slice's S = 512, D = 64).
template <typename T>
TITAN_INLINE void pack_transposed(const T* src, int64_t ld, int64_t S, int64_t D, T* dst) {
  constexpr int64_t kRows = 16;
  int64_t j0 = 0;
  for (; j0 + kRows <= S; j0 += kRows) {
    const T* s0 = src + j0 * ld;
    for (int64_t d = 0; d < D; ++d) {
      T* out = dst + d * S + j0;
#pragma GCC unroll 16
      for (int64_t jj = 0; jj < kRows; ++jj) out[jj] = s0[jj * ld + d];
    }
  }
  for (int64_t j = j0; j < S; ++j) {
    for (int64_t d = 0; d < D; ++d) dst[d * S + j] = src[j * ld + d];
  }
}

// sum_d a[d] * b[d] in vector partial sums.
template <typename T, int W>
TITAN_INLINE T dot(const T* a, const T* b, int64_t n) {
  constexpr int L = lanes<T, W>;
  vec_t<T, W> acc{};
  int64_t d = 0;
  for (; d + L <= n; d += L) acc += load<T, W>(a + d) * load<T, W>(b + d);
  T tail = 0;
  for (; d < n; ++d) tail += a[d] * b[d];
  return hsum<T>(acc) + tail;
}

// Lanes 0, 1, 2, ... as T: compared with a count, a mask of the lanes below it. The softmax
// loops read a row's last partial vector whole and mask it where the vector lies inside the
// block's keys (computed scores, finite), rather than gather it lane by lane or (backward) run
// one exp per tail element: at the 0.6B slice's S = 512 that was ~10% of the forward and
// ~3% of the backward (1 thread, 25 -> 23 and 54 -> 52 ms per layer).
template <typename T, int W>
TITAN_INLINE vec_t<T, W> lane_index() {
  vec_t<T, W> v;
  for (int i = 0; i < lanes<T, W>; ++i) v[i] = T(i);
  return v;
}

// max of x[0, n); x readable up to `width` >= n.
template <typename T, int W>
TITAN_INLINE T row_max(const T* x, int64_t n, int64_t width) {
  constexpr int L = lanes<T, W>;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  vec_t<T, W> m = splat<T, W>(neg_inf);
  int64_t j = 0;
  for (; j + L <= n; j += L) m = vmax<T>(m, load<T, W>(x + j));
  if (j < n && j + L <= width) {
    m = vmax<T>(m, lane_index<T, W>() < T(n - j) ? load<T, W>(x + j) : splat<T, W>(neg_inf));
  } else if (j < n) {
    m = vmax<T>(m, load_part<T, W>(x + j, n - j, neg_inf));
  }
  return hmax<T>(m);
}

// x[j] = e^(x[j] * scale - shift) for j < n and 0 for n <= j < width; returns the sum.
template <typename T, int W>
TITAN_INLINE T exp_row(T* x, int64_t n, int64_t width, T scale, T shift) {
  constexpr int L = lanes<T, W>;
  vec_t<T, W> sum{};
  const auto sh = splat<T, W>(shift);
  int64_t j = 0;
  for (; j + L <= n; j += L) {
    const auto e = exp(load<T, W>(x + j) * scale - sh);
    sum += e;
    store<T>(x + j, e);
  }
  T tail = 0;
  if (j < n && j + L <= width) {
    const auto e = lane_index<T, W>() < T(n - j) ? exp(load<T, W>(x + j) * scale - sh) : vec_t<T, W>{};
    sum += e;
    store<T>(x + j, e);
    j += L;
  } else if (j < n) {
    T buf[L];
    store<T>(buf, exp(load_part<T, W>(x + j, n - j, T(0)) * scale - sh));
    for (int64_t t = 0; t < n - j; ++t) tail += (x[j + t] = buf[t]);
    j = n;
  }
  for (; j + L <= width; j += L) store<T>(x + j, vec_t<T, W>{});
  for (; j < width; ++j) x[j] = T(0);
  return hsum<T>(sum) + tail;
}

// Forward of one (b, g) task: for each query head h of kv head g and each block of rows,
// scores against keys [0, last row], row softmax (lse saved), o = P v / row sum.
template <typename T, int W>
TITAN_INLINE void attention_forward_body(AttentionShape<T> sh, View<T> q, View<T> k, View<T> v, View<T> o, T* lse,
                                         int64_t task, T* ws) {
  const int64_t b = task / sh.KV, g = task % sh.KV, S = sh.S, D = sh.D, rep = sh.H / sh.KV;
  T* kt = ws;
  T* sc = kt + D * S;
  T* inv = sc + kQueryBlock * S;
  pack_transposed<T>(k.at(b, g), k.ss, S, D, kt);
  const T* vp = v.at(b, g);
  for (int64_t h = g * rep; h < (g + 1) * rep; ++h) {
    const T* qp = q.at(b, h);
    T* op = o.at(b, h);
    T* lp = lse + (b * sh.H + h) * S;
    for (int64_t i0 = 0; i0 < S; i0 += kQueryBlock) {
      const int64_t rows = S - i0 < kQueryBlock ? S - i0 : kQueryBlock, keys = i0 + rows;
      tile_gemm<T, W>(rows, keys, D, qp + i0 * q.ss, q.ss, 1, kt, S, sc, S, false);
      for (int64_t r = 0; r < rows; ++r) {
        T* row = sc + r * S;
        const int64_t n = i0 + r + 1;
        const T m = row_max<T, W>(row, n, keys) * sh.scale;
        const T sum = exp_row<T, W>(row, n, keys, sh.scale, m);
        lp[i0 + r] = m + std::log(sum);
        inv[r] = T(1) / sum;
      }
      T* ob = op + i0 * o.ss;
      tile_gemm<T, W>(rows, D, keys, sc, S, 1, vp, v.ss, ob, o.ss, false);
      for (int64_t r = 0; r < rows; ++r) {
        T* orow = ob + r * o.ss;
        for (int64_t d = 0; d < D; ++d) orow[d] *= inv[r];
      }
    }
  }
}

// delta[b, h, s] = sum_d dO[b, h, s, d] o[b, h, s, d] (FlashAttention-2's D_i) for rows
// [begin, end) of the B * S rows, each with all its heads: the rows of a [B, S, H, D] layout
// are then read in memory order. Why a pass of its own: inside a task each row of o is a
// first touch 4 KB after the last (one row per head and position), and the row-by-row dot
// waited on those misses (6.6% of the backward at the 0.6B slice).
template <typename T, int W>
TITAN_INLINE void attention_delta_body(AttentionShape<T> sh, View<T> o, View<T> dout, T* delta, int64_t begin,
                                       int64_t end) {
  for (int64_t row = begin; row < end; ++row) {
    const int64_t b = row / sh.S, s = row % sh.S;
    for (int64_t h = 0; h < sh.H; ++h) {
      delta[(b * sh.H + h) * sh.S + s] = dot<T, W>(dout.at(b, h) + s * dout.ss, o.at(b, h) + s * o.ss, sh.D);
    }
  }
}

// Backward of one (b, g) task (FlashAttention-2's recurrences): P = e^(s * scale - lse),
// dP = dO v^T, dS = P (dP - delta) * scale with delta = rowsum(dO o) from attention_delta; dv += P^T dO, dk += dS^T q, dq = dS k.
template <typename T, int W>
TITAN_INLINE void attention_backward_body(AttentionShape<T> sh, View<T> q, View<T> k, View<T> v, View<T> dout,
                                          const T* lse, const T* delta, View<T> dq, View<T> dk, View<T> dv,
                                          int64_t task, T* ws) {
  const int64_t b = task / sh.KV, g = task % sh.KV, S = sh.S, D = sh.D, rep = sh.H / sh.KV;
  constexpr int L = lanes<T, W>;
  T* kt = ws;
  T* vt = kt + D * S;
  T* dk_acc = vt + D * S;
  T* dv_acc = dk_acc + S * D;
  T* p = dv_acc + S * D;
  T* dp = p + kQueryBlock * S;
  const T* kp = k.at(b, g);
  pack_transposed<T>(kp, k.ss, S, D, kt);
  pack_transposed<T>(v.at(b, g), v.ss, S, D, vt);
  for (int64_t i = 0; i < 2 * S * D; ++i) dk_acc[i] = T(0);
  for (int64_t h = g * rep; h < (g + 1) * rep; ++h) {
    const T* qp = q.at(b, h);
    const T* gp = dout.at(b, h);
    T* dqp = dq.at(b, h);
    const T* lp = lse + (b * sh.H + h) * S;
    const T* dlp = delta + (b * sh.H + h) * S;
    for (int64_t i0 = 0; i0 < S; i0 += kQueryBlock) {
      const int64_t rows = S - i0 < kQueryBlock ? S - i0 : kQueryBlock, keys = i0 + rows;
      const T* qb = qp + i0 * q.ss;
      const T* gb = gp + i0 * dout.ss;
      tile_gemm<T, W>(rows, keys, D, qb, q.ss, 1, kt, S, p, S, false);
      tile_gemm<T, W>(rows, keys, D, gb, dout.ss, 1, vt, S, dp, S, false);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t n = i0 + r + 1;
        const T delta = dlp[i0 + r];
        T* prow = p + r * S;
        T* dprow = dp + r * S;
        const auto sc = splat<T, W>(sh.scale), l = splat<T, W>(lp[i0 + r]), dl = splat<T, W>(delta);
        int64_t j = 0;
        for (; j + L <= n; j += L) {
          const auto e = exp(load<T, W>(prow + j) * sc - l);
          store<T>(prow + j, e);
          store<T>(dprow + j, e * (load<T, W>(dprow + j) - dl) * sc);
        }
        if (j < n && j + L <= keys) {
          const auto keep = lane_index<T, W>() < T(n - j);
          const auto e = exp(load<T, W>(prow + j) * sc - l);
          store<T>(prow + j, keep ? e : vec_t<T, W>{});
          store<T>(dprow + j, keep ? e * (load<T, W>(dprow + j) - dl) * sc : vec_t<T, W>{});
          j += L;
        }
        for (; j < n; ++j) {
          const T e = exp_scalar<T>(prow[j] * sh.scale - lp[i0 + r]);
          prow[j] = e;
          dprow[j] = e * (dprow[j] - delta) * sh.scale;
        }
        for (; j + L <= keys; j += L) store<T>(prow + j, vec_t<T, W>{}), store<T>(dprow + j, vec_t<T, W>{});
        for (; j < keys; ++j) prow[j] = dprow[j] = T(0);
      }
      tile_gemm<T, W>(keys, D, rows, p, 1, S, gb, dout.ss, dv_acc, D, true);
      tile_gemm<T, W>(keys, D, rows, dp, 1, S, qb, q.ss, dk_acc, D, true);
      tile_gemm<T, W>(rows, D, keys, dp, S, 1, kp, k.ss, dqp + i0 * dq.ss, dq.ss, false);
    }
  }
  T* dkp = dk.at(b, g);
  T* dvp = dv.at(b, g);
  for (int64_t j = 0; j < S; ++j) {
    for (int64_t d = 0; d < D; ++d) {
      dkp[j * dk.ss + d] = dk_acc[j * D + d];
      dvp[j * dv.ss + d] = dv_acc[j * D + d];
    }
  }
}

TITAN_SIMD_KERNEL_WIDE(attention_forward_task, attention_forward_body)
TITAN_SIMD_KERNEL_WIDE(attention_backward_task, attention_backward_body)
TITAN_SIMD_KERNEL_WIDE(attention_delta, attention_delta_body)

}  // namespace titan::simd
