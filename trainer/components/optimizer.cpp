#include "trainer/components/optimizer.h"

#include <cmath>

#include "common/error.h"
#include "trainer/components/flat_kernels.h"
#include "trainer/model/kernels/fused_kernels.h"
#include "trainer/model/kernels/meta_kernel.h"

#include <ATen/record_function.h>

namespace titan {
namespace {

// Flat offsets are rounded up to 64 bytes so that every parameter starts on a cache line.
int64_t aligned(int64_t n, int64_t elem_bytes) {
  const int64_t per_line = std::max<int64_t>(1, 64 / elem_bytes);
  return (n + per_line - 1) / per_line * per_line;
}

bool flat_dtype(const torch::Tensor& t) {
  return t.device().is_cpu() && t.layout() == torch::kStrided &&
         (t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kFloat64);
}

// Runs body() for the parameters i with in(i); in a recording that keeps the fused kernels
// (meta_kernel.h), those a real CPU run would keep in a flat buffer (float and double meta
// parameters) run inside `scope`, with their element count and size as its inputs, so that the
// recorder keeps them as the one flat pass the real run makes (fused_kernels.h). touched(i,
// out) adds the tensors the pass reads and writes for parameter i (the scope's third input):
// the recorder's memory walk sees the optimizer state through them.
template <class In, class Touched, class Body>
void with_flat_scope_on_meta(const char* scope, const std::vector<NamedParam>& params, In in, Touched touched,
                             Body body) {
  int64_t elements = 0, elem_bytes = 0;
  std::vector<at::Tensor> tensors;
  for (size_t i = 0; i < params.size() && meta_records_fused_kernels(); ++i) {
    if (!in(i)) continue;
    const auto& g = params[i].param.grad();
    if (!fusable_on_meta(params[i].param) || !g.defined()) continue;
    elements += params[i].param.numel();
    elem_bytes = std::max<int64_t>(elem_bytes, static_cast<int64_t>(params[i].param.element_size()));
    touched(i, tensors);
  }
  if (elements == 0) {
    body([](size_t) { return true; });
    return;
  }
  {
    RECORD_FUNCTION(scope, std::vector<c10::IValue>({c10::IValue(elements), c10::IValue(elem_bytes),
                                                     c10::IValue(c10::List<at::Tensor>(tensors))}));
    body([&](size_t i) { return fusable_on_meta(params[i].param); });
  }
  body([&](size_t i) { return !fusable_on_meta(params[i].param); });
}

torch::Tensor view_at(const torch::Tensor& flat, int64_t offset, const torch::Tensor& like) {
  return flat.narrow(0, offset, like.numel()).view(like.sizes());
}

}  // namespace

AdamW::AdamW(std::vector<NamedParam> params, const OptimizerSection& cfg)
    : params_(std::move(params)), cfg_(cfg) {
  states_.resize(params_.size());
  in_group_.assign(params_.size(), false);
  build_flat_groups();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (in_group_[i]) continue;
    auto& p = params_[i].param;
    states_[i] = {torch::zeros_like(p), torch::zeros_like(p)};
  }
}

void AdamW::build_flat_groups() {
  torch::NoGradGuard no_grad;
  for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
    FlatGroup g;
    int64_t total = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& p = params_[i].param;
      if (!flat_dtype(p) || p.scalar_type() != dtype) continue;
      g.members.push_back(i);
      g.offsets.push_back(total);
      total += aligned(p.numel(), p.element_size());
    }
    if (g.members.empty()) continue;
    auto opts = torch::TensorOptions().dtype(dtype);
    g.params = torch::zeros({total}, opts);
    g.grads = torch::zeros({total}, opts);
    g.exp_avg = torch::zeros({total}, opts);
    g.exp_avg_sq = torch::zeros({total}, opts);
    for (size_t k = 0; k < g.members.size(); ++k) {
      const size_t i = g.members[k];
      auto& p = params_[i].param;
      auto pv = view_at(g.params, g.offsets[k], p);
      pv.copy_(p);
      auto old_grad = p.grad();
      // set_data keeps the parameter object (registered in the module, held by FSDP and TP
      // plans) and makes it the view.
      p.set_data(pv);
      auto gv = view_at(g.grads, g.offsets[k], p);
      if (old_grad.defined()) gv.copy_(old_grad);
      p.mutable_grad() = gv;
      states_[i] = {view_at(g.exp_avg, g.offsets[k], p), view_at(g.exp_avg_sq, g.offsets[k], p)};
      in_group_[i] = true;
    }
    groups_.push_back(std::move(g));
  }
}

void AdamW::adopt_grads(FlatGroup& g) {
  for (size_t k = 0; k < g.members.size(); ++k) {
    auto& p = params_[g.members[k]].param;
    auto view = view_at(g.grads, g.offsets[k], p);
    const auto& cur = p.grad();
    if (cur.defined() && cur.data_ptr() == view.data_ptr() && cur.strides() == view.strides()) continue;
    if (cur.defined()) {
      view.copy_(cur);
    } else {
      view.zero_();
    }
    p.mutable_grad() = view;
  }
}

