// The expert-parallel plan for the model's MoE blocks (parallel/expert_parallel.h holds the
// model-free mechanics): each block keeps its ep rank's contiguous slice of experts and
// exchanges routed tokens with its ep peers. Applied by parallelize() (parallelize.cpp).
#pragma once

#include <vector>

#include "parallel/device_mesh.h"
#include "parallel/expert_parallel.h"
#include "parallel/fsdp.h"
#include "trainer/config/job_config.h"
#include "trainer/model/model.h"

namespace titan {

// parallelism.expert_parallel_degree against the mesh and the model; config errors name the key
// (expert_tensor_parallel_degree: trainer/step/moe_tensor_plan.h).
void check_expert_parallel_config(const JobConfig& cfg, const ModelArgs& args, const DeviceMesh& mesh);

// Slices every MoE block's experts.w1/w2/w3 to experts [r E/ep, (r+1) E/ep) of ep rank r (the
// registered parameters keep their identity) and installs the all-to-all dispatch. ep of size 1:
// nothing changes.
void apply_expert_parallel(Transformer& model, std::shared_ptr<Communicator> ep);

// The expert weight modules of each block (empty lists for dense blocks), "layers.<i>.moe.
// experts.w1" ...: the units FSDP shards over efsdp.
std::vector<std::vector<NamedModule>> expert_modules(Transformer& model);

// Whether a module name (as block_modules lists it) is one of a block's expert weights.
bool is_expert_module(const std::string& name);

// Sets model->reduce_expert_load to sum the MoE load counters over each of `groups` in turn
// (every rank that routes other tokens: dp_replicate x dp_shard x cp, and tp under sequence
// parallel), so the aux-loss-free bias update sees the global batch's load as one process does.
void sum_expert_load_over(Transformer& model, std::vector<std::shared_ptr<Communicator>> groups);

}  // namespace titan
