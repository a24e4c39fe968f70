// Activation checkpointing as a block wrapper: a checkpointed block keeps only its input in
// forward and recomputes its forward during backward. Applied by the trainer's parallelize
// step; composes with FSDP (installed inside it, so recompute sees re-gathered parameters).
#pragma once

#include <string>

#include "parallel/module_hooks.h"

namespace titan {

// Recomputes every `every`-th block (layers every-1, 2*every-1, ...): 1 is full activation
// checkpointing; larger values (selective) trade part of the memory saving for less recompute.
BlockWrapFn activation_checkpoint_wrapper(int64_t every);

// Op-level selective activation checkpointing (TorchTitan's selective_ac_option = "op"): every
// block is checkpointed, but the outputs of its linear products, its attention and its
// sequence-parallel reduce-scatters are kept from the forward, except every second linear
// product (the 2nd, 4th, ... in the block's forward order), and the recompute reuses them
// (parallel/op_save_hook.h): it reruns only the norms, RoPE, SwiGLU, casts and the dropped
// products, and each reused op still back-propagates to its recomputed inputs.
BlockWrapFn op_activation_checkpoint_wrapper();

// Runs fn(x) without keeping its intermediate activations; backward recomputes them. With
// keep_ops, the op-level policy above keeps some of them and the recompute skips those.
torch::Tensor checkpoint(const ForwardFn& fn, const torch::Tensor& x, bool keep_ops = false);

}  // namespace titan
