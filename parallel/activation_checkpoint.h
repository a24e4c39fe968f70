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

// Runs fn(x) without keeping its intermediate activations; backward recomputes them.
torch::Tensor checkpoint(const ForwardFn& fn, const torch::Tensor& x);

}  // namespace titan
