// Applies the parallel plans of the job to a Transformer from outside (TorchTitan's
// parallelize step): FSDP / HSDP / DDP units per block plus the root, activation
// checkpointing. Used by the train loop.
#pragma once

#include <memory>

#include "parallel/device_mesh.h"
#include "parallel/fsdp.h"
#include "trainer/job_config.h"
#include "trainer/model.h"

namespace titan {

struct ParallelizedModel {
  std::unique_ptr<Fsdp> fsdp;  // null when no data parallelism is used
};

// "float32" | "bfloat16" | "float16" (the config's dtype names) as a torch dtype.
torch::ScalarType dtype_named(const std::string& name);

ParallelizedModel parallelize(Transformer& model, DeviceMesh& mesh, const JobConfig& cfg);

// The model's modules grouped as FSDP units: the root (embeddings, final norm, output) and
// one unit per block.
std::vector<NamedModule> root_modules(Transformer& model);
std::vector<std::vector<NamedModule>> block_modules(Transformer& model);

}  // namespace titan
