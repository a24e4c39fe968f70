// The hook between an MoE block's routing and its experts (the contract with expert
// parallelism, /tmp/moe_interface.md in the session; parallel/expert_parallel.* implements it).
// The model groups the routed tokens by global expert id; a dispatch may send them to the
// ranks that hold those experts and bring the results back. The model knows no collective:
// without a dispatch it runs every expert itself.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <torch/torch.h>

namespace titan {

// Runs the experts this rank holds on tokens grouped by *local* expert id (counts[i] tokens
// for local expert i, in order) and returns their outputs [M, dim] in the same order.
using LocalExpertsFn = std::function<torch::Tensor(const torch::Tensor& tokens, const std::vector<int64_t>& counts)>;

struct ExpertDispatch {
  virtual ~ExpertDispatch() = default;
  // routed [N, dim], grouped by global expert id, with counts (size: the model's experts E);
  // returns the experts' outputs for these N rows in the same order (differentiable: the
  // backward is the reverse exchange).
  virtual torch::Tensor run(const torch::Tensor& routed, const std::vector<int64_t>& counts,
                            const LocalExpertsFn& local_experts) = 0;
};

}  // namespace titan
