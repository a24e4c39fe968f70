// PipelineModel: pipeline parallelism applied to the Trainer's model from outside. Splits the
// layers into stages (parallel/pipeline_stages.h), builds the schedule (by name, or from a
// CSV), knows which stages and parameters this rank holds, frees the others, and runs a
// batch of micro-batches through parallel/pipeline_runtime.h with this rank's stages as
// slices of the model (embedding on the first, norm and output on the last). Used by the
// Trainer (train_step, parameter gathering) and by parallelize() (FSDP units per rank).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/device_mesh.h"
#include "parallel/fsdp.h"
#include "parallel/pipeline_runtime.h"
#include "parallel/pipeline_stages.h"
#include "trainer/config/job_config.h"
#include "trainer/model/model.h"

namespace titan {

struct ParallelizedModel;

// The stage split and the schedule that every rank derives from the config: PipelineModel
// runs them, the memory pre-check (memory_limits.h) sizes a rank's share from them.
struct PipelinePlan {
  std::vector<StageLayers> stages;
  PipeSchedule schedule;
};
// pp ranks; fsdp: FSDP units will shard the rank's parameters (the schedule then carries
// REDUCE_GRAD). Config errors for an unknown schedule, layers that cannot be split, a
// micro-batch size that does not divide the local batch, too few or too many micro-batches
// for the schedule.
PipelinePlan plan_pipeline(const JobConfig& cfg, const ModelArgs& args, int64_t pp, bool fsdp);

class PipelineModel {
 public:
  // plan: plan_pipeline's for this config and mesh (every rank builds the same; the trainer
  // builds it once for the memory pre-check and this).
  PipelineModel(const JobConfig& cfg, const ModelArgs& args, DeviceMesh& mesh, PipelinePlan plan, bool on_meta);
  ~PipelineModel();

  const PipeSchedule& schedule() const { return schedule_; }
  int64_t microbatches() const { return schedule_.num_microbatches; }  // per schedule run
  const std::vector<int>& local_stages() const { return local_stages_; }
  const StageLayers& stage(int s) const { return stages_[s]; }
  bool holds_layer(int64_t layer) const;
  // Whether this rank keeps a parameter: its own stages', plus, with tied embeddings, the
  // last stage's copy of the embedding (its output projection).
  bool holds(const std::string& param_name) const;
  // The pipeline rank (pp coordinate) that owns a parameter: for the tied embedding, the
  // first stage's (checkpoints and gathered parameters take it from there).
  int owner(const std::string& param_name) const;
  // Whether this rank runs the first stage (embedding) / the last stage (norm and output).
  bool runs_embedding() const { return runs_embedding_; }
  bool runs_output() const { return runs_output_; }

  // Tied embeddings (Megatron's way, docs/pipeline.md): the first stage's rank owns
  // tok_embeddings.weight and the last stage's rank holds a copy, sharded alike, as its
  // output projection. The copy is not counted in the gradient norm and not written to
  // checkpoints; tied_copy() is true on the rank holding it (and not the first stage).
  bool tied_copy() const { return tied_ && runs_output_ && !runs_embedding_; }
  // After backward (and FSDP's reduce-scatter), before clipping: sums the two copies'
  // gradients over {first stage rank, last stage rank} of this (dp, tp) coordinate, so both
  // take the same optimizer step. `param`: this rank's registered tok_embeddings.weight (under
  // FSDP its shard, sharded alike on both), whose .grad is summed; a no-op on other ranks and
  // where one rank runs both stages (its one parameter already sums both uses).
  void sum_tied_gradients(const torch::Tensor& param, Fsdp* fsdp);
  // The group of that all-reduce (null where this rank is not in one); its name, "pp_ends",
  // is the one the simulator places on the first and last pipeline ranks.
  const std::shared_ptr<Communicator>& tied_group() const { return tied_group_; }

  // After the TP plan, before FSDP: frees the parameters of other ranks' stages (their
  // modules never run here) and drops them from the TP lists; under a split-backward
  // schedule, routes this rank's linear layers through deferred_linear.
  void apply(Transformer& model, ParallelizedModel& plan);
  // FSDP block units of this rank (its blocks in order), and the FSDP block wrapper indexed
  // by that order.
  std::vector<std::vector<NamedModule>> block_modules(Transformer& model) const;
  BlockWrapFn local_block_wrapper(BlockWrapFn by_local_index) const;

  // Forward and backward of one batch (local_batch_size rows) through the schedule; returns
  // the last stage's loss sum (undefined on other ranks). loss_fn maps (logits, labels) to
  // the normalized loss; root_wrap (may be empty) wraps the last stage's forward (FSDP's
  // root wrapper, which frees the head after forward); reduce_grad runs once this rank's
  // stages have all reached REDUCE_GRAD (or at the end when the schedule has none).
  torch::Tensor run(Transformer& model, const torch::Tensor& inputs, const torch::Tensor& labels,
                    const std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>& loss_fn,
                    const WrapFn& root_wrap, const std::function<void()>& reduce_grad);

  // Set by parallelize() when FSDP's head unit holds the tied embedding on a rank running
  // both the first and the last stage: run() then wraps the first stage in root_wrap too.
  bool root_wraps_embedding = false;

  // Simulation: sees each action begin and end.
  std::function<void(const PipeAction&, bool begin)> observer;

 private:
  int64_t microbatch_size_ = 1, seq_local_ = 0, dim_ = 0;
  torch::TensorOptions activation_options_;
  std::vector<StageLayers> stages_;
  PipeSchedule schedule_;
  std::vector<int> local_stages_;
  int rank_ = 0;
  bool tied_ = false, runs_embedding_ = false, runs_output_ = false;
  std::shared_ptr<Communicator> tied_group_;
  WeightGradStore store_;
  std::unique_ptr<PipelineRuntime> runtime_;
};

}  // namespace titan
