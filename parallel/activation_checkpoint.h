// Activation checkpointing as a block wrapper: a checkpointed block keeps only its input in
// forward and recomputes its forward during backward. Applied by the trainer's parallelize
// step; composes with FSDP (installed inside it, so recompute sees re-gathered parameters).
#pragma once

#include <string>

#include "parallel/module_hooks.h"

namespace titan {

// mode "full": every block; "selective": every `every`-th block (layers every-1, 2*every-1,
// ...), trading part of the memory saving for less recompute; "none": no wrapper needed.
BlockWrapFn activation_checkpoint_wrapper(const std::string& mode, int64_t every);

// Runs fn(x) without keeping its intermediate activations; backward recomputes them.
torch::Tensor checkpoint(const ForwardFn& fn, const torch::Tensor& x);

}  // namespace titan
