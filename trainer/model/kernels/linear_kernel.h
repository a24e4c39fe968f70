// Bias-free linear layer y = x W^T as one autograd Function: one node instead of matmul's
// reshape, transpose and mm nodes, its backward computes only the gradients asked for, and
// each of its three GEMMs runs on the thread count chosen for its shape
// (thread_choice.h). Used by LinearImpl (trainer/model/model.h) when FusedKernels::linear is on.
#pragma once

#include <torch/torch.h>

#include "trainer/model/hooks/op_save_hook.h"

namespace titan {

// x [..., in] @ W^T for float or double CPU tensors of one dtype, W [out, in]; the same
// value as torch::matmul(x, W.t()).
torch::Tensor fused_linear(const torch::Tensor& x, const torch::Tensor& weight);
// x @ W_i^T for each weight, as one autograd node whose backward sums the input gradient
// over the weights in the GEMMs themselves (the q/k/v and gate/up projections read one x).
// Under op-level activation checkpointing (trainer/model/hooks/op_save_hook.h), actions[i] says what to do
// with weight i's product: kKeep hands it to the hook, kReuse takes the kept one from it
// instead of running the GEMM (the backward is the same); empty: run all.
std::vector<torch::Tensor> fused_linears(const torch::Tensor& x, const std::vector<torch::Tensor>& weights,
                                         const std::vector<OpSaveAction>& actions = {});
// Whether the fused linear's backward sums w's gradient into w.grad() in place (no fresh
// product for autograd to add): the meta stand-in follows the same rule, so a recording of
// gradient accumulation holds the adds a real run makes and no others.
bool linear_weight_grad_in_place(const torch::Tensor& w);

}  // namespace titan
