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
std::atomic<bool> records_fused_ce{false};
std::atomic<bool> records_attention{false};
std::atomic<bool> records_grouped_mm{false};

// A stand-in backward's gradients under kFusedKernelGradsScope, as its outputs.
torch::autograd::variable_list grads_in_scope(const std::function<torch::autograd::variable_list()>& make) {
  RECORD_USER_SCOPE(kFusedKernelGradsScope);
  torch::autograd::variable_list grads = make();
  if (guard.isActive()) guard.setOutputs(std::vector<c10::IValue>(grads.begin(), grads.end()));
  return grads;
}

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
    const bool linear = ctx->saved_data["linear"].toBool();
    torch::autograd::variable_list grads = grads_in_scope([&] {
      torch::autograd::variable_list g;
      for (size_t i = 0; i < inputs.size(); ++i) {
        // The real linear sums the weight's gradient in place where it can: autograd then has
        // nothing to accumulate (no add_), as in the run being recorded.
        const bool in_place = linear && i == 1 && linear_weight_grad_in_place(inputs[i]);
        g.push_back(ctx->needs_input_grad(i) && !in_place ? torch::empty_like(inputs[i]) : torch::Tensor());
      }
      return g;
    });
    grads.emplace_back();  // the output function
    grads.emplace_back();  // the linear flag
    return grads;
  }
};

// A composite's stand-in whose output (`out_sizes` in the first input's options) and input
// gradients are new contiguous tensors, as the composite's products and their backward (sums,
// concatenations, stacks) return them.
struct MetaContiguousFunction : public torch::autograd::Function<MetaContiguousFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::TensorList inputs,
                               c10::IntArrayRef out_sizes) {
    ctx->save_for_backward(inputs.vec());
    return torch::empty(out_sizes, inputs[0].options());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list) {
    const auto in = ctx->get_saved_variables();
    torch::autograd::variable_list grads;
    for (size_t i = 0; i < in.size(); ++i)
      grads.push_back(ctx->needs_input_grad(i) ? torch::empty(in[i].sizes(), in[i].options()) : torch::Tensor());
    grads.emplace_back();  // the output's sizes
    return grads;
  }
};

// One layer of a group that reads one x (meta_shared_input_linears): the product's stand-in
// and, but for the last layer, x handed on to the next one as a new tensor. x then has one
// consumer in the graph, and its gradient comes back through the chain with no sum by
// autograd, as in the real kernel, which sums the layers' input gradients in its GEMMs. The
// handed-on x is a view of x: the real kernel keeps x once, and a fresh tensor was a storage
// of its own to the memory walk, saved by the next product until its backward (+6.3 MB,
// about 12%, on the debug model's step).
struct MetaLinearLinkFunction : public torch::autograd::Function<MetaLinearLinkFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const torch::Tensor& w, bool hand_on, const c10::IValue& kept) {
    ctx->save_for_backward({x, w});
    auto shape = x.sizes().vec();
    shape.back() = w.size(0);
    // A product kept by op-level activation checkpointing is reused as the very tensor, so
    // that the memory walk sees it live from the forward to its use in the recompute.
    torch::autograd::variable_list out = {kept.isTensor() ? kept.toTensor() : torch::empty(shape, x.options())};
    if (hand_on) out.push_back(x.view_as(x));
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list) {
    auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1];
    torch::autograd::variable_list grads = grads_in_scope([&]() -> torch::autograd::variable_list {
      return {ctx->needs_input_grad(0) ? torch::empty_like(x) : torch::Tensor(),
              ctx->needs_input_grad(1) && !linear_weight_grad_in_place(w) ? torch::empty_like(w) : torch::Tensor()};
    });
    grads.insert(grads.end(), {torch::Tensor(), torch::Tensor()});
    return grads;
  }
};

}  // namespace

std::vector<torch::Tensor> meta_shared_input_linears(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                                     const std::vector<OpSaveAction>& actions) {
  std::vector<torch::Tensor> ys;
  torch::Tensor cur = x;
  for (size_t i = 0; i < weights.size(); ++i) {
    const OpSaveAction act = actions.empty() ? OpSaveAction::kRun : actions[i];
    c10::IValue kept;
    if (act == OpSaveAction::kReuse) kept = op_save_take(SavedOp::kLinear)[0];
    KeptOutputScope reused(act == OpSaveAction::kReuse);
    RECORD_FUNCTION(kFusedLinearScope, std::vector<c10::IValue>({cur, weights[i]}));
    auto out = MetaLinearLinkFunction::apply(cur, weights[i], i + 1 < weights.size(), kept);
    // The product is what the kernel writes (the handed-on x is a view of x, not an output).
    if (guard.isActive()) guard.setOutputs(std::vector<c10::IValue>{out[0]});
    ys.push_back(out[0]);
    if (act == OpSaveAction::kKeep) op_save_keep(SavedOp::kLinear, {out[0]});
    if (out.size() > 1) cur = out[1];
  }
  return ys;
}

bool meta_records_attention_kernel() { return records_attention.load(std::memory_order_relaxed); }
void set_meta_records_attention_kernel(bool on) { records_attention.store(on, std::memory_order_relaxed); }

// The composite's output: its product with v, [B, H, S, v's head size].
torch::Tensor meta_attention_stand_in(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const std::vector<torch::Tensor> in{q, k, v};
  const std::vector<int64_t> out{q.size(0), q.size(1), q.size(2), v.size(3)};
  return MetaContiguousFunction::apply(torch::TensorList(in), c10::IntArrayRef(out));
}

bool meta_records_grouped_matmul_kernel() { return records_grouped_mm.load(std::memory_order_relaxed); }
void set_meta_records_grouped_matmul_kernel(bool on) { records_grouped_mm.store(on, std::memory_order_relaxed); }

torch::Tensor meta_grouped_matmul_stand_in(const torch::Tensor& x, const torch::Tensor& w) {
  const std::vector<torch::Tensor> in{x, w};
  const std::vector<int64_t> out{x.size(0), w.size(1)};
  return MetaContiguousFunction::apply(torch::TensorList(in), c10::IntArrayRef(out));
}

bool meta_records_fused_kernels() { return records_fused.load(std::memory_order_relaxed); }
void set_meta_records_fused_kernels(bool on) { records_fused.store(on, std::memory_order_relaxed); }
bool meta_records_fused_cross_entropy() { return records_fused_ce.load(std::memory_order_relaxed); }
void set_meta_records_fused_cross_entropy(bool on) { records_fused_ce.store(on, std::memory_order_relaxed); }

torch::Tensor meta_kernel(const char* scope, const std::vector<c10::IValue>& inputs,
                          const std::vector<torch::Tensor>& differentiable, const std::function<torch::Tensor()>& output) {
  RECORD_FUNCTION(scope, inputs);
  torch::Tensor out = MetaKernelFunction::apply(torch::TensorList(differentiable), output,
                                                std::strcmp(scope, kFusedLinearScope) == 0);
  // What the kernel writes, for the recorder (a scope's outputs are whatever it is given).
  if (guard.isActive()) guard.setOutputs(std::vector<c10::IValue>{out});
  return out;
}

}  // namespace titan
