#include "trainer/model/kernels/rms_norm_kernel.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include "common/error.h"
#include "trainer/model/kernels/fused_kernels.h"
#include "trainer/model/kernels/thread_choice.h"
#include "trainer/model/kernels/simd.h"

namespace titan {
namespace {

using namespace simd;

template <typename T>
TITAN_INLINE T sum_squares(const T* x, int64_t n) {
  constexpr int L = lanes<T>;
  vec_t<T> acc{};
  int64_t j = 0;
  for (; j + L <= n; j += L) {
    const auto v = load<T>(x + j);
    acc += v * v;
  }
  if (j < n) {
    const auto v = load_part<T>(x + j, n - j, T(0));
    acc += v * v;
  }
  return hsum<T>(acc);
}

// Where row r of x starts: rows come in groups of `inner` (x's second-to-last dim) at
// `inner_stride`, the groups at `outer_stride` (the dims before, collapsed). Why not a
// contiguous copy: the q/k of a fused q/k/v projection are column slices of one
// [tokens, q + k + v] product, and their QK-norm would copy them first.
struct Rows {
  int64_t inner, inner_stride, outer_stride;
  TITAN_INLINE int64_t at(int64_t r) const { return (r / inner) * outer_stride + (r % inner) * inner_stride; }
};

// Rows [begin, end) of x [rows, n] (laid out as xm says): y = w * (x * rstd), y contiguous,
// rstd saved for backward.
template <typename T>
TITAN_INLINE void rms_forward_rows(const T* x, Rows xm, const T* w, T* y, T* rstd, int64_t n, T eps, int64_t begin,
                                   int64_t end) {
  constexpr int L = lanes<T>;
  for (int64_t r = begin; r < end; ++r) {
    const T* xr = x + xm.at(r);
    T* yr = y + r * n;
    const T s = T(1) / std::sqrt(sum_squares<T>(xr, n) / T(n) + eps);
    rstd[r] = s;
    int64_t j = 0;
    for (; j + L <= n; j += L) store<T>(yr + j, load<T>(w + j) * (load<T>(xr + j) * s));
    for (; j < n; ++j) yr[j] = w[j] * (xr[j] * s);
  }
}

// dn = dy * w, n = x * rstd: dx = rstd * (dn - n * mean(dn * n)); dw += dy * n, summed in
// double: the sum runs over every row (token, or token x head for QK-norms), and its rounding
// would otherwise grow with the row count.
template <typename T>
TITAN_INLINE void rms_backward_rows(const T* x, Rows xm, const T* w, const T* dy, const T* rstd, T* dx, double* dw,
                                    int64_t n, int64_t begin, int64_t end) {
  constexpr int L = lanes<T>;
  for (int64_t r = begin; r < end; ++r) {
    const T* xr = x + xm.at(r);
    const T* gr = dy + r * n;
    T* dxr = dx + r * n;
    const T s = rstd[r];
    vec_t<T> acc{};
    int64_t j = 0;
    for (; j + L <= n; j += L) acc += load<T>(gr + j) * load<T>(w + j) * load<T>(xr + j);
    T dot = hsum<T>(acc);
    for (; j < n; ++j) dot += gr[j] * w[j] * xr[j];
    const T c = dot * s * s / T(n);  // mean(dn * n) / rstd
    for (j = 0; j + L <= n; j += L) {
      const auto xv = load<T>(xr + j), gv = load<T>(gr + j);
      store<T>(dxr + j, (gv * load<T>(w + j) - xv * c) * s);
      accumulate_f64<T>(dw + j, gv * (xv * s));
    }
    for (; j < n; ++j) {
      dxr[j] = (gr[j] * w[j] - xr[j] * c) * s;
      dw[j] += double(gr[j] * (xr[j] * s));
    }
  }
}

TITAN_SIMD_KERNEL(rms_forward, rms_forward_rows)
TITAN_SIMD_KERNEL(rms_backward, rms_backward_rows)

// x's rows as Rows, if its last dim is contiguous and the dims before the last two collapse
// into one (always so for a contiguous x).
bool rows_of(const torch::Tensor& x, Rows* m) {
  const int64_t d = x.dim();
  if (d == 0 || x.stride(-1) != 1) return false;
  if (d == 1) {
    *m = {1, x.size(0), x.size(0)};
    return true;
  }
  for (int64_t i = 0; i + 3 < d; ++i) {
    if (x.size(i) > 1 && x.stride(i) != x.stride(i + 1) * x.size(i + 1)) return false;
  }
  *m = {std::max<int64_t>(x.size(-2), 1), x.stride(-2), d > 2 ? x.stride(-3) : 0};
  return true;
}

struct RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x_in,
                               const torch::Tensor& w_in, double eps) {
    Rows xm;
    auto x = x_in;
    if (!rows_of(x, &xm)) {
      x = x_in.contiguous();
      rows_of(x, &xm);
    }
    auto w = w_in.contiguous();
    const int64_t n = x.size(-1), rows = x.numel() / std::max<int64_t>(n, 1);
    auto y = torch::empty(x.sizes(), x.options());
    auto rstd = torch::empty({rows}, x.options());
    dispatch_float(x, [&](auto tag) {
      using T = decltype(tag);
      const T *xp = x.data_ptr<T>(), *wp = w.data_ptr<T>();
      T *yp = y.data_ptr<T>(), *sp = rstd.data_ptr<T>();
      chosen_parallel_for("rms_norm.forward", n, 0, rows, row_grain(n), [&](int64_t b, int64_t e) {
        rms_forward<T>(xp, xm, wp, yp, sp, n, T(eps), b, e);
      });
    });
    ctx->save_for_backward({x, w, rstd});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto &x = saved[0], &w = saved[1], &rstd = saved[2];
    auto dy = grads[0].contiguous();
    const int64_t n = x.size(-1), rows = rstd.numel();
    Rows xm;
    rows_of(x, &xm);  // as in forward: x was saved with rows it maps
    auto dx = torch::empty(x.sizes(), x.options());
    // One weight-gradient row per chunk of rows, summed after the parallel loop.
    const int64_t grain = row_grain(n);
    const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), (rows + grain - 1) / grain));
    auto dw_parts = torch::zeros({chunks, n}, x.options().dtype(torch::kFloat64));
    dispatch_float(x, [&](auto tag) {
      using T = decltype(tag);
      const T *xp = x.data_ptr<T>(), *wp = w.data_ptr<T>(), *gp = dy.data_ptr<T>(), *sp = rstd.data_ptr<T>();
      T* dxp = dx.data_ptr<T>();
      double* dwp = dw_parts.data_ptr<double>();
      const int64_t per = (rows + chunks - 1) / chunks;
      chosen_parallel_for("rms_norm.backward", n * rows, 0, chunks, 1, [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) {
          rms_backward<T>(xp, xm, wp, gp, sp, dxp, dwp + c * n, n, c * per, std::min(rows, (c + 1) * per));
        }
      });
    });
    auto dw = (chunks == 1 ? dw_parts.view({n}) : dw_parts.sum(0)).to(x.scalar_type());
    return {dx, dw, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor fused_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  TITAN_CHECK(fusable(x) && x.scalar_type() == weight.scalar_type() && weight.dim() == 1 &&
                  weight.size(0) == x.size(-1),
              "fused_rms_norm: needs float or double CPU tensors of one dtype, weight [", x.size(-1),
              "], got x ", x.sizes(), " ", x.scalar_type(), " and weight ", weight.sizes(), " ",
              weight.scalar_type());
  return RmsNormFunction::apply(x, weight, eps);
}

}  // namespace titan
