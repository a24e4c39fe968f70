// Applies the parallel plans of the job to a Transformer from outside (TorchTitan's
// parallelize step): FSDP / HSDP / DDP units per block plus the root, activation
// checkpointing. Used by the Trainer (trainer/step/trainer.cpp).
#pragma once

#include <memory>

#include "parallel/device_mesh.h"
#include "parallel/fsdp.h"
#include "trainer/config/job_config.h"
#include "trainer/model/model.h"

namespace titan {

struct ParallelizedModel {
  std::unique_ptr<Fsdp> fsdp;  // null when no data parallelism is used
  // Expert parallelism (trainer/step/expert_plan.h): the ep group the MoE blocks exchange
  // tokens over and the efsdp group their experts are sharded over; null without EP.
  std::shared_ptr<Communicator> ep, efsdp;
  // Loss summed over tokens / normalizer, on what the model returns (full logits, or the
  // vocabulary shard under loss parallel).
  std::function<torch::Tensor(const torch::Tensor& logits, const torch::Tensor& labels,
                              double normalizer)>
      loss;
  // Tensor parallel: replicated parameters whose gradients are partial sums over the tp
  // group (per-head QK-norms; every norm under sequence parallel), all-reduced after
  // backward; and the parameters sharded over tp (their squares are summed over tp for the
  // global gradient norm, replicated ones are counted once).
  std::vector<torch::Tensor> tp_partial_grads;
  std::vector<torch::Tensor> tp_sharded;
  std::vector<int64_t> tp_shard_dims;  // the dim each tp_sharded parameter is split on
  // Ranks holding the same block of each tp_sharded parameter (1; > 1 for KV heads
  // replicated when tp exceeds them): gradients are summed over them after backward.
  std::vector<int64_t> tp_shard_replicas;
};

// "float32" | "bfloat16" | "float16" (the config's dtype names) as a torch dtype.
torch::ScalarType scalar_type(Dtype dtype);

// Checks that the model divides over the tensor-parallel degree; config errors otherwise.
void check_tensor_parallel(const ModelArgs& args, int64_t tp, int64_t seq_len, bool sequence_parallel);

// Installs ring attention over `cp` in every block and shards the RoPE tables like the sequence
// (context parallel); checks parallelism.context_parallel_rotate_method and training.seq_len.
void apply_context_parallel(Transformer& model, Communicator& cp, const JobConfig& cfg);

// Whether parallelize() shards or replicates parameters with FSDP units on this mesh
// (FSDP, HSDP or DDP).
bool applies_fsdp(const DeviceMesh& mesh);

// The FSDP reshard policy parallelize() applies: parallelism.fsdp_reshard_after_forward, whose
// "default" under PP (pipeline true) keeps every unit gathered from its first forward to the
// end of the pipeline step, as TorchTitan's default does: a stage's blocks run once per
// micro-batch, and freeing them after each forward would gather them twice per micro-batch
// instead of once per step. The memory pre-check sizes the gathered stage from it.
FsdpOptions::Reshard fsdp_reshard_policy(const JobConfig& cfg, bool pipeline);

class PipelineModel;
// pipeline (may be null): this rank's pipeline stages; parameters of other stages are freed
// after the TP plan and FSDP units cover only this rank's modules.
ParallelizedModel parallelize(Transformer& model, DeviceMesh& mesh, const JobConfig& cfg,
                              PipelineModel* pipeline = nullptr);

// The model's modules grouped as FSDP units: the head (final norm and output, or with tied
// weights final norm and embedding) and one unit per block.
std::vector<NamedModule> head_modules(Transformer& model);
std::vector<std::vector<NamedModule>> block_modules(Transformer& model);

}  // namespace titan