void AdamW::step(double lr, double grad_scale) {
  torch::NoGradGuard no_grad;
  ++step_;
  const double b1 = cfg_.beta1, b2 = cfg_.beta2;
  const double bias1 = 1.0 - std::pow(b1, double(step_));
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(b2, double(step_)));
  const AdamWCoefs coefs{1.0 - lr * cfg_.weight_decay, b1, b2, cfg_.eps, -lr / bias1, bias2_sqrt, grad_scale};
  flat_finite_ = true;
  for (auto& g : groups_) {
    adopt_grads(g);
    const int64_t n = g.params.numel();
    if (g.params.scalar_type() == torch::kFloat64) {
      flat_finite_ &= adamw_update(g.params.data_ptr<double>(), g.grads.data_ptr<double>(),
                                   g.exp_avg.data_ptr<double>(), g.exp_avg_sq.data_ptr<double>(), n, coefs);
    } else {
      flat_finite_ &= adamw_update(g.params.data_ptr<float>(), g.grads.data_ptr<float>(),
                                   g.exp_avg.data_ptr<float>(), g.exp_avg_sq.data_ptr<float>(), n, coefs);
    }
  }
  auto not_flat = [&](size_t i) { return !in_group_[i]; };
  auto update_touches = [&](size_t i, std::vector<at::Tensor>& out) {
    const auto& p = params_[i].param;
    out.insert(out.end(), {p, p.grad(), states_[i].exp_avg, states_[i].exp_avg_sq});
  };
  with_flat_scope_on_meta(kFusedAdamwScope, params_, not_flat, update_touches, [&](auto take) {
    for (size_t i = 0; i < params_.size(); ++i) {
      if (in_group_[i] || !take(i)) continue;
      auto& p = params_[i].param;
      auto g = p.grad();
      if (!g.defined()) continue;
      if (grad_scale != 1.0) g.mul_(grad_scale);
      auto& s = states_[i];
      p.mul_(1.0 - lr * cfg_.weight_decay);
      s.exp_avg.mul_(b1).add_(g, 1.0 - b1);
      s.exp_avg_sq.mul_(b2).addcmul_(g, g, 1.0 - b2);
      auto denom = (s.exp_avg_sq.sqrt() / bias2_sqrt).add_(cfg_.eps);
      p.addcdiv_(s.exp_avg, denom, -lr / bias1);
    }
  });
}

void AdamW::zero_grad() {
  for (auto& g : groups_) {
    g.grads.zero_();
    adopt_grads(g);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i].param;
    if (!in_group_[i] && p.grad().defined()) p.mutable_grad() = torch::Tensor();
  }
}

double AdamW::grad_sq_norm() {
  double sq = 0;
  for (auto& g : groups_) {
    adopt_grads(g);
    sq += g.grads.scalar_type() == torch::kFloat64 ? sum_squares(g.grads.data_ptr<double>(), g.grads.numel())
                                                   : sum_squares(g.grads.data_ptr<float>(), g.grads.numel());
  }
  auto grad_touches = [&](size_t i, std::vector<at::Tensor>& out) { out.push_back(params_[i].param.grad()); };
  with_flat_scope_on_meta(kFusedSumSquaresScope, params_, [&](size_t i) { return !in_group_[i]; }, grad_touches,
                          [&](auto take) {
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& grad = params_[i].param.grad();
      if (!in_group_[i] && take(i) && grad.defined()) sq += squared_sum(grad);
    }
  });
  return sq;
}

int64_t AdamW::state_bytes() const {
  int64_t b = 0;
  for (auto& s : states_) b += s.exp_avg.nbytes() + s.exp_avg_sq.nbytes();
  return b;
}

double lr_factor(const LrSchedulerSection& cfg, int64_t total_steps, int64_t step) {
  const int64_t warmup = cfg.warmup_steps;
  if (step < warmup) return double(step + 1) / double(warmup);
  const int64_t after = std::max<int64_t>(total_steps - warmup, 1);
  const int64_t decay = cfg.decay_ratio < 0
                            ? after
                            : std::max<int64_t>(1, std::llround(cfg.decay_ratio * total_steps));
  const int64_t decay_start = std::max(warmup, total_steps - decay);
  if (step < decay_start) return 1.0;
  const double progress = std::min(1.0, double(step - decay_start) / double(decay));
  double shape = 1.0 - progress;
  if (cfg.decay_type == DecayType::kSqrt) {
    shape = 1.0 - std::sqrt(progress);
  } else if (cfg.decay_type == DecayType::kCosine) {
    shape = 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  return cfg.min_lr_factor + (1.0 - cfg.min_lr_factor) * shape;
}

double squared_sum(const torch::Tensor& t) {
  if (flat_dtype(t) && t.is_contiguous()) {
    return t.scalar_type() == torch::kFloat64 ? sum_squares(t.data_ptr<double>(), t.numel())
                                              : sum_squares(t.data_ptr<float>(), t.numel());
  }
  // On the meta device a tensor the one-pass kernel above would take: its scope (see
  // with_flat_scope_on_meta).
  const bool scoped = fusable_on_meta(t) && t.is_contiguous() && meta_records_fused_kernels();
  auto sum = [&] { return t.to(torch::kFloat64).pow(2).sum(); };
  if (scoped) {
    RECORD_FUNCTION(kFusedSumSquaresScope,
                    std::vector<c10::IValue>({c10::IValue(t.numel()), c10::IValue(static_cast<int64_t>(t.element_size())),
                                              c10::IValue(c10::List<at::Tensor>({t}))}));
    sum();
    return 0.0;
  }
  auto sq = sum();
  return t.is_meta() ? 0.0 : sq.item<double>();
}

double local_grad_sq_norm(const std::vector<NamedParam>& params) {
  double sq = 0;
  for (auto& p : params) {
    if (p.param.grad().defined()) sq += squared_sum(p.param.grad());
  }
  return sq;
}

double clip_coefficient(double global_norm, double max_norm) {
  return max_norm <= 0 ? 1.0 : std::min(1.0, max_norm / (global_norm + 1e-6));
}

void clip_grads(const std::vector<NamedParam>& params, double global_norm, double max_norm) {
  if (max_norm <= 0) return;
  torch::NoGradGuard no_grad;
  const double coef = clip_coefficient(global_norm, max_norm);
  for (auto& p : params) {
    if (p.param.grad().defined()) p.param.grad().mul_(coef);
  }
}

}  // namespace titan
