#include "trainer/model/kernels/linear_kernel.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/custom_function.h>

#include "common/error.h"
#include "trainer/model/hooks/op_save_hook.h"
#include "trainer/model/kernels/fused_kernels.h"
#include "trainer/model/kernels/thread_choice.h"

namespace titan {
namespace {

// Random values in t's shape, transposed in memory where t is (what OpenBLAS packs differently).
torch::Tensor random_in_layout(const torch::Tensor& t, at::Generator& gen) {
  if (t.stride(0) == 1 && t.size(1) > 1) return torch::randn({t.size(1), t.size(0)}, gen, t.options()).t();
  return torch::randn(t.sizes(), gen, t.options());
}

// Whether a @ b keeps its bits on one thread (thread_choice.h): checked once per (site, shape)
// on random operands, not on a and b, whose values (zeros at the first step, say) could hide
// a difference. Its own generator leaves the global one's sequence alone.
void check_mm_bits(const char* site, const torch::Tensor& a, const torch::Tensor& b) {
  ThreadChoiceState* s = thread_bits_check_due(site, a.size(0), a.size(1), b.size(1));
  if (!s) return;
  at::Generator gen = at::detail::createCPUGenerator(20261202);
  const auto pa = random_in_layout(a, gen), pb = random_in_layout(b, gen);
  pin_unless_same_bits(*s, [&] { return torch::mm(pa, pb); });
}

// a @ b on the thread count chosen for this (M, K, N) and operand layout. The site names
// keep the three products of a layer apart: their layouts differ, and so does their speed.
torch::Tensor chosen_mm(const char* site, const torch::Tensor& a, const torch::Tensor& b) {
  check_mm_bits(site, a, b);
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

// The weights as one [sum of out, in] matrix without a copy, if they lie back to back in one
// storage (the optimizer's flat buffer holds q, k and v so: they are registered in that order);
// else undefined.
torch::Tensor stacked_weights(torch::TensorList weights) {
  if (weights.size() < 2) return {};
  int64_t rows = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const auto& w = weights[i];
    if (!w.is_contiguous() || w.size(1) != weights[0].size(1) || !w.is_alias_of(weights[0])) return {};
    if (i > 0) {
      const auto& p = weights[i - 1];
      if (w.storage_offset() != p.storage_offset() + p.numel()) return {};
    }
    rows += w.size(0);
  }
  return weights[0].as_strided({rows, weights[0].size(1)}, {weights[0].size(1), 1});
}

// y_i = x W_i^T for one or more weights that read the same x, as one autograd node. Why one
// node for several: autograd sums the input gradients of separate layers that read one
// tensor (q/k/v, gate/up) with an add pass over [tokens, in] per extra layer; here each
// further dy_i W_i goes into dx with beta 1 (OpenBLAS adds it into C as it goes), so the
// sum costs no pass of its own. Forward: one GEMM over the weights stacked where they lie
// back to back (stacked_weights), else one per weight; weight gradients one GEMM per weight.
struct LinearsFunction : public torch::autograd::Function<LinearsFunction> {
  // actions: per weight, what the op-save hook asked (trainer/model/hooks/op_save_hook.h; OpSaveAction
  // values, empty: run all).
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                torch::TensorList weights, const c10::IValue& actions) {
    const std::vector<int64_t> acts = actions.toIntVector();
    auto act = [&](size_t i) { return acts.empty() ? OpSaveAction::kRun : static_cast<OpSaveAction>(acts[i]); };
    bool uniform = true;  // one action for all weights, none of them a reuse
    for (size_t i = 0; i < weights.size(); ++i) uniform = uniform && act(i) == act(0) && act(i) != OpSaveAction::kReuse;
    auto x2 = rows_of(x);
    torch::autograd::variable_list ys, saved = {x2};
    auto shape_of = [&](int64_t out) {
      auto shape = x.sizes().vec();
      shape.back() = out;
      return shape;
    };
    // Stacked only where every product is kept or none: a kept column slice would hold the
    // whole product's memory until the recompute.
    const torch::Tensor stacked = uniform ? stacked_weights(weights) : torch::Tensor();
    if (stacked.defined()) {
      // One product for all of them, each output a column slice of it: x is packed once
      // rather than per weight, and one wide GEMM runs closer to the peak than three narrow ones.
      auto y = chosen_mm("linear.forward", x2, stacked.t());
      int64_t col = 0;
      for (const auto& w : weights) {
        ys.push_back(y.narrow(1, col, w.size(0)).view(shape_of(w.size(0))));
        col += w.size(0);
      }
    } else {
      for (size_t i = 0; i < weights.size(); ++i) {
        const auto& w = weights[i];
        ys.push_back(act(i) == OpSaveAction::kReuse ? op_save_take(SavedOp::kLinear)[0]
                                                    : chosen_mm("linear.forward", x2, w.t()).view(shape_of(w.size(0))));
      }
    }
    for (size_t i = 0; i < weights.size(); ++i)
      if (act(i) == OpSaveAction::kKeep) op_save_keep(SavedOp::kLinear, {ys[i]});
    for (const auto& w : weights) saved.push_back(w);
    ctx->save_for_backward(saved);
    ctx->saved_data["shape"] = x.sizes().vec();
    return ys;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& x2 = saved[0];
    torch::Tensor dx;
    torch::autograd::variable_list out(saved.size());
    for (size_t i = 0; i + 1 < saved.size(); ++i) {
      if (!grads[i].defined()) continue;
      const auto& w = saved[i + 1];
      auto dy = rows_of(grads[i]);
      if (ctx->needs_input_grad(0)) {
        if (!dx.defined()) {
          dx = chosen_mm("linear.input_grad", dy, w);
        } else {
          check_mm_bits("linear.input_grad_sum", dy, w);
          with_chosen_threads("linear.input_grad_sum", dy.size(0), dy.size(1), w.size(1), [&] { dx.addmm_(dy, w); });
        }
      }
      if (!ctx->needs_input_grad(i + 1)) continue;
      if (accumulates_in_place(w)) {
        auto g = w.grad();
        // An undefined gradient for w: autograd then skips its AccumulateGrad, the sum is done.
        check_mm_bits("linear.weight_grad_in_place", dy.t(), x2);
        with_chosen_threads("linear.weight_grad_in_place", dy.size(1), dy.size(0), x2.size(1),
                            [&] { g.addmm_(dy.t(), x2); });
      } else {
        out[i + 1] = chosen_mm("linear.weight_grad", dy.t(), x2);
      }
    }
    if (dx.defined()) out[0] = dx.view(ctx->saved_data["shape"].toIntVector());
    out.emplace_back();  // the actions
    return out;
  }
};

}  // namespace

