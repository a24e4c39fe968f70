// The model's dimensions for a job: the published flavor of [model] with its explicit dims
// applied over it. Used by the trainer, the simulator and the config printer.
#pragma once

#include <cstdint>

#include "common/model_args.h"
#include "trainer/config/job_config.h"

namespace titan {

// tokenizer_vocab fills vocab_size when neither the flavor nor [model] sets it (debugmodel);
// that size is then rounded up to a multiple of vocab_multiple (as Megatron's
// make_vocab_size_divisible_by) so that tensor parallelism can split the vocabulary.
ModelArgs resolve_model_args(const ModelSection& section, int64_t tokenizer_vocab,
                             int64_t vocab_multiple = 1);

// The job's dims: the vocabulary padded to model.vocab_size_divisible_by x the TP degree.
ModelArgs resolve_model_args(const JobConfig& cfg, int64_t tokenizer_vocab);

}  // namespace titan
