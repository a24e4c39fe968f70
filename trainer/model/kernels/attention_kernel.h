// Fused causal attention (an autograd Function), flash-style: queries in blocks of 32 rows,
// each block against the keys up to its last row only (the masked upper half is never
// computed past the diagonal block), softmax in a block-sized buffer, so no [S, S]
// probabilities exist in forward or backward; the backward recomputes them from the saved
// log-sum-exp. Grouped-query attention reads each kv head in place for its query heads.
// Used by AttentionImpl (trainer/model/model.h) when FusedKernels::attention is on.
#pragma once

#include <torch/torch.h>

#include "trainer/model/hooks/op_save_hook.h"

namespace titan {

// softmax(q k^T * scale + causal mask) v per head, q [B, H, S, D], k and v [B, KV, S, D]
// with H a multiple of KV (query head h reads kv head h / (H / KV)); any strides with a
// contiguous last dim. Returns [B, H, S, D] as a view of [B, S, H, D] memory, so that
// transpose(1, 2).reshape({B, S, H * D}) is free.
// Under op-level activation checkpointing (trainer/model/hooks/op_save_hook.h), kKeep hands the output and
// log-sum-exp to the hook, kReuse returns the kept ones without running the forward.
torch::Tensor fused_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     double scale, OpSaveAction action = OpSaveAction::kRun);

}  // namespace titan