std::vector<torch::Tensor> fused_linears(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                         const std::vector<OpSaveAction>& actions) {
  TITAN_CHECK(actions.empty() || actions.size() == weights.size(), "fused_linear: ", actions.size(),
              " op-save actions for ", weights.size(), " weights");
  TITAN_CHECK(!weights.empty(), "fused_linear: needs at least one weight");
  for (const auto& w : weights) {
    TITAN_CHECK(fusable(x) && w.scalar_type() == x.scalar_type() && w.dim() == 2 && x.dim() >= 1 &&
                    x.size(-1) == w.size(1),
                "fused_linear: needs float or double CPU x [..., in] and weight [out, in] of one dtype, got x ",
                x.sizes(), " ", x.scalar_type(), " and weight ", w.sizes(), " ", w.scalar_type());
  }
  std::vector<int64_t> acts;
  for (OpSaveAction a : actions) acts.push_back(static_cast<int64_t>(a));
  return LinearsFunction::apply(x, torch::TensorList(weights), c10::IValue(acts));
}

torch::Tensor fused_linear(const torch::Tensor& x, const torch::Tensor& weight) {
  return fused_linears(x, {weight})[0];
}

bool linear_weight_grad_in_place(const torch::Tensor& w) { return accumulates_in_place(w); }

}  // namespace titan
