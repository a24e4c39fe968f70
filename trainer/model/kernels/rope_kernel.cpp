#include "trainer/model/kernels/rope_kernel.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include "common/error.h"
#include "trainer/model/kernels/fused_kernels.h"
#include "trainer/model/kernels/thread_choice.h"
#include "trainer/model/kernels/simd.h"

namespace titan {
namespace {

using namespace simd;

// Row r = (b * H + h) * S + s of a [B, H, S, D] tensor with strides st[0..2] (last dim 1).
struct RowMap {
  int64_t H, S, st[3];
  TITAN_INLINE int64_t offset(int64_t r) const {
    const int64_t s = r % S, bh = r / S;
    return (bh / H) * st[0] + (bh % H) * st[1] + s * st[2];
  }
};

// forward (sign = +1): y1 = x1 c1 - x2 s1, y2 = x2 c2 + x1 s2 on the two halves of each row.
// backward (sign = -1): dx1 = g1 c1 + g2 s2, dx2 = g2 c2 - g1 s1.
template <typename T>
TITAN_INLINE void rope_rows(const T* x, RowMap xm, T* y, RowMap ym, const T* cos, const T* sin, int64_t D,
                            bool backward, int64_t begin, int64_t end) {
  constexpr int L = lanes<T>;
  const int64_t half = D / 2;
  for (int64_t r = begin; r < end; ++r) {
    const T* xr = x + xm.offset(r);
    T* yr = y + ym.offset(r);
    const T* c = cos + (r % xm.S) * D;
    const T* s = sin + (r % xm.S) * D;
    int64_t j = 0;
    for (; j + L <= half; j += L) {
      const auto x1 = load<T>(xr + j), x2 = load<T>(xr + half + j);
      const auto c1 = load<T>(c + j), c2 = load<T>(c + half + j);
      const auto s1 = load<T>(s + j), s2 = load<T>(s + half + j);
      if (backward) {
        store<T>(yr + j, x1 * c1 + x2 * s2);
        store<T>(yr + half + j, x2 * c2 - x1 * s1);
      } else {
        store<T>(yr + j, x1 * c1 - x2 * s1);
        store<T>(yr + half + j, x2 * c2 + x1 * s2);
      }
    }
    for (; j < half; ++j) {
      const T x1 = xr[j], x2 = xr[half + j];
      if (backward) {
        yr[j] = x1 * c[j] + x2 * s[half + j];
        yr[half + j] = x2 * c[half + j] - x1 * s[j];
      } else {
        yr[j] = x1 * c[j] - x2 * s[j];
        yr[half + j] = x2 * c[half + j] + x1 * s[half + j];
      }
    }
  }
}

TITAN_SIMD_KERNEL(rope_kernel, rope_rows)

RowMap row_map(const torch::Tensor& t) { return {t.size(1), t.size(2), {t.stride(0), t.stride(1), t.stride(2)}}; }

// y (allocated with x's layout) = rope(x) or its transpose for the gradient.
torch::Tensor run_rope(const torch::Tensor& x_in, const torch::Tensor& cos, const torch::Tensor& sin,
                       bool backward) {
  auto x = x_in.stride(-1) == 1 ? x_in : x_in.contiguous();
  auto y = torch::empty_like(x);
  if (y.stride(-1) != 1) y = torch::empty(x.sizes(), x.options());
  const int64_t D = x.size(3), rows = x.numel() / std::max<int64_t>(D, 1);
  auto c = cos.to(x.scalar_type()).contiguous(), s = sin.to(x.scalar_type()).contiguous();
  dispatch_float(x, [&](auto tag) {
    using T = decltype(tag);
    const T *xp = x.data_ptr<T>(), *cp = c.data_ptr<T>(), *sp = s.data_ptr<T>();
    T* yp = y.data_ptr<T>();
    const RowMap xm = row_map(x), ym = row_map(y);
    chosen_parallel_for(backward ? "rope.backward" : "rope.forward", D, 0, rows, row_grain(D), [&](int64_t b, int64_t e) {
      rope_kernel<T>(xp, xm, yp, ym, cp, sp, D, backward, b, e);
    });
  });
  return y;
}

struct RopeFunction : public torch::autograd::Function<RopeFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& cos, const torch::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return run_rope(x, cos, sin, false);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    return {run_rope(grads[0], saved[0], saved[1], true), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor fused_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  TITAN_CHECK(fusable(x) && x.dim() == 4 && x.size(3) % 2 == 0 && cos.dim() == 2 && cos.size(0) == x.size(2) &&
                  cos.size(1) == x.size(3) && sin.sizes() == cos.sizes(),
              "fused_rope: needs x [B, H, S, D] (float or double, CPU, even D) and cos/sin [S, D], got x ",
              x.sizes(), " ", x.scalar_type(), ", cos ", cos.sizes(), ", sin ", sin.sizes());
  TITAN_CHECK(!cos.requires_grad() && !sin.requires_grad(), "fused_rope: the cos/sin tables take no gradient");
  return RopeFunction::apply(x, cos, sin);
}

}  // namespace titan
