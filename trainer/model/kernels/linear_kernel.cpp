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
    if (ctx->needs_input_grad(1)) dw = chosen_mm("linear.weight_grad", dy.t(), x2);
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

}  // namespace titan
