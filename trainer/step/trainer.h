// Trainer: the state of one training job (mesh, data, model, plans, optimizer, step) and the
// training step itself. Used by train() (the loop), by checkpointing (which saves and
// restores the state below) and by the simulator (which runs one step on the meta device).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collectives/world.h"
#include "parallel/device_mesh.h"
#include "parallel/parallel_dims.h"
#include "trainer/data/data_loader.h"
#include "trainer/config/job_config.h"
#include "trainer/components/metrics.h"
#include "trainer/model/model.h"
#include "trainer/components/optimizer.h"
#include "trainer/step/parallelize.h"
#include "trainer/step/pipeline_model.h"
#include "trainer/step/tp_gradients.h"
#include "trainer/data/tokenizer.h"

namespace titan {

CommOptions comm_options(const JobConfig& cfg);
// The tokenizer's vocabulary when the model needs it to resolve its dims (debugmodel without
// model.vocab_size), else 0; reads no data.
int64_t vocab_without_data(const JobConfig& cfg);
// cfg with [model] holding the dims the job really uses (flavor resolved), for print_config.
JobConfig with_resolved_model(const JobConfig& cfg);
ParallelDims parallel_dims(const JobConfig& cfg, int64_t world_size);
// Intra-op threads for this rank: training.threads, or the host's cores divided by the ranks
// that mpirun placed on this host.
int choose_threads(const JobConfig& cfg);

class Trainer {
 public:
  // Starts the collective layer (or takes `world`), builds mesh, data, model, plans and
  // optimizer. Every rank constructs it with the same config.
  // on_meta (simulation): the model lives on the meta device (shapes, no memory, no
  // initialization), batches are meta tensors and no data is read; train_step() then issues
  // exactly the ops and collectives of a real step, and host-side values (loss, grad norm)
  // read as 0.
  explicit Trainer(const JobConfig& cfg, std::shared_ptr<World> world = nullptr, bool on_meta = false);

  struct StepResult {
    double loss = 0;       // global mean over the global batch
    double grad_norm = 0;  // global, before clipping
    double lr = 0;
    double seconds = 0;
    bool skipped = false;  // non-finite loss or gradient norm: no optimizer step was taken
  };
  // One optimizer step on the next global batch (micro-batches accumulated).
  StepResult train_step();

  // Every parameter's full value, gathered over FSDP shards and tensor-parallel blocks.
  // Collective: every rank calls it; all get the same map.
  std::map<std::string, torch::Tensor> gather_full_parameters();
  // The dim a parameter is split on over tp, or -1 when it is replicated over tp.
  int64_t tp_shard_dim(const std::string& name) const;
  // How many tp ranks hold the same block of it (> 1: KV heads replicated over tp).
  int64_t tp_shard_replicas(const std::string& name) const;

  // Memory of this rank, for metrics: parameters (shards), gradients, optimizer state.
  int64_t param_bytes() const;
  int64_t tokens_per_step() const { return global_batch_ * cfg_.training.seq_len; }
  int64_t global_batch() const { return global_batch_; }
  int64_t microbatches() const;
  bool is_writer() const { return world_->rank() == 0; }

  const JobConfig& config() const { return cfg_; }
  const ModelArgs& model_args() const { return args_; }
  World& world() { return *world_; }
  DeviceMesh& mesh() { return *mesh_; }
  const ParallelDims& dims() const { return dims_; }
  Transformer& model() { return model_; }
  AdamW& optimizer() { return *optimizer_; }
  DataLoader& loader() { return *loader_; }
  Fsdp* fsdp() { return parallel_.fsdp.get(); }
  // Expert parallelism's ep group (experts split on dim 0 over it); null without EP.
  Communicator* ep_group() { return parallel_.ep.get(); }
  PipelineModel* pipeline() { return pipeline_.get(); }  // null without pipeline parallelism
  int64_t step() const { return step_; }  // optimizer steps taken
  int64_t skipped_steps() const { return skipped_steps_; }  // of those, skipped as non-finite
  void set_step(int64_t s) { step_ = s; }

 private:
  JobConfig cfg_;
  std::shared_ptr<World> world_;
  ParallelDims dims_;
  std::shared_ptr<DeviceMesh> mesh_;
  bool on_meta_ = false;
  std::unique_ptr<Tokenizer> tokenizer_;
  ModelArgs args_;
  Transformer model_{nullptr};
  std::unique_ptr<PipelineModel> pipeline_;
  ParallelizedModel parallel_;
  TpGradientPlan tp_grads_;  // finishes the TP gradients after backward (tp_gradients.h)
  std::unique_ptr<DataLoader> loader_;
  std::unique_ptr<AdamW> optimizer_;
  std::vector<NamedParam> params_;
  double global_grad_sq_norm();
  torch::Tensor registered_embedding() const;
  bool skip_nonfinite(StepResult& r);
  void check_finite_parameters() const;
  // Forward and backward of one local batch through this rank's pipeline stages; returns the
  // loss sum this rank saw (the last stage's, 0 elsewhere). reduce: FSDP reduces the
  // gradients accumulated so far at REDUCE_GRAD (the step's last batch, or every batch
  // without deferred gradient sync).
  double pipeline_step(const torch::Tensor& inputs, const torch::Tensor& labels, double normalizer, bool reduce);
  Batch next_batch();

  int64_t global_batch_ = 0;
  int64_t step_ = 0;
  int64_t skipped_steps_ = 0;
};

}  // namespace titan
