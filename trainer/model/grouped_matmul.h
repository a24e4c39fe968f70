// The experts' products of a mixture-of-experts layer as one grouped matmul: rows of x grouped
// by expert (counts[e] rows for expert e, in expert order) times each expert's weight.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace titan {

// Profiling scope around one grouped matmul; inputs: x [M, in], w [E, out, in] and the rows
// per expert (an int list). Frameworks run it as one kernel (torch._grouped_mm, cutlass
// GroupedGEMM, megablox), so a recording for an accelerator keeps the scope as one grouped
// GEMM and its backward as one grouped GEMM per gradient (trainer/simulate/recorder_callbacks.cpp).
constexpr const char* kGroupedMatmulScope = "titan::grouped_mm";

// [M, out]: the rows of expert e times w[e]^T. On the CPU a loop of mm over each expert's rows
// (the reference path); the scope is only an annotation, it changes no math.
torch::Tensor grouped_mm(const torch::Tensor& x, const torch::Tensor& w, const std::vector<int64_t>& counts);

}  // namespace titan
