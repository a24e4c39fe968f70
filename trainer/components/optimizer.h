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

// Decoupled weight decay Adam, the arithmetic of torch.optim.AdamW (foreach=False) element by
// element. Float and double CPU parameters live in one flat buffer per dtype, and so do their
// gradients and state: each parameter, its .grad() and its State are views into them (any
// in-place write through a view, as checkpoints and FSDP do, lands in the buffer), and the
// update is one pass per buffer (trainer/components/flat_kernels.h). Other parameters (meta
// for the simulator, bf16) take the per-tensor ATen ops, so a recorded trace keeps them.
class AdamW {
 public:
  AdamW(std::vector<NamedParam> params, const OptimizerSection& cfg);
  // grad_scale (the clipping coefficient, see clip_coefficient) multiplies every gradient
  // first, written back, as clip_grads would.
  void step(double lr, double grad_scale = 1.0);
  // Flat gradients are zeroed and stay allocated (backward accumulates into them in place);
  // the others are released.
  void zero_grad();
  // Sum of squares of every local gradient, in fp64: one pass per flat buffer.
  double grad_sq_norm();

  struct State {
    torch::Tensor exp_avg, exp_avg_sq;
  };
  std::vector<NamedParam>& params() { return params_; }
  std::vector<State>& states() { return states_; }
  int64_t step_count() const { return step_; }
  void set_step_count(int64_t s) { step_ = s; }
  int64_t state_bytes() const;
  // Whether parameter i lives in a flat buffer, and whether the last step() left every
  // flat-buffer parameter finite (checked in the update's own pass).
  bool is_flat(size_t i) const { return in_group_[i]; }
  bool flat_params_finite() const { return flat_finite_; }

 private:
  // One dtype's flat buffers and the parameters (indices into params_) viewing them.
  struct FlatGroup {
    torch::Tensor params, grads, exp_avg, exp_avg_sq;
    std::vector<size_t> members;
    std::vector<int64_t> offsets;
  };
  void build_flat_groups();
  // Points every member's .grad() back at its view if something replaced it.
  void adopt_grads(FlatGroup& g);
  std::vector<NamedParam> params_;
  std::vector<State> states_;
  std::vector<FlatGroup> groups_;
  std::vector<bool> in_group_;
  OptimizerSection cfg_;
  int64_t step_ = 0;
  bool flat_finite_ = true;
};

// LR factor in [min_lr_factor, 1] for optimizer step `step` (0-based): linear warmup to 1 over
// warmup_steps, flat, then the last decay steps (decay_ratio of all; all after warmup when < 0)
// fall to min_lr_factor along decay_type.
double lr_factor(const LrSchedulerSection& cfg, int64_t total_steps, int64_t step);

// Sum of squares of a tensor in fp64 (0 on the meta device, where the ops are still issued).
double squared_sum(const torch::Tensor& t);

// Sum of squares of the local gradients, in fp64 for stability across many shards.
double local_grad_sq_norm(const std::vector<NamedParam>& params);

// The factor torch's clip_grad_norm_ scales gradients by so that the global norm is at most
// max_norm (1 when max_norm <= 0: no clipping).
double clip_coefficient(double global_norm, double max_norm);

// Scales gradients so that the global norm is at most max_norm (torch's clip_grad_norm_
// arithmetic). global_norm comes from the caller, who sums squares over every shard.
void clip_grads(const std::vector<NamedParam>& params, double global_norm, double max_norm);

}  // namespace titan
