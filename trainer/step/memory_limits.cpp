#include "trainer/step/memory_limits.h"

#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "trainer/step/parallelize.h"
#include "trainer/step/pipeline_model.h"

namespace titan {
namespace {

double bytes_of(Dtype d) { return static_cast<double>(c10::elementSize(scalar_type(d))); }

// What a rank holds of its layers for one micro-batch and token, in elements. A layer run
// without recompute keeps at least its input, the normed input, q/k/v and the attention
// output, and the MLP's ffn-wide tensors (SwiGLU: gate, up and product; gelu: its input and
// output; relu: its output, which w2 reads too); a recomputed one keeps its input alone. Heads
// and ffn split over TP; the dim-wide tensors only under SP.
struct LayerKeep {
  double full = 0, recomputed = 0;
  int64_t every = 0;  // layer l is recomputed when (l + 1) % every == 0; 0: none
  bool recomputes(int64_t l) const { return every > 0 && (l + 1) % every == 0; }
  double range(int64_t begin, int64_t end) const {
    double sum = 0;
    for (int64_t l = begin; l < end; ++l) sum += recomputes(l) ? recomputed : full;
    return sum;
  }
};

LayerKeep layer_keep(const JobConfig& cfg, const ParallelDims& dims, const ModelArgs& a) {
  const double tp = static_cast<double>(dims.tp);
  const double seq_split = dims.tp > 1 && cfg.parallelism.enable_sequence_parallel ? tp : 1.0;
  const double q = static_cast<double>(a.n_heads * a.head_dim);
  const double kv = static_cast<double>(a.n_kv_heads * a.head_dim);
  LayerKeep k;
  const double mlp_kept = a.gated_mlp() ? 3.0 : a.mlp_activation == MlpActivation::kGelu ? 2.0 : 1.0;
  k.full = 2.0 * a.dim / seq_split + (2.0 * q + 2.0 * kv + mlp_kept * a.ffn_dim) / tp;
  k.recomputed = a.dim / seq_split;
  // Op-level selective AC keeps more than a recomputed layer; counted as one, it stays a bound.
  const AcMode ac = cfg.activation_checkpoint.mode;
  // A remat policy keeps at least each block's input (on device or, on a host run, in host memory).
  if (ac == AcMode::kFull || ac == AcMode::kPolicy || cfg.activation_checkpoint.op_level()) k.every = 1;
  else if (ac == AcMode::kSelective) k.every = std::max<int64_t>(1, cfg.activation_checkpoint.every());
  return k;
}

// Applies FSDP / HSDP / DDP, as parallelize's applies_fsdp does on the mesh.
bool fp32_masters(const ParallelDims& dims) { return dims.fsdp_enabled() || dims.dp_replicate_enabled(); }

// plan: the pipeline's (dims.pp > 1), built once for every rank a caller estimates.
MemoryEstimate estimate(const JobConfig& cfg, const ParallelDims& dims, const ModelArgs& a, const PipelinePlan* plan,
                        int pp_rank) {
  // Doubles throughout: 1e9 sequences x 1e8 tokens must not overflow before it is refused.
  const double tp = static_cast<double>(dims.tp);
  const double act_bytes = bytes_of(cfg.training.mixed_precision_param);
  // Under FSDP / HSDP / DDP the stored parameters stay fp32 (FSDP2's mixed precision).
  const double master_bytes = fp32_masters(dims) ? bytes_of(cfg.training.master_dtype) : act_bytes;
  const double embed = static_cast<double>(a.num_embedding_params());
  const double layer_params = static_cast<double>(a.layer_params());
  const LayerKeep keep = layer_keep(cfg, dims, a);

  MemoryEstimate e;
  e.init = static_cast<double>(a.num_params()) * master_bytes;
  // A context-parallel rank holds seq_len / cp tokens of each sequence.
  const double seq = static_cast<double>(cfg.training.seq_len) / static_cast<double>(dims.cp);
  double micro_tokens = static_cast<double>(cfg.training.local_batch_size) * seq;
  double in_flight = 0, params = 0;  // kept elements per token at the peak; the rank's parameters
  bool any_recomputed = false, holds_output = true;
  if (plan) {
    micro_tokens = static_cast<double>(cfg.parallelism.pipeline_parallel_microbatch_size) * seq;
    // Several stages on a rank: each micro-batch in flight counts as the smallest of them.
    double smallest = std::numeric_limits<double>::infinity();
    holds_output = false;
    for (int s : plan->schedule.stages_of(pp_rank)) {
      const StageLayers& st = plan->stages[static_cast<size_t>(s)];
      smallest = std::min(smallest, keep.range(st.begin, st.end));
      params += layer_params * static_cast<double>(st.end - st.begin) + (st.embedding ? embed : 0.0) +
                (st.output ? embed + a.dim : 0.0);
      holds_output = holds_output || st.output;
      for (int64_t l = st.begin; l < st.end; ++l) any_recomputed = any_recomputed || keep.recomputes(l);
    }
    const auto peak = peak_in_flight(plan->schedule);
    in_flight = static_cast<double>(peak[static_cast<size_t>(pp_rank)]) * (std::isfinite(smallest) ? smallest : 0.0);
  } else {
    in_flight = keep.range(0, a.n_layers);
    params = static_cast<double>(a.num_params());
    any_recomputed = keep.every > 0;
  }
  // A recomputed layer's full set exists again while its backward runs.
  if (any_recomputed) in_flight += keep.full;
  e.activations = micro_tokens * in_flight * act_bytes;
  if (holds_output) e.logits = 2.0 * micro_tokens * static_cast<double>(a.vocab_size) / tp * act_bytes;
  const double shard = tp * static_cast<double>(dims.dp_shard);
  e.weights = 4.0 * params * master_bytes / shard;
  if (plan && dims.dp_shard_enabled()) {
    // The stage's units stay gathered from their first forward to the step's end (unless
    // resharded after every forward), and sync-off gradients sum at full size until REDUCE_GRAD.
    const bool keeps_gathered = fsdp_reshard_policy(cfg, /*pipeline=*/true) != FsdpOptions::Reshard::kAlways;
    e.gathered = params / tp *
                 ((keeps_gathered ? act_bytes : 0.0) + bytes_of(cfg.training.mixed_precision_reduce));
  }
  return e;
}

std::unique_ptr<PipelinePlan> plan_of(const JobConfig& cfg, const ParallelDims& dims, const ModelArgs& a) {
  if (dims.pp <= 1) return nullptr;
  return std::make_unique<PipelinePlan>(plan_pipeline(cfg, a, dims.pp, fp32_masters(dims)));
}

}  // namespace

MemoryEstimate estimate_rank_memory(const JobConfig& cfg, const ParallelDims& dims, const ModelArgs& a,
                                    int pp_rank) {
  return estimate(cfg, dims, a, plan_of(cfg, dims, a).get(), pp_rank);
}

double machine_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string key;
    double kib = 0;
    if (ss >> key >> kib && key == "MemTotal:") return kib * 1024.0;
  }
  return 0;
}

