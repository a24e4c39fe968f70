// Fused SwiGLU gate silu(a) * b, forward and backward in one pass each (an autograd
// Function). Used by FeedForwardImpl (trainer/model/model.h) when FusedKernels::swiglu is on.
#pragma once

#include <torch/torch.h>

namespace titan {

// silu(a) * b for float or double CPU tensors of one shape and dtype; the same value as
// torch::silu(a) * b.
torch::Tensor fused_swiglu(const torch::Tensor& a, const torch::Tensor& b);

}  // namespace titan
