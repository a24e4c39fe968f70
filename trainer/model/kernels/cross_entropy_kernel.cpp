#include "trainer/model/kernels/cross_entropy_kernel.h"

#include <limits>

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include "common/error.h"
#include "trainer/model/kernels/fused_kernels.h"
#include "trainer/model/kernels/thread_choice.h"
#include "trainer/model/kernels/simd.h"

namespace titan {
namespace {

using namespace simd;

// Rows [begin, end): lse[r] = log sum_j e^x[r][j], loss[r] = lse[r] - x[r][label]. Each
// chunk's maximum is taken while the chunk is in L1 and the running sum rescaled when it
// rises, so the row is streamed from memory once.
template <typename T>
TITAN_INLINE void ce_forward_rows(const T* x, const int64_t* labels, T* lse, T* loss, int64_t V, int64_t begin,
                                  int64_t end) {
  using Vt = vec_t<T>;
  constexpr int L = lanes<T>;
  constexpr int64_t kChunk = 16 * L;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (int64_t r = begin; r < end; ++r) {
    const T* xr = x + r * V;
    T m = neg_inf;
    Vt sum{};
    for (int64_t c0 = 0; c0 < V; c0 += kChunk) {
      const int64_t c1 = c0 + kChunk < V ? c0 + kChunk : V;
      Vt mv = splat<T>(neg_inf);
      int64_t j = c0;
      for (; j + L <= c1; j += L) mv = vmax<T>(mv, load<T>(xr + j));
      if (j < c1) mv = vmax<T>(mv, load_part<T>(xr + j, c1 - j, neg_inf));
      const T cm = hmax<T>(mv);
      if (cm > m) {
        if (m != neg_inf) sum *= exp_scalar<T>(m - cm);
        m = cm;
      }
      const Vt mm = splat<T>(m);
      for (j = c0; j + L <= c1; j += L) sum += exp(load<T>(xr + j) - mm);
      if (j < c1) sum += exp(load_part<T>(xr + j, c1 - j, neg_inf) - mm);
    }
    lse[r] = m + std::log(hsum<T>(sum));
    loss[r] = lse[r] - xr[labels[r]];
  }
}

// dx[r][j] = (e^(x[r][j] - lse[r]) - [j == label]) * scale.
template <typename T>
TITAN_INLINE void ce_backward_rows(const T* x, const int64_t* labels, const T* lse, T scale, T* dx, int64_t V,
                                   int64_t begin, int64_t end) {
  constexpr int L = lanes<T>;
  for (int64_t r = begin; r < end; ++r) {
    const T* xr = x + r * V;
    T* dr = dx + r * V;
    const auto l = splat<T>(lse[r]);
    int64_t j = 0;
    for (; j + L <= V; j += L) store<T>(dr + j, exp(load<T>(xr + j) - l) * scale);
    if (j < V) store_part<T>(dr + j, exp(load_part<T>(xr + j, V - j, T(0)) - l) * scale, V - j);
    dr[labels[r]] -= scale;
  }
}

TITAN_SIMD_KERNEL(ce_forward, ce_forward_rows)
TITAN_SIMD_KERNEL(ce_backward, ce_backward_rows)

struct CrossEntropyFunction : public torch::autograd::Function<CrossEntropyFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits_in,
                               const torch::Tensor& labels_in, double normalizer) {
    const int64_t V = logits_in.size(-1);
    auto x = logits_in.reshape({-1, V}).contiguous();
    auto labels = labels_in.reshape({-1}).contiguous();
    const int64_t rows = x.size(0);
    auto lse = torch::empty({rows}, x.options()), loss = torch::empty({rows}, x.options());
    double total = 0;
    dispatch_float(x, [&](auto tag) {
      using T = decltype(tag);
      const T* xp = x.data_ptr<T>();
      const int64_t* lp = labels.data_ptr<int64_t>();
      T *sp = lse.data_ptr<T>(), *op = loss.data_ptr<T>();
      chosen_parallel_for("cross_entropy.forward", V, 0, rows, row_grain(V), [&](int64_t b, int64_t e) { ce_forward<T>(xp, lp, sp, op, V, b, e); });
      // Row losses summed in double in row order: the same value whatever the thread count.
      for (int64_t r = 0; r < rows; ++r) total += op[r];
    });
    ctx->save_for_backward({x, labels, lse});
    ctx->saved_data["normalizer"] = normalizer;
    ctx->saved_data["shape"] = logits_in.sizes().vec();
    return torch::scalar_tensor(total / normalizer, x.options());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto &x = saved[0], &labels = saved[1], &lse = saved[2];
    const int64_t rows = x.size(0), V = x.size(1);
    const double scale = grads[0].item<double>() / ctx->saved_data["normalizer"].toDouble();
    auto dx = torch::empty_like(x);
    dispatch_float(x, [&](auto tag) {
      using T = decltype(tag);
      const T *xp = x.data_ptr<T>(), *sp = lse.data_ptr<T>();
      const int64_t* lp = labels.data_ptr<int64_t>();
      T* dp = dx.data_ptr<T>();
      chosen_parallel_for("cross_entropy.backward", V, 0, rows, row_grain(V),
                       [&](int64_t b, int64_t e) { ce_backward<T>(xp, lp, sp, T(scale), dp, V, b, e); });
    });
    return {dx.view(ctx->saved_data["shape"].toIntVector()), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor fused_cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& labels, double normalizer) {
  TITAN_CHECK(fusable(logits) && labels.scalar_type() == torch::kInt64 &&
                  labels.numel() * logits.size(-1) == logits.numel(),
              "fused_cross_entropy_sum: needs float or double CPU logits [..., V] and int64 labels [...], got ",
              logits.sizes(), " ", logits.scalar_type(), " and ", labels.sizes(), " ", labels.scalar_type());
  const int64_t V = logits.size(-1);
  auto flat = labels.reshape({-1}).contiguous();
  const int64_t* lp = flat.data_ptr<int64_t>();
  for (int64_t i = 0; i < flat.numel(); ++i) {
    TITAN_CHECK(lp[i] >= 0 && lp[i] < V, "fused_cross_entropy_sum: label ", lp[i], " at position ", i,
                " lies outside the vocabulary [0, ", V, ")");
  }
  return CrossEntropyFunction::apply(logits, labels, normalizer);
}

}  // namespace titan
