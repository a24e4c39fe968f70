#include "trainer/model/kept_ops.h"

#include <ATen/core/custom_class.h>
#include <torch/csrc/autograd/custom_function.h>

namespace titan {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct KeptLinearFunction : public torch::autograd::Function<KeptLinearFunction> {
  // `kept` comes as an IValue, not a tensor argument: autograd would return an input tensor as
  // a fresh view of itself, where the kept tensor itself is the output.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const c10::IValue& kept) {
    ctx->save_for_backward({x, w});
    return kept.toTensor();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1];
    auto dy = grads[0].reshape({-1, grads[0].size(-1)});
    torch::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) dx = dy.mm(w).view(x.sizes());
    // (x^T dy)^T, the order the composite matmul's backward takes for the transposed weight.
    if (ctx->needs_input_grad(1)) dw = x.reshape({-1, x.size(-1)}).t().mm(dy).t();
    return {dx, dw, torch::Tensor()};
  }
};

struct FnHolder : torch::CustomClassHolder {
  explicit FnHolder(TensorsFn f) : fn(std::move(f)) {}
  TensorsFn fn;
};

struct KeptRecomputedFunction : public torch::autograd::Function<KeptRecomputedFunction> {
  static torch::Tensor forward(AutogradContext* ctx, torch::TensorList inputs, const c10::IValue& kept,
                               c10::IValue holder) {
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["fn"] = std::move(holder);
    return kept.toTensor();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto fn = c10::static_intrusive_pointer_cast<FnHolder>(ctx->saved_data["fn"].toCapsule());
    std::vector<torch::Tensor> in;
    for (const auto& t : ctx->get_saved_variables()) in.push_back(t.detach().requires_grad_(t.requires_grad()));
    std::vector<torch::Tensor> wanted;
    for (const auto& t : in)
      if (t.requires_grad()) wanted.push_back(t);
    variable_list out(in.size() + 2);
    if (wanted.empty()) return out;
    torch::Tensor y;
    {
      torch::AutoGradMode on(true);
      y = fn->fn(in);
    }
    auto g = torch::autograd::grad({y}, wanted, {grads[0]});
    for (size_t i = 0, j = 0; i < in.size(); ++i)
      if (in[i].requires_grad()) out[i] = g[j++];
    return out;
  }
};

}  // namespace

torch::Tensor kept_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& kept) {
  return KeptLinearFunction::apply(x, w, c10::IValue(kept));
}

torch::Tensor kept_recomputed(const std::vector<torch::Tensor>& inputs, const torch::Tensor& kept, TensorsFn f) {
  auto holder = c10::IValue::make_capsule(c10::make_intrusive<FnHolder>(std::move(f)));
  return KeptRecomputedFunction::apply(torch::TensorList(inputs), c10::IValue(kept), holder);
}

}  // namespace titan
