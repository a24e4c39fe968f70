// Size limits checked before anything is allocated: a lower-bound estimate of one rank's
// memory for a micro-batch (activations, logits, weights with AdamW state) against the
// machine's memory. Used by the Trainer's constructor (real runs) and tests.
#pragma once

#include <cstdint>

#include "common/model_args.h"
#include "trainer/config/job_config.h"

namespace titan {

struct MemoryEstimate {
  double activations = 0;  // bytes kept for backward, all layers, one micro-batch
  double logits = 0;       // logits and their gradient
  double weights = 0;      // parameters, gradients and AdamW moments, fp32, unsharded
  double total() const { return activations + logits + weights; }
};

// A lower bound for one rank: every term is smaller than what the step really holds.
MemoryEstimate estimate_rank_memory(const JobConfig& cfg, const ModelArgs& args);

// MemTotal from /proc/meminfo in bytes; 0 when it cannot be read (then nothing is checked).
double machine_memory_bytes();

// A config error naming training.seq_len and training.local_batch_size with the estimate in
// bytes when the estimate exceeds machine_bytes.
void check_fits_in_memory(const JobConfig& cfg, const ModelArgs& args, double machine_bytes);

}  // namespace titan
