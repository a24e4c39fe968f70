// Async tensor parallelism in the step replay: which collectives run as a decomposed
// collective matmul, and which kernels beside them are their matmul partners. Used by
// step_simulator.cpp when SimulationOptions::async_tensor_parallel is on.
//
// The decomposition (Wang et al., "Overlap communication with dependent computation via
// decomposition", ASPLOS 2023; PyTorch's micro-pipeline TP, which TorchTitan's
// parallelism.enable_async_tensor_parallel turns on; Megatron's --tp-comm-overlap): with
// sequence parallelism, the all-gather of a [S/tp, D] activation before a column-parallel
// matmul is a ring of tp - 1 steps, and the matmul on the shard already here runs while the
// next one travels; the reduce-scatter after a row-parallel matmul likewise sends each chunk's
// partial sums while the next chunk is computed. A pair that took transfer + matmul then
// takes about max(matmul, transfer) + one chunk of the smaller.
#pragma once

#include <cstddef>
#include <vector>

#include "devices/compute_cost.h"
#include "devices/step_simulator.h"

namespace titan::devices {

// The mesh dimension whose collectives decompose (the tensor-parallel group, as the trainer's
// DeviceMesh names it).
inline constexpr const char* kTensorParallelGroup = "tp";

// A tensor-parallel all-gather or reduce-scatter (sequence parallelism's collectives): the
// ones async TP runs as collective matmuls. All-reduces (TP without sequence parallelism, loss
// parallelism) stay whole, as in TorchTitan, whose async TP needs sequence parallelism.
bool decomposes_with_matmul(const CollectiveDesc& c);

// Kernels [begin, end) of one lowered compute run.
struct KernelSpan {
  size_t begin = 0, end = 0;
  bool empty() const { return begin >= end; }
};

// The matmuls a tensor-parallel all-gather feeds: the run at the start of `kernels` (the
// compute after the gather's wait) of matmuls, layout copies (the trainer gathers along the
// sequence into a [S, B, D] buffer and the linear reads it as [B * S, D]) and free kernels
// (views), up to its last matmul; before the first matmul, row-wise kernels (element-wise,
// reductions over the last dim: the activation op-level checkpointing recomputes ahead of a
// backward matmul) join too, as chunks are sequence rows. Several matmuls in a row share the
// gathered input (q, k, v; the MLP's two input projections; a row-parallel layer's input and
// weight gradients), as PyTorch's fused all-gather matmul takes a list of weights. Empty when
// no matmul comes before other work (attention, a fused kernel, data movement).
KernelSpan matmuls_fed_by_gather(const std::vector<Kernel>& kernels);

// The matmuls feeding a tensor-parallel reduce-scatter issued right after `kernels`: the run
// at their end, from `from` on, of matmuls, layout copies, free kernels and gradient sums
// (aten::add: backward adds the input gradients of q, k and v before scattering them), from
// its first matmul. Backward's weight-gradient matmuls in that run overlap the scatter too,
// as Megatron's bulk overlap does. Empty when no matmul is in that run.
KernelSpan matmuls_feeding_scatter(const std::vector<Kernel>& kernels, size_t from);

}  // namespace titan::devices
