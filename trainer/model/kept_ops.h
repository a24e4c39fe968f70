// Autograd nodes for ops whose forward output was kept by an op-level activation-checkpointing
// policy (trainer/model/hooks/op_save_hook.h) and is reused in the block's recompute: the node returns
// the kept tensor, computing nothing, while its backward is the op's backward on the
// recomputed inputs. For the composite ATen paths of the model (the fused kernels take their
// kept outputs inside their own autograd functions).
#pragma once

#include <functional>
#include <vector>

#include <torch/torch.h>

namespace titan {

// y = x [..., in] @ w^T whose value is `kept`: backward gives dx = dy w and dw = dy^T x, as
// the composite matmul's backward does.
torch::Tensor kept_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& kept);

// f(inputs) whose value is `kept`: backward runs f again on the saved inputs with autograd on
// and back-propagates through it (for an op whose backward needs its internals, such as the
// composite attention's probabilities, which a kept output does not hold).
using TensorsFn = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;
torch::Tensor kept_recomputed(const std::vector<torch::Tensor>& inputs, const torch::Tensor& kept, TensorsFn f);

}  // namespace titan
