// The model's dimensions for a job: the published flavor of [model] with its explicit dims
// applied over it. Used by the trainer, the simulator and the config printer.
#pragma once

#include <cstdint>

#include "common/model_args.h"
#include "trainer/config/job_config.h"

namespace titan {

// tokenizer_vocab fills vocab_size when neither the flavor nor [model] sets it (debugmodel).
ModelArgs resolve_model_args(const ModelSection& section, int64_t tokenizer_vocab);

}  // namespace titan
