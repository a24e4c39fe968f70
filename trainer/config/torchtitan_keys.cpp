#include "trainer/config/torchtitan_keys.h"

#include <map>
#include <vector>

namespace titan {
namespace {

// Older and current TorchTitan spellings of keys titan implements.
const std::map<std::string, std::string>& aliases() {
  static const std::map<std::string, std::string> m = {
      {"training.batch_size", "training.local_batch_size"},
      {"training.warmup_steps", "lr_scheduler.warmup_steps"},
      {"training.data_parallel_degree", "parallelism.data_parallel_shard_degree"},
      {"training.data_parallel_replicate_degree", "parallelism.data_parallel_replicate_degree"},
      {"training.data_parallel_shard_degree", "parallelism.data_parallel_shard_degree"},
      {"training.tensor_parallel_degree", "parallelism.tensor_parallel_degree"},
      {"training.pipeline_parallel_degree", "parallelism.pipeline_parallel_degree"},
      {"experimental.pipeline_parallel_degree", "parallelism.pipeline_parallel_degree"},
      {"experimental.pipeline_parallel_schedule", "parallelism.pipeline_parallel_schedule"},
      {"experimental.context_parallel_degree", "parallelism.context_parallel_degree"},
      {"experimental.enable_async_tensor_parallel", "parallelism.enable_async_tensor_parallel"},
      {"checkpoint.enable_checkpoint", "checkpoint.enable"},
      {"checkpoint.model_weights_only", "checkpoint.last_save_model_only"},
      {"lr_scheduler.lr_min", "lr_scheduler.min_lr_factor"},
      {"debug.seed", "training.seed"},
      {"debug.deterministic", "training.deterministic"},
      {"job.print_args", "job.print_config"},
  };
  return m;
}

// Whole sections (and sub-tables) titan does not implement.
const std::vector<std::string> kOnlySections = {
    "profiling.", "compile.", "float8.", "mx.", "quantize.", "experimental.", "validation.",
    "fault_tolerance.", "memory_estimation.", "ft.", "debug."};

const std::vector<std::string> kOnlyKeys = {
    "job.use_for_integration_test", "job.config_file",
    "metrics.enable_tensorboard", "metrics.save_tb_folder", "metrics.enable_wandb",
    "metrics.disable_color_printing", "metrics.save_for_all_ranks", "metrics.rank_0_only",
    "metrics.enable_color_printing",
    "model.hf_assets_path", "model.norm_type", "model.converters", "model.print_after_conversion",
    "optimizer.implementation", "optimizer.early_step_in_backward",
    "training.compile", "training.enable_cpu_offload", "training.gc_freq", "training.gc_debug",
    "training.enable_float8_linear", "training.enable_compiled_autograd",
    "parallelism.pipeline_parallel_split_points",
    "parallelism.enable_compiled_autograd",
    "checkpoint.interval_type", "checkpoint.enable_first_step_checkpoint", "checkpoint.load_only",
    "checkpoint.initial_load_in_hf", "checkpoint.last_save_in_hf", "checkpoint.use_fp8_pinned_memory",
    "comm.trace_buf_size",
    "activation_checkpoint.early_stop",
    "activation_checkpoint.memory_budget",
    "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns",
};

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

}  // namespace

std::string titan_key_for(const std::string& full_key) {
  auto it = aliases().find(full_key);
  if (it != aliases().end()) return it->second;
  // A [training.data] sub-table holds the dataset keys titan keeps in [training].
  if (starts_with(full_key, "training.data.")) return "training." + full_key.substr(14);
  return full_key;
}

bool torchtitan_only_key(const std::string& full_key) {
  for (const auto& s : kOnlySections) {
    if (starts_with(full_key, s)) return true;
  }
  for (const auto& k : kOnlyKeys) {
    if (full_key == k) return true;
  }
  return false;
}

std::string titan_value_for(const std::string& full_key, const std::string& value, std::string* note) {
  if (full_key == "training.dataset" && starts_with(value, "c4")) {
    *note = "training.dataset = \"" + value + "\" (reads the shipped corpus instead)";
    return "corpus";
  }
  if (full_key == "checkpoint.async_mode" && value == "async_with_pinned_mem") return "async";
  return value;
}

}  // namespace titan
