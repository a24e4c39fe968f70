#include "trainer/model/kernels/swiglu_kernel.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include "common/error.h"
#include "trainer/model/kernels/fused_kernels.h"
#include "trainer/model/kernels/thread_choice.h"
#include "trainer/model/kernels/simd.h"

namespace titan {
namespace {

using namespace simd;

// y = a / (1 + e^-a) * b on elements [begin, end), in vectors of W bytes.
template <typename T, int W>
TITAN_INLINE void swiglu_forward_range(const T* a, const T* b, T* y, int64_t begin, int64_t end) {
  constexpr int L = lanes<T, W>;
  int64_t i = begin;
  for (; i + L <= end; i += L) {
    const auto av = load<T, W>(a + i);
    store<T>(y + i, av / (T(1) + exp(-av)) * load<T, W>(b + i));
  }
  for (; i < end; ++i) y[i] = a[i] / (T(1) + exp_scalar<T>(-a[i])) * b[i];
}

// With s = sigmoid(a): da = g b s (1 + a (1 - s)), db = g a s.
template <typename T, int W>
TITAN_INLINE void swiglu_backward_range(const T* a, const T* b, const T* g, T* da, T* db, int64_t begin,
                                        int64_t end) {
  constexpr int L = lanes<T, W>;
  int64_t i = begin;
  for (; i + L <= end; i += L) {
    const auto av = load<T, W>(a + i), bv = load<T, W>(b + i), gv = load<T, W>(g + i);
    const auto s = T(1) / (T(1) + exp(-av));
    store<T>(da + i, gv * bv * s * (T(1) + av * (T(1) - s)));
    store<T>(db + i, gv * (av * s));
  }
  for (; i < end; ++i) {
    const T s = T(1) / (T(1) + exp_scalar<T>(-a[i]));
    da[i] = g[i] * b[i] * s * (T(1) + a[i] * (T(1) - s));
    db[i] = g[i] * (a[i] * s);
  }
}

// AVX-512 where the CPU has it: the exp and the division make this kernel compute-bound at
// one thread, and 16-float vectors halve its instructions.
TITAN_SIMD_KERNEL_WIDE(swiglu_forward, swiglu_forward_range)
TITAN_SIMD_KERNEL_WIDE(swiglu_backward, swiglu_backward_range)

constexpr int64_t kGrain = 16384;

struct SwigluFunction : public torch::autograd::Function<SwigluFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& a_in,
                               const torch::Tensor& b_in) {
    auto a = a_in.contiguous(), b = b_in.contiguous();
    auto y = torch::empty_like(a);
    dispatch_float(a, [&](auto tag) {
      using T = decltype(tag);
      const T *ap = a.data_ptr<T>(), *bp = b.data_ptr<T>();
      T* yp = y.data_ptr<T>();
      chosen_parallel_for("swiglu.forward", 0, 0, a.numel(), kGrain, [&](int64_t s, int64_t e) { swiglu_forward<T>(ap, bp, yp, s, e); });
    });
    ctx->save_for_backward({a, b});
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto &a = saved[0], &b = saved[1];
    auto g = grads[0].contiguous();
    auto da = torch::empty_like(a), db = torch::empty_like(b);
    dispatch_float(a, [&](auto tag) {
      using T = decltype(tag);
      const T *ap = a.data_ptr<T>(), *bp = b.data_ptr<T>(), *gp = g.data_ptr<T>();
      T *dap = da.data_ptr<T>(), *dbp = db.data_ptr<T>();
      chosen_parallel_for("swiglu.backward", 0, 0, a.numel(), kGrain,
                       [&](int64_t s, int64_t e) { swiglu_backward<T>(ap, bp, gp, dap, dbp, s, e); });
    });
    return {da, db};
  }
};

}  // namespace

torch::Tensor fused_swiglu(const torch::Tensor& a, const torch::Tensor& b) {
  TITAN_CHECK(fusable(a) && a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes(),
              "fused_swiglu: needs float or double CPU tensors of one shape and dtype, got ", a.sizes(), " ",
              a.scalar_type(), " and ", b.sizes(), " ", b.scalar_type());
  return SwigluFunction::apply(a, b);
}

}  // namespace titan
