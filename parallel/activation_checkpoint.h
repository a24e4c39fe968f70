// Activation checkpointing as a block wrapper: a checkpointed block keeps only its input in
// forward and recomputes its forward during backward. Applied by the trainer's parallelize
// step; composes with FSDP (installed inside it, so recompute sees re-gathered parameters).
#pragma once

#include <string>

#include "trainer/model/hooks/module_hooks.h"
#include "common/remat_policy.h"

namespace titan {

// Recomputes every `every`-th block (layers every-1, 2*every-1, ...): 1 is full activation
// checkpointing; larger values (selective) trade part of the memory saving for less recompute.
BlockWrapFn activation_checkpoint_wrapper(int64_t every);

// Op-level selective activation checkpointing (TorchTitan's selective_ac_option = "op"): every
// block is checkpointed, but the outputs of its linear products, its attention and its
// sequence-parallel reduce-scatters are kept from the forward, except every second linear
// product (the 2nd, 4th, ... in the block's forward order), and the recompute reuses them
// (trainer/model/hooks/op_save_hook.h): it reruns only the norms, RoPE, SwiGLU, casts and the dropped
// products, and each reused op still back-propagates to its recomputed inputs.
BlockWrapFn op_activation_checkpoint_wrapper();

// A block's linear products, for a remat policy to tell which named tensor each is: q, k, v and
// the out projection in attention; the MLP's input products (2 gated, 1 otherwise) then its
// output product.
struct BlockProducts {
  int64_t attention_linears = 4, mlp_linears = 3;
};

// MaxText-style named-tensor policy (common/remat_policy.h): every block is checkpointed;
// each product, attention's output (context) and the block input (decoder_layer_input) is
// kept on device, offloaded to host memory or recomputed as the policy names it. Offloaded
// tensors leave the device after the forward (a device-to-host copy, recorded for the
// simulator as a host_copy on stream d2h) and come back before the block's recompute (h2d,
// issued one block ahead); on a real host run they stay where they are.
BlockWrapFn policy_activation_checkpoint_wrapper(const RematPolicy& policy, BlockProducts products);

// Runs fn(x) without keeping its intermediate activations; backward recomputes them. With
// keep_ops, the op-level policy above keeps some of them and the recompute skips those.
torch::Tensor checkpoint(const ForwardFn& fn, const torch::Tensor& x, bool keep_ops = false);

}  // namespace titan
