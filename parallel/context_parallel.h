// Context parallelism: the sequence split over the mesh's `cp` dim with causal load balancing,
// and ring attention, the plan that lets each rank's queries attend to every rank's keys and
// values. Used by trainer/step/parallelize.cpp (which installs the attention through the
// model's AttentionFn hook) and the trainer's step (which shards each batch).
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

#include "collectives/communicator.h"
#include "trainer/model/hooks/module_hooks.h"

namespace titan {

// parallelism.context_parallel_rotate_method, as TorchTitan spells it:
// - allgather: every rank's K/V gathered at once (one all-gather of the stacked K and V), their
//   gradients reduce-scattered back in backward;
// - alltoall: K/V passed around the ring one step at a time (send to the next cp rank, receive
//   from the previous; TorchTitan's all-to-all rotater permutes the same way), each transfer
//   overlapping the previous step's attention; in backward the K/V gradients travel around the
//   ring with them and arrive back at their owner after cp steps.
enum class CpRotate { kAllGather, kAllToAll };
// A config error naming parallelism.context_parallel_rotate_method for any other value.
CpRotate parse_cp_rotate(const std::string& method);

// Profiling scope around one block of ring attention (a query chunk against a K/V chunk):
// inputs q, k, v, then causal (bool) and backward (bool). The simulator costs it as one
// flash-attention kernel of that shape (trainer/simulate/trace_recorder.cpp).
constexpr const char* kRingAttentionBlockScope = "titan::ring_attention_block";
// Whether the active recording keeps each block scope as that one kernel, recording nothing
// inside it (process-wide, set by the recorder): a block on the meta device then makes its
// outputs as new fp32 tensors in the shapes and contiguous layouts its ops give them, without
// running those ops (scores, mask, softmax, products, and in backward their gradients).
bool meta_ring_blocks_kept();
void set_meta_ring_blocks_kept(bool on);

// Causal load balancing: the sequence is cut into 2 x cp chunks and cp rank i holds chunks i
// and 2cp-1-i (early chunks attend to few keys, late ones to many), so every rank does the same
// attention work. x's `dim` (of size seq_len, divisible by 2 x cp) -> this rank's 2 chunks.
torch::Tensor cp_shard_sequence(const torch::Tensor& x, int64_t dim, int64_t cp, int64_t rank);

// Checks seq_len against the degree: a config error naming training.seq_len and
// parallelism.context_parallel_degree unless 2 x cp divides it.
void check_context_parallel(int64_t seq_len, int64_t cp);

// Causal attention over the whole sequence for this rank's queries: q [B, H, L, D] (L = this
// rank's two chunks), k and v [B, KV, L, D] (H a multiple of KV: grouped-query attention).
// Returns [B, H, L, D] in q's dtype. Partial results per K/V chunk are merged by their
// log-sum-exp (online softmax); backward recomputes each block from the saved log-sum-exp.
// Every rank of `cp` calls it alike (the communicator must outlive the autograd graph).
torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             double scale, Communicator& cp, CpRotate method);

// The model hook (trainer/model/hooks/module_hooks.h) running ring_attention over `cp`.
AttentionFn ring_attention_fn(Communicator& cp, CpRotate method);

}  // namespace titan
