// AdamW over a list of named parameters (full tensors or local shards), the LR schedule, and
// gradient clipping by global norm. Used by the train loop; state is exposed by name so
// checkpoints can save and reshard it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "trainer/config/job_config.h"

namespace titan {

struct NamedParam {
  std::string name;
  torch::Tensor param;  // a leaf; its .grad() is read by step()
};

// Decoupled weight decay Adam, the same arithmetic as torch.optim.AdamW (foreach=False), so the
// PyTorch reference agrees bit for bit in fp32.
class AdamW {
 public:
  AdamW(std::vector<NamedParam> params, const OptimizerSection& cfg);
  void step(double lr);
  void zero_grad();

  struct State {
    torch::Tensor exp_avg, exp_avg_sq;
  };
  std::vector<NamedParam>& params() { return params_; }
  std::vector<State>& states() { return states_; }
  int64_t step_count() const { return step_; }
  void set_step_count(int64_t s) { step_ = s; }
  int64_t state_bytes() const;

 private:
  std::vector<NamedParam> params_;
  std::vector<State> states_;
  OptimizerSection cfg_;
  int64_t step_ = 0;
};

// LR factor in [min_lr_factor, 1] for optimizer step `step` (0-based): linear warmup to 1 over
// warmup_steps, flat, then the last decay steps (decay_ratio of all; all after warmup when < 0)
// fall to min_lr_factor along decay_type.
double lr_factor(const LrSchedulerSection& cfg, int64_t total_steps, int64_t step);

// Sum of squares of the local gradients, in fp64 for stability across many shards.
double local_grad_sq_norm(const std::vector<NamedParam>& params);

// Scales gradients so that the global norm is at most max_norm (torch's clip_grad_norm_
// arithmetic). global_norm comes from the caller, who sums squares over every shard.
void clip_grads(const std::vector<NamedParam>& params, double global_norm, double max_norm);

}  // namespace titan
