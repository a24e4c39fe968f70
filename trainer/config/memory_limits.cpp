#include "trainer/config/memory_limits.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "common/error.h"

namespace titan {

MemoryEstimate estimate_rank_memory(const JobConfig& cfg, const ModelArgs& a) {
  // Doubles throughout: 1e9 sequences x 1e8 tokens must not overflow before it is refused.
  const double tokens = static_cast<double>(cfg.training.local_batch_size) *
                        static_cast<double>(cfg.training.seq_len);
  const double tp = static_cast<double>(cfg.parallelism.tensor_parallel_degree);
  const double bytes = 4;  // fp32 activations: the smallest the trainer keeps by default
  // Per token and layer, at least: the block input, the normed input, q/k/v and the attention
  // output, and the MLP's gate, up and product (three ffn-wide tensors), split over TP.
  const double q = static_cast<double>(a.n_heads * a.head_dim);
  const double kv = static_cast<double>(a.n_kv_heads * a.head_dim);
  const double per_layer = 2.0 * a.dim + (2.0 * q + 2.0 * kv + 3.0 * a.ffn_dim) / tp;
  MemoryEstimate e;
  e.activations = tokens * static_cast<double>(a.n_layers) * per_layer * bytes;
  e.logits = 2.0 * tokens * static_cast<double>(a.vocab_size) / tp * bytes;
  e.weights = 4.0 * static_cast<double>(a.num_params()) * bytes /
              (tp * std::max<double>(1.0, static_cast<double>(cfg.parallelism.data_parallel_shard_degree)));
  return e;
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

void check_fits_in_memory(const JobConfig& cfg, const ModelArgs& args, double machine_bytes) {
  if (machine_bytes <= 0) return;
  const MemoryEstimate e = estimate_rank_memory(cfg, args);
  const double gib = 1073741824.0;
  TITAN_CONFIG_CHECK(e.total() <= machine_bytes, "training.local_batch_size (", cfg.training.local_batch_size,
                     ") x training.seq_len (", cfg.training.seq_len, "): one micro-batch needs at least ",
                     e.total(), " bytes (", e.total() / gib, " GiB: activations ", e.activations / gib,
                     ", logits ", e.logits / gib, ", weights and AdamW state ", e.weights / gib,
                     ") but this machine has ", machine_bytes / gib,
                     " GiB (/proc/meminfo MemTotal); lower one of them");
}

}  // namespace titan
