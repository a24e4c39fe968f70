// Expert parallelism (TorchTitan's parallelism.expert_parallel_degree): the experts of each
// mixture-of-experts block are split over `ep` ranks borrowed from the data-parallel shard
// dims (dp_shard x cp), and routed tokens travel to the rank that holds their expert and back
// as two all-to-all-v exchanges. The expert weights are then FSDP-sharded over the remaining
// dp_shard x cp / ep ranks (TorchTitan's "efsdp"), which hold the same experts. Used by the
// trainer's parallelize step (trainer/step/expert_plan.cpp), which knows the model; this file
// knows only tensors and communicators.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "parallel/device_mesh.h"

namespace titan {

// Config checks, errors naming the keys: ep >= 1 divides dp_shard x cp (the "fsdp" group) and
// the model's experts; ep > 1 needs experts.
void check_expert_parallel(int64_t ep, int64_t dp_shard, int64_t cp, int64_t experts);

// Expert tensor parallelism (TorchTitan's parallelism.expert_tensor_parallel_degree): 1 keeps
// each MoE block's experts whole on every tp rank; tp shards them over the tensor-parallel group
// as a dense MLP is (w1 / w3 over their hidden rows, w2 over its hidden columns, the partial
// outputs summed over tp). TorchTitan allows no other value. Errors name the keys; experts:
// the model's experts per block (0: dense model); ffn dims of the experts and shared expert.
void check_expert_tensor_parallel(int64_t etp, int64_t tp, int64_t experts, int64_t moe_ffn_dim,
                                  int64_t shared_ffn_dim);

// Identity forward; backward multiplies the gradient by `factor`. Under expert TP every tp
// rank computes the same load-balancing loss, whose router gradient must count once in a
// sum over tp (parallel/expert_parallel.cpp's users: trainer/step/moe_tensor_plan.cpp).
torch::Tensor scale_gradient(const torch::Tensor& x, double factor);

// The two groups expert parallelism adds to the mesh. The fsdp group (dp_shard x cp, group
// rank f) splits into blocks of ep consecutive ranks: ep = the ranks of f's block (group rank
// f % ep: it holds experts [(f % ep) E/ep, (f % ep + 1) E/ep)); efsdp = the ranks at the same
// place in every block (group rank f / ep), which hold the same experts. Every rank calls it
// alike (it creates groups); ep == 1 gives the fsdp group for efsdp and a one-rank ep group.
// Group names carry the sizes: "ep<ep>" and "efsdp<dp_shard x cp / ep>".
struct ExpertGroups {
  std::shared_ptr<Communicator> ep, efsdp;
};
ExpertGroups build_expert_groups(DeviceMesh& mesh, int64_t ep);

// Runs the experts this rank holds on tokens grouped by local expert id (counts per local
// expert) and returns their outputs in that order.
using LocalExperts = std::function<torch::Tensor(const torch::Tensor&, const std::vector<int64_t>&)>;

// Token dispatch and combine over `ep` for one MoE block. routed [N, dim] is grouped by
// global expert id with counts[e] rows for expert e (E = counts.size(), E % ep.size() == 0).
// 1. The counts go to the ranks holding the experts (an all_to_all of E int64 per rank).
// 2. The rows go there too (all_to_all_single with uneven splits), are regrouped by local
//    expert, run through local_experts, put back in arrival order, and
// 3. return to their senders (the reverse all_to_all_single); the result is [N, dim] in
//    routed's order. Differentiable: each exchange's backward is the reverse exchange.
// On meta tensors (simulation) no counts can be read: every rank is taken to route like this
// one, so rank r receives counts[r E/ep .. (r+1) E/ep) from every peer; the collectives are
// still issued, so the sim backend records them with their sizes.
torch::Tensor expert_parallel_dispatch(const torch::Tensor& routed, const std::vector<int64_t>& counts,
                                       const LocalExperts& local_experts, Communicator& ep);

// Differentiable all_to_all_single: rows of x go out by in_splits and arrive by out_splits;
// the gradient goes back the reverse way.
torch::Tensor all_to_all_rows(const torch::Tensor& x, const std::vector<int64_t>& out_splits,
                              const std::vector<int64_t>& in_splits, Communicator& comm);

}  // namespace titan
