#include "trainer/model/kernels/meta_kernel.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <atomic>
#include <cstring>

#include "trainer/model/kernels/fused_kernels.h"
#include "trainer/model/kernels/linear_kernel.h"

namespace titan {
namespace {

std::atomic<bool> records_fused{false};

struct MetaKernelFunction : public torch::autograd::Function<MetaKernelFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::TensorList inputs,
                               const std::function<torch::Tensor()>& output, bool linear) {
    std::vector<torch::Tensor> like;
    for (const auto& t : inputs) like.push_back(t);
    ctx->save_for_backward(like);
    ctx->saved_data["linear"] = linear;
    return output();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list) {
    auto inputs = ctx->get_saved_variables();
    torch::autograd::variable_list grads;
    const bool linear = ctx->saved_data["linear"].toBool();
    for (size_t i = 0; i < inputs.size(); ++i) {
      // The real linear sums the weight's gradient in place where it can: autograd then has
      // nothing to accumulate (no add_), as in the run being recorded.
      const bool in_place = linear && i == 1 && linear_weight_grad_in_place(inputs[i]);
      grads.push_back(ctx->needs_input_grad(i) && !in_place ? torch::empty_like(inputs[i]) : torch::Tensor());
    }
    grads.emplace_back();  // the output function
    grads.emplace_back();  // the linear flag
    return grads;
  }
};

}  // namespace

bool meta_records_fused_kernels() { return records_fused.load(std::memory_order_relaxed); }
void set_meta_records_fused_kernels(bool on) { records_fused.store(on, std::memory_order_relaxed); }

torch::Tensor meta_kernel(const char* scope, const std::vector<c10::IValue>& inputs,
                          const std::vector<torch::Tensor>& differentiable, const std::function<torch::Tensor()>& output) {
  RECORD_FUNCTION(scope, inputs);
  return MetaKernelFunction::apply(torch::TensorList(differentiable), output,
                                   std::strcmp(scope, kFusedLinearScope) == 0);
}

}  // namespace titan
