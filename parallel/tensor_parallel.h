// Tensor parallelism (Megatron-style column / row parallel layers), sequence parallelism and
// loss parallelism, as differentiable collectives over the tp Communicator plus helpers that
// shard a WeightModule. The trainer's parallelize step applies them to the model's modules
// (which layers are column- or row-wise is the plan, trainer/step/parallelize.cpp).
#pragma once

#include <memory>

#include <torch/torch.h>

#include "collectives/communicator.h"
#include "trainer/model/hooks/module_hooks.h"

namespace titan {

// Differentiable collectives over the tensor-parallel group. Sequence dim is 1 of [B, S, D].
// copy_to_tp: identity forward, all-reduce of the gradient (input of column-parallel layers).
torch::Tensor copy_to_tp(const torch::Tensor& x, Communicator& tp);
// reduce_from_tp: all-reduce forward, identity backward (output of row-parallel layers).
torch::Tensor reduce_from_tp(const torch::Tensor& x, Communicator& tp);
// gather_sequence: all-gather along S forward, reduce-scatter of the gradient backward.
torch::Tensor gather_sequence(const torch::Tensor& x, Communicator& tp);
// reduce_scatter_sequence: reduce-scatter along S forward, all-gather backward.
torch::Tensor reduce_scatter_sequence(const torch::Tensor& x, Communicator& tp);
// gather_last_dim: all-gather along the last dim forward, the local slice of the gradient
// backward (logits gathered over the vocabulary when loss parallel is off).
torch::Tensor gather_last_dim(const torch::Tensor& x, Communicator& tp);

// Not differentiable: every rank's block of x along `dim` concatenated in rank order (the
// full tensor from tensor-parallel blocks; also the building block of the functions above).
torch::Tensor all_gather_along(const torch::Tensor& x, int64_t dim, Communicator& group);

// Shards a module's registered weight in place along `dim` (this rank's contiguous block).
// The size along dim must be divisible by the group size (checked by the caller's plan).
// replicas > 1: the weight splits into tp / replicas blocks and `replicas` neighbouring
// ranks hold the same one, block tp.rank() / replicas (grouped-query attention with more
// tp ranks than KV heads: each KV head replicated, as Megatron-LM and Neuron do).
void shard_weight(WeightModule& m, int64_t dim, Communicator& tp, int64_t replicas = 1);
// The full tensor from every rank's block along dim (one copy of each replicated block).
torch::Tensor gather_tp_blocks(const torch::Tensor& local, int64_t dim, int64_t replicas, Communicator& tp);
// After backward: each replicated block's gradient summed over the ranks holding it (each
// rank computed the part its own query heads contributed). In place, every rank calls it.
void sum_over_replicas(const std::vector<torch::Tensor>& grads, int64_t replicas, Communicator& tp);

// Cross entropy summed over tokens / normalizer, on logits sharded over the vocabulary
// ([..., V / tp], this rank holding block tp.rank()), without gathering them: max, sum of
// exponentials and the target logit are all-reduced instead.
torch::Tensor vocab_parallel_cross_entropy_sum(const torch::Tensor& local_logits,
                                               const torch::Tensor& labels, double normalizer,
                                               Communicator& tp);

// A vocabulary-sharded embedding lookup: ids outside this rank's block contribute zero rows;
// the caller sums over the group (reduce_from_tp or reduce_scatter_sequence).
torch::Tensor vocab_parallel_embedding_partial(const torch::Tensor& local_weight,
                                               const torch::Tensor& ids, Communicator& tp);

}  // namespace titan
