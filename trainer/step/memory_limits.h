// Size limits checked before anything is allocated: a lower-bound estimate of one rank's
// memory (activations of the micro-batches it holds at once, logits, its share of the
// weights with AdamW state, FSDP's gathered stage under PP, and the whole model that every
// rank builds before splitting it) against the memory of its host, shared with the other
// ranks there. Used by the Trainer's constructor (real runs) and tests.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/model_args.h"
#include "parallel/parallel_dims.h"
#include "trainer/config/job_config.h"

namespace titan {

struct PipelinePlan;  // trainer/step/pipeline_model.h

struct MemoryEstimate {
  double activations = 0;  // kept for backward at the rank's peak (pipeline: micro-batches in flight)
  double logits = 0;       // logits and their gradient, one micro-batch (pipeline: last stage only)
  double weights = 0;      // the rank's share of parameters, gradients and both AdamW moments
  double gathered = 0;     // FSDP under PP: the stage's gathered parameters and gradient sums, held all step
  double init = 0;         // the whole model: every rank builds it before the split and the shard
  double steady() const { return activations + logits + weights + gathered; }
  double total() const { return std::max(init, steady()); }
};

// A lower bound for the rank at pipeline coordinate pp_rank (0 without PP): every term is
// smaller than what the step really holds. dims: resolved (ParallelDims::validate).
MemoryEstimate estimate_rank_memory(const JobConfig& cfg, const ParallelDims& dims, const ModelArgs& args,
                                    int pp_rank = 0);

// MemTotal from /proc/meminfo in bytes; 0 when it cannot be read (then nothing is checked).
double machine_memory_bytes();

// A config error naming training.local_batch_size and training.seq_len with the estimate in
// bytes when this rank's estimate plus the smallest estimate of any rank, for each of the
// other ranks_on_host - 1 ranks on this host, exceeds machine_bytes. plan: the run's pipeline
// plan under PP (nullptr: built here).
void check_fits_in_memory(const JobConfig& cfg, const ParallelDims& dims, const ModelArgs& args, int pp_rank,
                          int ranks_on_host, double machine_bytes, const PipelinePlan* plan = nullptr);

}  // namespace titan
