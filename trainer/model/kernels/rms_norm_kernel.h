// Fused RMSNorm over the last dim, forward and backward in one pass each (an autograd
// Function). Used by RMSNormImpl (trainer/model/model.h) when FusedKernels::rms_norm is on.
#pragma once

#include <torch/torch.h>

namespace titan {

// weight * (x / sqrt(mean(x^2, -1) + eps)) for float or double CPU tensors of one dtype;
// the same value as RMSNormImpl's composite path.
torch::Tensor fused_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

}  // namespace titan