void check_fits_in_memory(const JobConfig& cfg, const ParallelDims& dims, const ModelArgs& args, int pp_rank,
                          int ranks_on_host, double machine_bytes, const PipelinePlan* plan) {
  if (machine_bytes <= 0) return;
  std::unique_ptr<PipelinePlan> own;
  if (!plan) plan = (own = plan_of(cfg, dims, args)).get();
  const MemoryEstimate e = estimate(cfg, dims, args, plan, pp_rank);
  double smallest = e.total();
  for (int r = 0; r < dims.pp && ranks_on_host > 1; ++r)
    smallest = std::min(smallest, estimate(cfg, dims, args, plan, r).total());
  const int others = std::max(0, ranks_on_host - 1);
  const double need = e.total() + others * smallest;
  const double gib = 1073741824.0;
  std::ostringstream host;
  if (others > 0)
    host << " and the " << others << " other ranks on this host at least " << others * smallest / gib << " GiB";
  TITAN_CONFIG_CHECK(need <= machine_bytes, "training.local_batch_size (", cfg.training.local_batch_size,
                     ") x training.seq_len (", cfg.training.seq_len, "): pipeline rank ", pp_rank,
                     " needs at least ", e.total(), " bytes (", e.total() / gib, " GiB: activations ",
                     e.activations / gib, ", logits ", e.logits / gib, ", weights and AdamW state ", e.weights / gib,
                     ", gathered stage ", e.gathered / gib, "; the whole model at initialisation ", e.init / gib, ")",
                     host.str(), " but this machine has ", machine_bytes / gib,
                     " GiB (/proc/meminfo MemTotal); lower one of them, or raise a parallel degree");
}

}  // namespace titan
