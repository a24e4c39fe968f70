#include "trainer/components/optimizer.h"

#include <cmath>

#include "common/error.h"

namespace titan {

AdamW::AdamW(std::vector<NamedParam> params, const OptimizerSection& cfg)
    : params_(std::move(params)), cfg_(cfg) {
  for (auto& p : params_) {
    states_.push_back({torch::zeros_like(p.param), torch::zeros_like(p.param)});
  }
}

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  ++step_;
  const double b1 = cfg_.beta1, b2 = cfg_.beta2;
  const double bias1 = 1.0 - std::pow(b1, double(step_));
  const double bias2_sqrt = std::sqrt(1.0 - std::pow(b2, double(step_)));
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i].param;
    auto g = p.grad();
    if (!g.defined()) continue;
    auto& s = states_[i];
    p.mul_(1.0 - lr * cfg_.weight_decay);
    s.exp_avg.mul_(b1).add_(g, 1.0 - b1);
    s.exp_avg_sq.mul_(b2).addcmul_(g, g, 1.0 - b2);
    auto denom = (s.exp_avg_sq.sqrt() / bias2_sqrt).add_(cfg_.eps);
    p.addcdiv_(s.exp_avg, denom, -lr / bias1);
  }
}

void AdamW::zero_grad() {
  for (auto& p : params_) {
    if (p.param.grad().defined()) p.param.mutable_grad() = torch::Tensor();
  }
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

double local_grad_sq_norm(const std::vector<NamedParam>& params) {
  double sq = 0;
  for (auto& p : params) {
    if (p.param.grad().defined()) {
      sq += p.param.grad().to(torch::kFloat64).pow(2).sum().item<double>();
    }
  }
  return sq;
}

void clip_grads(const std::vector<NamedParam>& params, double global_norm, double max_norm) {
  if (max_norm <= 0) return;
  torch::NoGradGuard no_grad;
  const double coef = std::min(1.0, max_norm / (global_norm + 1e-6));
  for (auto& p : params) {
    if (p.param.grad().defined()) p.param.grad().mul_(coef);
  }
}

}  // namespace titan
