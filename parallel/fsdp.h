// FSDP2-style fully sharded data parallel (and DDP / HSDP through the same units), applied to
// a model from outside through module_hooks.h. Used by the trainer's parallelize step.
//
// Each parameter is flattened, padded to a multiple of the shard group size and split on
// dim 0; the registered parameter becomes this rank's 1-D shard (what the optimizer sees).
// Units, as TorchTitan wraps them: the token embedding, each transformer block, and the head
// (final norm + output); with tied embeddings the embedding joins the head, which is then
// gathered for the whole forward. A unit all-gathers its shards before its forward and
// points each module's `weight` member at the gathered tensor through an autograd function
// whose backward reduce-scatters the gradient. The reduced shard gradient is summed over the
// replicate group (HSDP / DDP) and accumulated into the shard's .grad at the end of backward
// (an autograd engine final callback, so the train loop calls nothing).
//
// Gradients are summed, not averaged, over data-parallel ranks: the trainer normalizes each
// rank's loss by the tokens of the whole global batch, so the sum is the global mean.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "collectives/communicator.h"
#include "trainer/model/hooks/module_hooks.h"

namespace titan {

struct FsdpOptions {
  // kDefault: blocks free their gathered parameters after forward and gather them again
  // for backward, the root keeps them (its backward comes first); kAlways: every unit
  // frees; kNever: no unit frees before the end of backward.
  enum class Reshard { kDefault, kAlways, kNever };
  Reshard reshard_after_forward = Reshard::kDefault;
  torch::ScalarType param_dtype = torch::kFloat32;   // all-gather and compute dtype
  torch::ScalarType reduce_dtype = torch::kFloat32;  // gradient reduction dtype
};

struct NamedModule {
  std::string name;  // e.g. "layers.3.attention.wq"; the parameter is name + ".weight"
  std::shared_ptr<WeightModule> module;
};

class FsdpUnit;

// Where a parameter's shard lies: elements [offset, offset + length) of its full (TP-local)
// value flattened row-major; the shard itself holds shard_len elements, the tail past
// `length` being padding (the full value is padded to shard_len x group size).
struct FsdpShard {
  std::vector<int64_t> full_shape;
  int64_t offset = 0, length = 0, shard_len = 0;
};

class Fsdp {
 public:
  // shard_group: the dp_shard (x cp) communicator; replicate_group: dp_replicate (size 1:
  // plain FSDP; shard size 1 and replicate > 1: DDP). Units: the embedding, the blocks in
  // forward order, the head; `tied`: the embedding module is listed in `head` and
  // `embedding` is empty. Any list may be empty (a pipeline rank holds some stages only).
  // Shards the parameters in place.
  Fsdp(std::shared_ptr<Communicator> shard_group, std::shared_ptr<Communicator> replicate_group,
       const FsdpOptions& options, std::vector<NamedModule> embedding,
       std::vector<std::vector<NamedModule>> blocks, std::vector<NamedModule> head, bool tied);
  ~Fsdp();

  // Expert parallelism (parallel/expert_parallel.h): block i's expert weights,
  // expert_blocks[i], form a unit of their own sharded over `expert_shard_group` (efsdp, the
  // ranks holding the same experts) instead of the shard group. It is gathered, installed,
  // resharded and reduced alongside block i's unit; gradients sum over efsdp (the expert
  // exchange's backward already brought every ep peer's tokens' contribution) and over the
  // replicate group. Call once, before the first forward; a list may be empty.
  void add_expert_units(std::shared_ptr<Communicator> expert_shard_group,
                        std::vector<std::vector<NamedModule>> expert_blocks);

  // Hooks to install on the model: the root wrapper around the whole forward, the block
  // wrapper around each block (layer i -> block unit i), and (untied only) the wrappers of
  // the embedding module and of the final norm, where the embedding and head units gather.
  WrapFn root_wrapper();
  BlockWrapFn block_wrapper();
  WrapFn embedding_wrapper();
  WrapFn head_wrapper();
  bool tied() const { return tied_; }

  // FSDP2's set_requires_gradient_sync: false keeps gradients unsharded and accumulating
  // locally (no reduce-scatter) until a backward runs with it true again, so gradient
  // accumulation reduces once per step instead of once per micro-batch.
  void set_requires_gradient_sync(bool sync) { sync_ = sync; }
  // FSDP2's set_reshard_after_backward: true (the default) frees a unit's gathered parameters
  // as soon as all its gradients are in; false keeps them, across backward calls, until
  // reshard_all(), as a pipeline schedule does (PyTorch's pipelining turns it off but for the
  // last micro-batch: a stage's blocks run forward and backward again for the next one, and
  // reuse the gathered parameters instead of gathering them again).
  void set_reshard_after_backward(bool reshard) { reshard_after_backward_ = reshard; }

  // Waits for every outstanding gradient reduction and accumulates the shards' .grad;
  // frees gathered parameters still held unless reshard_after_backward is off. Runs by
  // itself at the end of each backward.
  void finish_backward();
  // Frees every unit's gathered parameters: the end of a pipeline step, which kept them.
  void reshard_all();

  // The shard of a parameter this plan manages (by identity); throws for any other tensor.
  FsdpShard shard_of(const torch::Tensor& param) const;
  // The group that parameter is sharded over (the shard group, or efsdp for expert weights).
  Communicator& shard_group_of(const torch::Tensor& param) const;
  const FsdpOptions& options() const { return options_; }
  bool fused() const;

 private:
  std::shared_ptr<Communicator> shard_group_, replicate_group_;
  FsdpOptions options_;
  std::vector<std::unique_ptr<FsdpUnit>> units_;  // [0] embedding (tied: head), [1 + i] block i, [last] head
  std::shared_ptr<Communicator> expert_group_;
  std::vector<std::unique_ptr<FsdpUnit>> expert_units_;  // [i] block i's experts (none without EP)
  // Every unit, expert ones included.
  std::vector<FsdpUnit*> all_units() const;
  void wire(FsdpUnit& unit);
  bool tied_ = false;
  bool sync_ = true;
  bool reshard_after_backward_ = true;
  bool finish_queued_ = false;
  FsdpUnit* last_reducing_ = nullptr;  // the unit whose reduce-scatter was issued last
  FsdpUnit& head_unit() { return tied_ ? *units_.front() : *units_.back(); }
};

// The full (unpadded) value of a sharded parameter, gathered over the shard group; used by
// tests and checkpoints. Every member of the group must call it.
torch::Tensor gather_full_parameter(Communicator& shard_group, const torch::Tensor& shard,
                                    at::IntArrayRef full_shape);

}  // namespace titan
