#include "trainer/model/kernels/linear_kernel.h"

#include <torch/csrc/autograd/custom_function.h>

#include "common/error.h"
#include "trainer/model/kernels/fused_kernels.h"
#include "trainer/model/kernels/thread_choice.h"

namespace titan {
namespace {

// a @ b on the thread count chosen for this (M, K, N) and operand layout. The site names
// keep the three products of a layer apart: their layouts differ, and so does their speed.
torch::Tensor chosen_mm(const char* site, const torch::Tensor& a, const torch::Tensor& b) {
  torch::Tensor out;
  with_chosen_threads(site, a.size(0), a.size(1), b.size(1), [&] { out = torch::mm(a, b); });
  return out;
}

torch::Tensor rows_of(const torch::Tensor& t) { return t.reshape({-1, t.size(-1)}); }

// Whether w's gradient can take dy^T x in place (grad += dy^T x in one GEMM with beta 1)
// instead of autograd's AccumulateGrad adding a fresh product to it: w is a leaf whose
// gradient is already allocated (the optimizer's flat buffer, zeroed before each step), of
// w's shape and dtype, no hook of any kind could see or change the product on its way, and
// no graph of the backward is being built. Why: the product then skips OpenBLAS's zeroing of
// a fresh output, the add_ pass over it and its allocation (at the 0.6B-shaped slice, about
// 200 MB of each per step). Onto a zeroed gradient the bits are the same (OpenBLAS adds each
// K panel into C with beta 1 as it does after zeroing C for beta 0); onto a nonzero one
// (gradient accumulation) the sum is the same, rounded in another order.
bool accumulates_in_place(const torch::Tensor& w) {
  namespace impl = torch::autograd::impl;
  if (!w.is_leaf() || !w.requires_grad() || torch::GradMode::is_enabled()) return false;
  const auto& g = w.grad();
  if (!g.defined() || g.sizes() != w.sizes() || g.scalar_type() != w.scalar_type() || !g.is_contiguous() ||
      g.device() != w.device()) {
    return false;
  }
  if (!impl::hooks(w).empty()) return false;
  const auto acc = impl::try_get_grad_accumulator(w);
  return acc && acc->pre_hooks().empty() && acc->post_hooks().empty();
}

struct LinearFunction : public torch::autograd::Function<LinearFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w) {
    auto x2 = rows_of(x);
    auto y = chosen_mm("linear.forward", x2, w.t());
    ctx->save_for_backward({x2, w});
    ctx->saved_data["shape"] = x.sizes().vec();
    auto shape = x.sizes().vec();
    shape.back() = w.size(0);
    return y.view(shape);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto &x2 = saved[0], &w = saved[1];
    auto dy = rows_of(grads[0]);
    torch::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) {
      dx = chosen_mm("linear.input_grad", dy, w).view(ctx->saved_data["shape"].toIntVector());
    }
    if (ctx->needs_input_grad(1)) {
      if (accumulates_in_place(w)) {
        auto g = w.grad();
        // An undefined gradient for w: autograd then skips its AccumulateGrad, the sum is done.
        with_chosen_threads("linear.weight_grad_in_place", dy.size(1), dy.size(0), x2.size(1),
                            [&] { g.addmm_(dy.t(), x2); });
      } else {
        dw = chosen_mm("linear.weight_grad", dy.t(), x2);
      }
    }
    return {dx, dw};
  }
};

}  // namespace

torch::Tensor fused_linear(const torch::Tensor& x, const torch::Tensor& weight) {
  TITAN_CHECK(fusable(x) && weight.scalar_type() == x.scalar_type() && weight.dim() == 2 && x.dim() >= 1 &&
                  x.size(-1) == weight.size(1),
              "fused_linear: needs float or double CPU x [..., in] and weight [out, in] of one dtype, got x ",
              x.sizes(), " ", x.scalar_type(), " and weight ", weight.sizes(), " ", weight.scalar_type());
  return LinearFunction::apply(x, weight);
}

bool linear_weight_grad_in_place(const torch::Tensor& w) { return accumulates_in_place(w); }

}  // namespace titan
