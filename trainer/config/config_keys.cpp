#include "trainer/config/config_keys.h"

#include <algorithm>
#include <functional>
#include <type_traits>

#include "common/error.h"

namespace titan {
namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

Registry make_registry(JobConfig& c) {
  Registry r;
  r.add("job", "dump_folder", &c.job.dump_folder, "folder for metrics, traces, checkpoints");
  r.add("job", "description", &c.job.description, "free text");
  r.add("job", "print_config", &c.job.print_config, "print the resolved config at start");

  r.add("model", "name", &c.model.name, "model family");
  r.add("model", "flavor", &c.model.flavor, "published size, e.g. debugmodel, 0.6B, 8B");
  r.add("model", "tokenizer_path", &c.model.tokenizer_path,
        "\"\" or \"byte\": byte-level; else a Hugging Face tokenizer.json");
  r.add("model", "dim", &c.model.dim, 0, kInf, "hidden size (0: flavor's)");
  r.add("model", "n_layers", &c.model.n_layers, 0, kInf, "layers (0: flavor's)");
  r.add("model", "n_heads", &c.model.n_heads, 0, kInf, "query heads (0: flavor's)");
  r.add("model", "n_kv_heads", &c.model.n_kv_heads, 0, kInf, "key/value heads (0: flavor's)");
  r.add("model", "head_dim", &c.model.head_dim, 0, kInf, "per-head dim (0: flavor's)");
  r.add("model", "ffn_dim", &c.model.ffn_dim, 0, kInf, "MLP intermediate size (0: flavor's)");
  r.add("model", "vocab_size", &c.model.vocab_size, 0, kInf,
        "vocabulary (0: flavor's, or the tokenizer's for debugmodel)");
  r.add("model", "vocab_size_divisible_by", &c.model.vocab_size_divisible_by, 1, kInf,
        "a tokenizer's vocabulary is padded to a multiple of this x the TP degree");
  r.add("model", "tie_embeddings", &c.model.tie_embeddings,
        "share input embedding and output projection");
  r.add("model", "rope_theta", &c.model.rope_theta, 0, kInf, "RoPE base (0: flavor's)");
  r.add("model", "norm_eps", &c.model.norm_eps, 0, 1, "RMSNorm epsilon (0: flavor's)");
  r.add("model", "qk_norm", &c.model.qk_norm, "RMSNorm on q and k per head");
  r.add("model", "mlp_activation", &c.model.mlp_activation,
        "MLP: swiglu, gated w2(silu(w1 x) * w3 x) (every flavor's); gelu (tanh approximation) or relu, "
        "non-gated w2(act(w1 x)) with no w3, as GPT-3 / Megatron GPT (gelu) and MaxText's synthetic runs (relu)");
  r.add("model", "moe_experts", &c.model.moe_experts, 0, kInf, "routed experts per MoE block (0: flavor's; dense)");
  r.add("model", "moe_top_k", &c.model.moe_top_k, 0, kInf, "experts per token (0: flavor's)");
  r.add("model", "moe_ffn_dim", &c.model.moe_ffn_dim, 0, kInf, "each expert's intermediate size (0: flavor's)");
  r.add("model", "moe_shared_ffn_dim", &c.model.moe_shared_ffn_dim, 0, kInf,
        "an always-on shared expert's intermediate size (0: flavor's; none in Qwen3)");
  r.add("model", "moe_sparse_step", &c.model.moe_sparse_step, 0, kInf,
        "layer l is MoE when (l + 1) % step == 0 (HF decoder_sparse_step; 0: flavor's)");
  r.add("model", "moe_norm_topk_prob", &c.model.moe_norm_topk_prob, "renormalise the top-k router weights to sum 1");
  r.add("model", "moe_aux_loss_coeff", &c.model.moe_aux_loss_coeff, -1, kInf,
        "load-balancing loss coefficient, E * sum_i f_i P_i per MoE block (-1: flavor's, 0.001 for Qwen3 MoE)");
  r.add("model", "moe_bias_update_coeff", &c.model.moe_bias_update_coeff, 0, kInf,
        "aux-loss-free balancing: expert bias step after each optimizer step (0: off)");
  r.add("model", "moe_capacity_factor", &c.model.moe_capacity_factor, 0, kInf,
        "tokens each expert takes, x N k / E; slots past it are dropped (0: dropless)");
  r.add("model", "moe_grouped_mm", &c.model.moe_grouped_mm,
        "experts' products as one grouped matmul per projection, simulated as one grouped GEMM "
        "(TorchTitan's use_grouped_mm; false: a loop of one GEMM per expert)");

  r.add("optimizer", "name", &c.optimizer.name, "optimizer");
  r.add("optimizer", "lr", &c.optimizer.lr, 0, kInf, "peak learning rate");
  r.add("optimizer", "beta1", &c.optimizer.beta1, 0, 0.999999, "AdamW beta1");
  r.add("optimizer", "beta2", &c.optimizer.beta2, 0, 0.999999, "AdamW beta2");
  r.add("optimizer", "eps", &c.optimizer.eps, 0, 1, "AdamW epsilon");
  r.add("optimizer", "weight_decay", &c.optimizer.weight_decay, 0, kInf, "decoupled weight decay");

  r.add("lr_scheduler", "warmup_steps", &c.lr_scheduler.warmup_steps, 0, kInf,
        "linear warmup steps");
  r.add("lr_scheduler", "decay_ratio", &c.lr_scheduler.decay_ratio, -1, 1,
        "fraction of steps spent decaying at the end (-1: all steps after warmup)");
  r.add("lr_scheduler", "decay_type", &c.lr_scheduler.decay_type,
        "decay shape");
  r.add("lr_scheduler", "min_lr_factor", &c.lr_scheduler.min_lr_factor, 0, 1,
        "final lr as a fraction of lr");

  r.add("training", "local_batch_size", &c.training.local_batch_size, 1, kInf,
        "sequences per micro-batch per data-parallel rank");
  r.add("training", "global_batch_size", &c.training.global_batch_size, -1, kInf,
        "sequences per step over all ranks (-1: local x data-parallel degree)");
  r.add("training", "seq_len", &c.training.seq_len, 1, kInf, "tokens per sequence");
  r.add("training", "max_norm", &c.training.max_norm, 0, kInf,
        "gradient clipping by global norm (0: off)");
  r.add("training", "steps", &c.training.steps, 0, kInf, "optimizer steps");
  r.add("training", "dataset", &c.training.dataset,
        "corpus: the corpus shipped in trainer/data; text: the file at dataset_path");
  r.add("training", "dataset_path", &c.training.dataset_path,
        "plain text file read when dataset = \"text\"");
  r.add("training", "mixed_precision_param", &c.training.mixed_precision_param,
        "dtype of parameters in compute (all-gather dtype under FSDP)");
  r.add("training", "mixed_precision_reduce", &c.training.mixed_precision_reduce,
        "dtype of gradient reduction");
  r.add("training", "master_dtype", &c.training.master_dtype,
        "under FSDP / HSDP / DDP: dtype of the stored parameters, their gradients and AdamW moments (float32 as "
        "FSDP2; bfloat16 as MaxText's weight_dtype = bfloat16)");
  r.add("training", "seed", &c.training.seed, 0, kInf, "seed for initialization and data");
  r.add("training", "deterministic", &c.training.deterministic, "deterministic algorithms");
  r.add("training", "fused_kernels", &c.training.fused_kernels,
        "fused CPU kernels for RMSNorm, SwiGLU, RoPE, attention, cross entropy and the linear layers, each on the "
        "thread count timed fastest for its shape (false: composite ATen ops)");
  r.add("training", "skip_nonfinite_steps", &c.training.skip_nonfinite_steps,
        "non-finite loss or gradient norm: skip the step (true) or stop the job (false)");
  r.add("training", "threads", &c.training.threads, 0, 4096,
        "intra-op threads per rank (0: cores / ranks on this host)");

  auto& p = c.parallelism;
  r.add("parallelism", "data_parallel_replicate_degree", &p.data_parallel_replicate_degree, 1,
        kInf, "DDP / HSDP replicas");
  r.add("parallelism", "data_parallel_shard_degree", &p.data_parallel_shard_degree, -1, kInf,
        "FSDP shards (-1: inferred from the world size)");
  r.add("parallelism", "tensor_parallel_degree", &p.tensor_parallel_degree, 1, kInf, "TP");
  r.add("parallelism", "pipeline_parallel_degree", &p.pipeline_parallel_degree, 1, kInf, "PP");
  r.add("parallelism", "context_parallel_degree", &p.context_parallel_degree, 1, kInf,
        "CP: the sequence split over cp ranks (two load-balanced chunks each), ring attention across them");
  r.add("parallelism", "expert_parallel_degree", &p.expert_parallel_degree, 1, kInf,
        "EP: each MoE block's experts split over this many ranks borrowed from dp_shard x cp (TorchTitan's), "
        "tokens exchanged by all-to-all; expert weights FSDP-sharded over the rest of dp_shard x cp");
  r.add("parallelism", "expert_tensor_parallel_degree", &p.expert_tensor_parallel_degree, 1, kInf,
        "expert TP (TorchTitan's key): 1 keeps each MoE block's experts whole on every tp rank; "
        "tensor_parallel_degree shards their hidden dim over tp like a dense MLP (no other value)");
  r.add("parallelism", "context_parallel_rotate_method", &p.context_parallel_rotate_method,
        "how ring attention passes K/V: allgather (gather all at once) or alltoall (one ring step at a time, "
        "overlapped with attention)");
  r.add("parallelism", "fsdp_reshard_after_forward", &p.fsdp_reshard_after_forward, "free gathered parameters after forward");
  r.add("parallelism", "fsdp_defer_gradient_sync", &p.fsdp_defer_gradient_sync,
        "gradient accumulation: skip FSDP's reduce-scatter until the last micro-batch");
  r.add("parallelism", "enable_sequence_parallel", &p.enable_sequence_parallel,
        "shard norms along the sequence under TP");
  r.add("parallelism", "enable_async_tensor_parallel", &p.enable_async_tensor_parallel,
        "overlap sequence parallelism's all-gather / reduce-scatter with the matmul next to it, split into TP chunks "
        "(collective matmul; simulation only: real runs keep TP collectives blocking)");
  r.add("parallelism", "disable_loss_parallel", &p.disable_loss_parallel,
        "gather logits before the loss under TP");
  r.add("parallelism", "pipeline_parallel_schedule", &p.pipeline_parallel_schedule, "pipeline schedule");
  r.add("parallelism", "pipeline_parallel_microbatch_size", &p.pipeline_parallel_microbatch_size,
        1, kInf, "sequences per pipeline micro-batch");
  r.add("parallelism", "pipeline_parallel_layers_per_stage", &p.pipeline_parallel_layers_per_stage, -1, kInf,
        "layers per pipeline stage, embedding and output counted (-1: one stage per rank, two for "
        "multi-stage schedules)");
  r.add("parallelism", "pipeline_parallel_first_stage_less_layers", &p.pipeline_parallel_first_stage_less_layers,
        0, kInf, "layers the embedding counts for on the first stage");
  r.add("parallelism", "pipeline_parallel_last_stage_less_layers", &p.pipeline_parallel_last_stage_less_layers,
        0, kInf, "layers the norm and output count for on the last stage");
  r.add("parallelism", "pipeline_parallel_schedule_csv", &p.pipeline_parallel_schedule_csv,
        "custom schedule: one line of actions per pipeline rank (\"\": pipeline_parallel_schedule)");
  r.add("parallelism", "pipeline_parallel_print_schedule", &p.pipeline_parallel_print_schedule,
        "print each pipeline rank's actions as a text timeline at start");

  auto& k = c.checkpoint;
  r.add("checkpoint", "enable", &k.enable, "save checkpoints");
  r.add("checkpoint", "folder", &k.folder, "under dump_folder");
  r.add("checkpoint", "interval", &k.interval, 1, kInf, "steps between saves");
  r.add("checkpoint", "keep_latest_k", &k.keep_latest_k, 0, kInf, "0: keep all");
  r.add("checkpoint", "load_step", &k.load_step, -1, kInf, "-1: newest complete");
  r.add("checkpoint", "initial_load_path", &k.initial_load_path, "checkpoint to start from");
  r.add("checkpoint", "initial_load_model_only", &k.initial_load_model_only,
        "load only weights from initial_load_path");
  r.add("checkpoint", "last_save_model_only", &k.last_save_model_only,
        "final save holds weights only");
  r.add("checkpoint", "export_dtype", &k.export_dtype, "dtype of a model-only save");
  r.add("checkpoint", "async_mode", &k.async_mode, "background writes");
  r.add("checkpoint", "create_seed_checkpoint", &k.create_seed_checkpoint,
        "write step-0 weights and exit");
  r.add("checkpoint", "exclude_from_loading", &k.exclude_from_loading,
        "state names not loaded (e.g. [\"optimizer\", \"dataloader\"])");

  r.add("activation_checkpoint", "mode", &c.activation_checkpoint.mode, "recompute activations in backward");
  r.add("activation_checkpoint", "selective_every", &c.activation_checkpoint.selective_every, 1,
        kInf, "selective: every Nth block is recomputed");
  r.add("activation_checkpoint", "selective_ac_option", &c.activation_checkpoint.selective_ac_option,
        "selective: \"op\" keeps matmul (all but every 2nd), attention and reduce-scatter outputs of every "
        "block and recomputes the rest; N: as selective_every = N; \"\": selective_every");
  r.add("activation_checkpoint", "policy", &c.activation_checkpoint.policy,
        "mode = \"policy\": MaxText's remat_policy: minimal, save_dot_with_context_except_mlp, "
        "save_dot_except_mlpwi, save_dot_except_mlp, save_qkv_proj, minimal_offloaded, qkv_proj_offloaded, full "
        "or custom (docs/memory.md)");
  r.add("activation_checkpoint", "save_on_device", &c.activation_checkpoint.save_on_device,
        "policy = \"custom\": tensors kept in device memory, a comma list of decoder_layer_input, query_proj, "
        "key_proj, value_proj, qkv_proj, context, out_proj, mlpwi, mlpwi_0, mlpwi_1, mlpwo (the rest is recomputed)");
  r.add("activation_checkpoint", "offload_to_host", &c.activation_checkpoint.offload_to_host,
        "policy = \"custom\": tensors offloaded to host memory between forward and backward (same names)");

  r.add("metrics", "log_freq", &c.metrics.log_freq, 1, kInf, "steps between log lines");
  r.add("metrics", "peak_flops", &c.metrics.peak_flops, 0, kInf,
        "peak FLOP/s per rank for MFU (0: measured)");

  r.add("profiling", "enable_profiling", &c.profiling.enable_profiling,
        "Chrome trace of every profile_freq-th step (simulated: of the simulated step)");
  r.add("profiling", "save_traces_folder", &c.profiling.save_traces_folder, "under dump_folder");
  r.add("profiling", "profile_freq", &c.profiling.profile_freq, 1, kInf, "steps between traced steps");

  r.add("comm", "backend", &c.comm.backend, "collective backend");
  r.add("comm", "collective_mode", &c.comm.collective_mode,
        "coalesced async collectives, or one blocking unit per collective");
  r.add("comm", "bucket_cap_mb", &c.comm.bucket_cap_mb, 0.001, kInf, "fused bucket size");
  r.add("comm", "init_timeout_seconds", &c.comm.init_timeout_seconds, 1, kInf,
        "limit for start-up rendezvous");
  r.add("comm", "train_timeout_seconds", &c.comm.train_timeout_seconds, 1, kInf,
        "limit for one collective");
  r.add("comm", "rendezvous_dir", &c.comm.rendezvous_dir,
        "gloo: shared folder where ranks meet (\"\": /tmp/titan-gloo-<job id>)");

  r.add("simulation", "enable", &c.simulation.enable, "run the step on simulated hardware");
  r.add("simulation", "device", &c.simulation.device, "chip name, e.g. tpu-v7, h100");
  // The largest clusters built are ~1e5 chips; past 2^20 the simulator's per-chip tables
  // (placement, topology) would outgrow a workstation before printing anything.
  r.add("simulation", "num_chips", &c.simulation.num_chips, 1, 1048576, "simulated chips");
  r.add("simulation", "topology", &c.simulation.topology,
        "physical topology such as 16x16x32 (\"\": automatic)");
  r.add("simulation", "execution", &c.simulation.execution,
        "how ops are dispatched on the device");
  r.add("simulation", "chip_file", &c.simulation.chip_file, "TOML file adding a chip");
  r.add("simulation", "allow_oom", &c.simulation.allow_oom, "report a layout that does not fit");
  r.add("simulation", "flash_attention", &c.simulation.flash_attention,
        "the simulated framework runs attention as one flash kernel (false: S x S scores materialised)");
  r.add("simulation", "microbatch_extrapolation", &c.simulation.microbatch_extrapolation,
        "under PP, record the fewest micro-batches that hold as many in flight and replay every one on their traces");
  r.add("simulation", "pipeline_rank_reuse", &c.simulation.pipeline_rank_reuse,
        "under PP, record one rank per kind of stage (layers, first / last, neighbours) and build the others from its segments");
  r.add("simulation", "moe_routing", &c.simulation.moe_routing,
        "tokens per expert on simulated hardware: uniform, or skewed (Zipf over expert ids)");
  r.add("simulation", "layer_extrapolation", &c.simulation.layer_extrapolation,
        "record three shallow depths and extend the figures linearly to the model's (full depth where they do not extend)");
  r.add("simulation", "moe_routing_zipf", &c.simulation.moe_routing_zipf, 0, 10,
        "skewed routing: expert i gets a share proportional to 1 / (i + 1)^zipf");

  // titan-study's run model (devices/run_model.h, devices/energy_model.h; docs/goodput.md).
  r.add("goodput", "total_tokens", &c.goodput.total_tokens, 1, kInf, "tokens of the whole run (wall time, cost, energy)");
  r.add("goodput", "checkpoint_interval_s", &c.goodput.checkpoint_interval_s, 0, kInf,
        "compute seconds between checkpoints (0: Young/Daly optimum for the job's failure rate)");
  r.add("goodput", "storage_bytes_per_s", &c.goodput.storage_bytes_per_s, 1, kInf,
        "checkpoint storage bandwidth of the whole cluster, bytes/s (each chip gets its share, at most its scale-out link)");
  r.add("goodput", "detect_s", &c.goodput.detect_s, 0, kInf, "seconds from a failure to its detection");
  r.add("goodput", "restart_s", &c.goodput.restart_s, 0, kInf,
        "seconds to replace a failed node when no spare is free, restart and re-initialise");
  r.add("goodput", "spare_restart_s", &c.goodput.spare_restart_s, 0, kInf,
        "seconds to swap in a hot spare (or restart in place after a software failure) and re-initialise");
  r.add("goodput", "spare_fraction", &c.goodput.spare_fraction, 0, 1, "hot spare chips as a share of the job's chips (paid, idle)");
  r.add("goodput", "repair_h", &c.goodput.repair_h, 0, kInf, "hours a failed node stays out of the spare pool");
  r.add("goodput", "straggler_sigma", &c.goodput.straggler_sigma, 0, 1,
        "per-chip step-time jitter, standard deviation as a share of the step (the step waits for the slowest chip)");
  r.add("goodput", "slow_chip_fraction", &c.goodput.slow_chip_fraction, 0, 1, "share of chips that are persistently slow");
  r.add("goodput", "slow_chip_slowdown", &c.goodput.slow_chip_slowdown, 0, kInf, "how much slower a slow chip is (0.1: 10%)");
  r.add("goodput", "pue", &c.goodput.pue, 1, 10, "data-centre power usage effectiveness");
  r.add("goodput", "grid_gco2_per_kwh", &c.goodput.grid_gco2_per_kwh, 0, 5000, "grid carbon intensity, gCO2 per kWh");
  return r;
}

KeyTable::KeyTable() : reg_(make_registry(proto_)) {
  const auto* base = reinterpret_cast<const char*>(&proto_);
  for (size_t i = 0; i < reg_.keys.size(); ++i) {
    const KeySpec& s = reg_.keys[i];
    const auto* field = static_cast<const char*>(std::visit(
        [](const auto& f) -> const void* {
          if constexpr (std::is_same_v<std::decay_t<decltype(f)>, EnumField>) return f.at;
          else return f;
        },
        s.field));
    // make_registry points every key at a member of the config it is given; one that did not
    // would be written in proto_ by every caller.
    TITAN_CHECK(!std::less<const char*>()(field, base) && std::less<const char*>()(field, base + sizeof(JobConfig)),
                "config key ", s.full(), ": its field lies outside the JobConfig (make_registry)");
    by_name_.emplace(s.full(), i);
    if (!has_section(s.section)) sections_.push_back(s.section);
  }
}

const KeyTable& KeyTable::get() {
  static const KeyTable table;
  return table;
}

const KeySpec* KeyTable::find(const std::string& full) const {
  auto it = by_name_.find(full);
  return it == by_name_.end() ? nullptr : &reg_.keys[it->second];
}

bool KeyTable::has_section(const std::string& section) const {
  return std::find(sections_.begin(), sections_.end(), section) != sections_.end();
}

}  // namespace titan
