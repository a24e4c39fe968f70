// JobConfig: every setting of a titan job, with TorchTitan's section and key names.
// Filled by config_loader.h from defaults, a TOML file and --section.key overrides;
// read by the trainer, the parallel plans and the simulator. Every choice is an enum,
// checked once at load (config_enums.h holds the names users write).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/model_args.h"
#include "common/run_settings.h"
#include "trainer/config/config_enums.h"

namespace titan {

struct JobSection {
  std::string dump_folder = "./outputs";
  std::string description = "titan job";
  bool print_config = false;
};

// The sizes (ModelShape) override the flavor's where > 0; "flavor" keeps its switches.
struct ModelSection : ModelShape {
  ModelFamily name = ModelFamily::kQwen3;
  std::string flavor = "debugmodel";
  std::string tokenizer_path = "";  // "" or "byte": byte-level; else a HF tokenizer.json
  // A vocabulary taken from the tokenizer is padded to a multiple of this times the TP degree.
  int64_t vocab_size_divisible_by = 1;
  FlavorBool tie_embeddings = FlavorBool::kFlavor;
  FlavorBool qk_norm = FlavorBool::kFlavor;
  MlpActivation mlp_activation = MlpActivation::kSwiglu;  // every flavor's
  // Mixture of experts (the sizes are ModelShape's moe_*; trainer/model/moe.h).
  FlavorBool moe_norm_topk_prob = FlavorBool::kFlavor;
  double moe_aux_loss_coeff = -1;    // -1: the flavor's
  // Aux-loss-free balancing, token capacity, one grouped matmul per expert projection (else a
  // loop): their defaults are ModelArgs's.
  double moe_bias_update_coeff = ModelArgs().moe_bias_update_coeff;
  double moe_capacity_factor = ModelArgs().moe_capacity_factor;
  bool moe_grouped_mm = ModelArgs().moe_grouped_mm;
};

struct OptimizerSection {
  OptimizerName name = OptimizerName::kAdamW;
  double lr = 8e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

struct LrSchedulerSection {
  int64_t warmup_steps = 200;
  double decay_ratio = -1;  // < 0: decay over every step after warmup
  DecayType decay_type = DecayType::kLinear;
  double min_lr_factor = 0.0;
};

struct TrainingSection {
  int64_t local_batch_size = 8;
  int64_t global_batch_size = -1;  // -1: local_batch_size * data-parallel degree
  int64_t seq_len = 2048;
  double max_norm = 1.0;
  int64_t steps = 10000;
  DatasetKind dataset = DatasetKind::kCorpus;  // corpus: the shipped corpus; text: dataset_path
  std::string dataset_path = "";
  Dtype mixed_precision_param = Dtype::kFloat32;
  Dtype mixed_precision_reduce = Dtype::kFloat32;
  // Under FSDP / HSDP / DDP: the dtype of the stored parameters, and so of their gradients
  // and AdamW moments (fp32: FSDP2's mixed precision; bfloat16: MaxText's weight_dtype).
  Dtype master_dtype = Dtype::kFloat32;
  int64_t seed = 0;
  bool deterministic = false;
  bool fused_kernels = true;  // false: composite ATen ops (trainer/model/kernels/fused_kernels.h)
  // Non-finite loss or gradient norm: false stops the job with an error, true skips the
  // optimizer step and counts it (Trainer::skipped_steps). Weights never take NaN/Inf.
  bool skip_nonfinite_steps = false;
  int64_t threads = 0;  // 0: cores on this host divided by the ranks on this host
};

struct ParallelismSection {
  int64_t data_parallel_replicate_degree = 1;
  int64_t data_parallel_shard_degree = -1;
  int64_t tensor_parallel_degree = 1;
  int64_t pipeline_parallel_degree = 1;
  int64_t context_parallel_degree = 1;
  // Expert parallelism (parallel/expert_parallel.h): experts split over this many of the
  // dp_shard x cp ranks; expert TP is not supported yet (1 only).
  int64_t expert_parallel_degree = 1;
  int64_t expert_tensor_parallel_degree = 1;
  std::string context_parallel_rotate_method = "allgather";  // or "alltoall" (parallel/context_parallel.h)
  ReshardPolicy fsdp_reshard_after_forward = ReshardPolicy::kDefault;
  bool fsdp_defer_gradient_sync = true;  // gradient accumulation: reduce once, after the last micro-batch
  bool enable_sequence_parallel = true;
  // Async TP: sequence parallelism's all-gathers and reduce-scatters overlapped chunk by chunk
  // with the matmuls next to them. Simulated only (devices/collective_matmul.h); real runs
  // keep their TP collectives blocking and say so.
  bool enable_async_tensor_parallel = false;
  bool disable_loss_parallel = false;
  PipelineSchedule pipeline_parallel_schedule = PipelineSchedule::k1F1B;
  int64_t pipeline_parallel_microbatch_size = 1;
  int64_t pipeline_parallel_layers_per_stage = -1;  // -1: one stage per rank (two for multi-stage schedules)
  int64_t pipeline_parallel_first_stage_less_layers = 1;  // the embedding's weight in layers
  int64_t pipeline_parallel_last_stage_less_layers = 1;   // the norm and output's weight in layers
  std::string pipeline_parallel_schedule_csv = "";  // a custom schedule; "" : the named one
  bool pipeline_parallel_print_schedule = false;
};

struct CheckpointSection {
  bool enable = false;
  std::string folder = "checkpoint";
  int64_t interval = 500;
  int64_t keep_latest_k = 10;
  int64_t load_step = -1;
  std::string initial_load_path = "";
  bool initial_load_model_only = true;
  bool last_save_model_only = true;
  Dtype export_dtype = Dtype::kFloat32;
  AsyncMode async_mode = AsyncMode::kDisabled;
  bool create_seed_checkpoint = false;
  std::vector<std::string> exclude_from_loading;
};

struct ActivationCheckpointSection {
  AcMode mode = AcMode::kNone;
  int64_t selective_every = 2;  // selective: every Nth block is recomputed
  // TorchTitan's spelling: "op" (op-level selective AC), or N (every Nth block, in place of
  // selective_every); "": selective_every.
  std::string selective_ac_option;
  // mode = "policy": MaxText's remat_policy (common/remat_policy.h): minimal,
  // save_dot_with_context_except_mlp, save_dot_except_mlpwi, save_dot_except_mlp, save_qkv_proj,
  // minimal_offloaded, qkv_proj_offloaded, full or custom; custom saves the tensors named in
  // save_on_device, offloads those in offload_to_host (comma lists) and recomputes the rest.
  std::string policy = "full";
  std::string save_on_device;
  std::string offload_to_host;
  // Selective AC with the op-level policy (parallel/activation_checkpoint.h).
  bool op_level() const { return mode == AcMode::kSelective && selective_ac_option == "op"; }
  // Layer-level selective: every how many blocks one is recomputed (selective_ac_option's N
  // if it is one, else selective_every); a selective_ac_option that is neither "op" nor a
  // positive integer is a config error naming the key and the value.
  int64_t every() const;
};

struct MetricsSection {
  int64_t log_freq = 10;
  double peak_flops = 0;  // FLOP/s per rank; 0: measured at start with an sgemm probe
};

struct CommSection {
  CommBackend backend = CommBackend::kMpi;
  CollectiveMode collective_mode = CollectiveMode::kFused;
  double bucket_cap_mb = 25;
  double init_timeout_seconds = 300;
  double train_timeout_seconds = 100;
  std::string rendezvous_dir = "";  // gloo file store; "" : /tmp/titan-gloo-<launcher job id>
};

struct SimulationSection {
  bool enable = false;
  std::string device = "tpu-v7";
  int64_t num_chips = 8192;
  std::string topology = "";  // "" : chosen automatically
  Execution execution = Execution::kDeferAndFuse;
  std::string chip_file = "";  // a chip data file that adds or overrides a catalog chip
  bool allow_oom = false;      // report a layout that does not fit instead of refusing it
  // Under PP, record fewer micro-batches and replay all of them (trainer/simulate/simulate_pipeline.h).
  bool microbatch_extrapolation = true;
  // Under PP, ranks whose stages record the same segments are recorded once
  // (trainer/simulate/pipeline_rank_reuse.h).
  bool pipeline_rank_reuse = true;
  // The simulated framework runs attention as one flash kernel (scores never reach HBM). false:
  // it materialises the S x S scores (scaled QK^T, mask, softmax, PV as separate kernels), as
  // frameworks did before FlashAttention (2022), e.g. Megatron-LM's fused softmax.
  bool flash_attention = true;
  // Tokens per expert of an MoE model on the meta device, which routes no data: uniform or
  // skewed (Zipf over expert ids with exponent moe_routing_zipf; trainer/model/moe.h).
  std::string moe_routing = "uniform";
  // titan-train records three shallow depths and extends the figures to the model's depth
  // (trainer/simulate/extrapolated_run.h); falls back to a full recording where they do not extend.
  bool layer_extrapolation = false;
  double moe_routing_zipf = 1.0;
};

// [goodput]: the run model of titan-study (common/run_settings.h, docs/goodput.md).
using GoodputSection = RunSettings;

// TorchTitan's [profiling]: Chrome traces of real steps (trainer/step_profiler.h) and of a
// simulated step.
struct ProfilingSection {
  bool enable_profiling = false;
  std::string save_traces_folder = "profile_traces";  // under job.dump_folder
  int64_t profile_freq = 10;                          // every profile_freq-th step is traced
};

struct JobConfig {
  JobSection job;
  ModelSection model;
  OptimizerSection optimizer;
  LrSchedulerSection lr_scheduler;
  TrainingSection training;
  ParallelismSection parallelism;
  CheckpointSection checkpoint;
  ActivationCheckpointSection activation_checkpoint;
  MetricsSection metrics;
  ProfilingSection profiling;
  CommSection comm;
  SimulationSection simulation;
  GoodputSection goodput;
  std::string source_file;  // the TOML file it came from, "" if none
  // TorchTitan keys (and values) read but not implemented; load_job_config warns once.
  std::vector<std::string> ignored_keys;
};

}  // namespace titan
