// Fused rotary embedding (HF "rotate half" layout), forward and backward in one pass each
// (an autograd Function) on [B, H, S, D] tensors of any strides with a contiguous last dim,
// so q and k rotate in the projections' [B, S, H, D] memory without a transposing copy.
// Used by AttentionImpl (trainer/model/model.h) when FusedKernels::rope is on.
#pragma once

#include <torch/torch.h>

namespace titan {

// x * cos + rotate_half(x) * sin with cos/sin [S, D] (float tables, as make_rope_tables
// builds them); the result has x's layout. The same value as apply_rope.
torch::Tensor fused_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace titan
