#include "parallel/activation_checkpoint.h"

#include <ATen/core/custom_class.h>
#include <torch/csrc/autograd/custom_function.h>

#include "common/error.h"

namespace titan {
namespace {

// Keeps the forward function alive inside the autograd graph until backward has run.
struct ForwardHolder : torch::CustomClassHolder {
  explicit ForwardHolder(ForwardFn f) : fn(std::move(f)) {}
  ForwardFn fn;
};

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               c10::IValue holder) {
    auto fn = c10::static_intrusive_pointer_cast<ForwardHolder>(holder.toCapsule());
    ctx->saved_data["fn"] = holder;
    ctx->save_for_backward({x});
    return fn->fn(x);  // autograd records nothing inside a custom function's forward
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto fn = c10::static_intrusive_pointer_cast<ForwardHolder>(ctx->saved_data["fn"].toCapsule());
    auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::Tensor out;
    {
      torch::AutoGradMode enable(true);
      out = fn->fn(x);
    }
    // Gradients of the block's parameters flow on from here (to FSDP when it is applied).
    torch::autograd::backward({out}, {grads[0]});
    return {x.grad(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor checkpoint(const ForwardFn& fn, const torch::Tensor& x) {
  auto holder = c10::IValue::make_capsule(c10::make_intrusive<ForwardHolder>(fn));
  return CheckpointFunction::apply(x, holder);
}

BlockWrapFn activation_checkpoint_wrapper(int64_t every) {
  TITAN_CONFIG_CHECK(every >= 1, "activation_checkpoint.selective_every must be >= 1, got ", every);
  const int64_t n = every;
  return [n](int64_t layer, const torch::Tensor& x, const ForwardFn& inner) {
    if ((layer + 1) % n != 0 || !torch::GradMode::is_enabled()) return inner(x);
    return checkpoint(inner, x);
  };
}

}  // namespace titan
