// FSDP2-style fully sharded data parallel (and DDP / HSDP through the same units), applied to
// a model from outside through module_hooks.h. Used by the trainer's parallelize step.
//
// Each parameter is flattened, padded to a multiple of the shard group size and split on
// dim 0; the registered parameter becomes this rank's 1-D shard (what the optimizer sees).
// A unit (one transformer block, or the root: embeddings, final norm, output) all-gathers
// its shards before its forward and points each module's `weight` member at the gathered
// tensor through an autograd function whose backward reduce-scatters the gradient. The
// reduced shard gradient is summed over the replicate group (HSDP / DDP) and accumulated
// into the shard's .grad by finish_backward().
//
// Gradients are summed, not averaged, over data-parallel ranks: the trainer normalizes each
// rank's loss by the tokens of the whole global batch, so the sum is the global mean.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "collectives/communicator.h"
#include "parallel/module_hooks.h"

namespace titan {

struct FsdpOptions {
  // "default": blocks free their gathered parameters after forward and gather them again
  // for backward, the root keeps them (its backward comes first); "always": every unit
  // frees; "never": no unit frees before the end of backward.
  std::string reshard_after_forward = "default";
  torch::ScalarType param_dtype = torch::kFloat32;   // all-gather and compute dtype
  torch::ScalarType reduce_dtype = torch::kFloat32;  // gradient reduction dtype
};

struct NamedModule {
  std::string name;  // e.g. "layers.3.attention.wq"; the parameter is name + ".weight"
  std::shared_ptr<WeightModule> module;
};

class FsdpUnit;

class Fsdp {
 public:
  // shard_group: the dp_shard (x cp) communicator; replicate_group: dp_replicate (size 1:
  // plain FSDP; shard size 1 and replicate > 1: DDP). Units are given root first, then
  // blocks in forward order. Shards the parameters in place.
  Fsdp(std::shared_ptr<Communicator> shard_group, std::shared_ptr<Communicator> replicate_group,
       const FsdpOptions& options, std::vector<NamedModule> root,
       std::vector<std::vector<NamedModule>> blocks);
  ~Fsdp();

  // Hooks to install on the model: the root wrapper around the whole forward, the block
  // wrapper around each block (layer i -> unit i).
  WrapFn root_wrapper();
  BlockWrapFn block_wrapper();

  // Waits for every outstanding gradient reduction and accumulates the shards' .grad;
  // frees gathered parameters still held. Call after each backward.
  void finish_backward();

  // Bytes of this rank's parameter shards (padding included).
  int64_t shard_bytes() const;
  const FsdpOptions& options() const { return options_; }
  bool fused() const;

 private:
  std::shared_ptr<Communicator> shard_group_, replicate_group_;
  FsdpOptions options_;
  std::vector<std::unique_ptr<FsdpUnit>> units_;  // [0] root, [1 + i] block i
};

// The full (unpadded) value of a sharded parameter, gathered over the shard group; used by
// tests and checkpoints. Every member of the group must call it.
torch::Tensor gather_full_parameter(Communicator& shard_group, const torch::Tensor& shard,
                                    at::IntArrayRef full_shape);

}  // namespace titan
