// The tensor-parallel plan of a mixture-of-experts block, for the two expert TP degrees
// TorchTitan allows (parallelism.expert_tensor_parallel_degree; the model-free pieces are in
// parallel/expert_parallel.h and parallel/tensor_parallel.h). Called by parallelize.cpp's TP
// plan for every MoE block, before expert parallelism slices the experts.
#pragma once

#include "parallel/device_mesh.h"
#include "trainer/config/job_config.h"
#include "trainer/model/model.h"
#include "trainer/step/parallelize.h"

namespace titan {

// parallelism.expert_tensor_parallel_degree against tensor_parallel_degree and the model.
void check_expert_tensor_parallel_config(const JobConfig& cfg, const ModelArgs& args);

// Whether the experts are sharded over tp (etp == tp > 1).
bool experts_tensor_parallel(const JobConfig& cfg);

// expert_tp false (etp 1): router and experts whole on every tp rank. Without sequence
// parallel every tp rank routes the same tokens and holds whole gradients; with it each rank
// routes its sequence shard, the block's gradients are partial sums over tp, and the
// load-balancing statistics are summed over tp before the loss is formed (exact, as one
// process computes it over the whole sequence).
// expert_tp true (etp == tp): the block is one tensor-parallel region like a dense MLP. Its
// input is the whole sequence on every tp rank (all-gathered under SP); the router runs
// replicated; the experts' w1 / w3 are split over their hidden rows and w2 over its hidden
// columns (the shared expert's likewise), so the combined output is a partial sum, reduced
// (all-reduce; reduce-scatter to the sequence shard under SP) as TorchTitan's
// ExpertTensorParallel does. The router's gradient is then a partial sum over tp.
void apply_moe_tensor_parallel(TransformerBlockImpl& block, Communicator& tp, bool sp, bool expert_tp,
                               ParallelizedModel& out);

}  // namespace titan
