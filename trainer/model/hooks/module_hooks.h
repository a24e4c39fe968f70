// The generic points where parallel plans attach to a model from outside: a wrapper around a
// forward function, and a module whose forward reads its weight through a member that a plan
// may repoint. The model (trainer/model/model.h) builds on these and knows nothing else of
// parallelism; FSDP, TP and activation checkpointing use them.
#pragma once

#include <functional>

#include <torch/torch.h>

namespace titan {

// A forward function and a wrapper around it: wrap(x, inner) may transform the input, call
// inner, and transform the output.
using ForwardFn = std::function<torch::Tensor(const torch::Tensor&)>;
using WrapFn = std::function<torch::Tensor(const torch::Tensor&, const ForwardFn&)>;

// A block wrapper also sees the layer index; wrappers run outermost first.
using BlockWrapFn =
    std::function<torch::Tensor(int64_t layer, const torch::Tensor& x, const ForwardFn& inner)>;

// Attention over this rank's q [B, H, S, D], k and v [B, KV, S, D] (after RoPE) with the given
// softmax scale, returning [B, H, S, D]: set, it replaces the model's own causal attention, so a
// plan that splits the sequence (context parallel) can attend across ranks.
using AttentionFn = std::function<torch::Tensor(const torch::Tensor& q, const torch::Tensor& k,
                                                const torch::Tensor& v, double scale)>;

inline torch::Tensor apply_wrap(const WrapFn& wrap, const torch::Tensor& x, const ForwardFn& inner) {
  return wrap ? wrap(x, inner) : inner(x);
}

// A module with one weight that its forward reads through the `weight` member. A plan may
// point the member at another tensor of the same logical shape (FSDP: the all-gathered
// parameter) while the registered parameter stays the one the optimizer sees.
class WeightModule : public torch::nn::Module {
 public:
  torch::Tensor weight;
  WrapFn wrap;
};

}  // namespace titan
