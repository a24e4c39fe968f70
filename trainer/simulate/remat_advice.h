// What a refused layout could switch to: the remat policy (common/remat_policy.h) with the
// least recompute whose estimated peak fits, from the per-chip bytes of each block's named
// tensors. Appended by simulate() to the "does not fit" error; an estimate, not a walk.
#pragma once

#include <array>
#include <string>

#include "common/model_args.h"
#include "common/remat_policy.h"
#include "devices/memory_model.h"
#include "parallel/parallel_dims.h"
#include "trainer/config/job_config.h"

namespace titan {

// Bytes one block's named tensors take on a chip for one micro-batch (its TP and SP split).
std::array<double, kRematTensors> block_tensor_bytes(const JobConfig& cfg, const ParallelDims& dims, const ModelArgs& a);

// Bytes per block the config's checkpointing keeps on device, counting named tensors only
// (a lower bound for modes that keep more than names: none, selective, op-level).
double kept_bytes_per_block(const JobConfig& cfg, const std::array<double, kRematTensors>& bytes);

// "; estimated to fit: --activation_checkpoint.mode policy --activation_checkpoint.policy X
// (about N GiB per chip ...)" or "; no remat policy fits by estimate (...)"; "" where the
// layout fits or runs a pipeline (each stage holds its own number of micro-batches).
std::string remat_advice(const JobConfig& cfg, const ParallelDims& dims, const ModelArgs& a,
                         const devices::MemoryReport& r);

}  // namespace titan
