#include "devices/memory_model.h"

#include <algorithm>
#include <cstdio>

#include "common/error.h"

namespace titan::devices {
namespace {

// Runtime context and library workspaces that training cannot use (CUDA context + cuBLAS /
// NCCL workspaces, XLA runtime buffers): ~1 GiB on accelerators. The cpu device's memory
// figure is already what a process may use.
constexpr int64_t kRuntimeReserveBytes = int64_t{1} << 30;
constexpr int64_t kActivationBytes = 2;  // bf16 activations under mixed precision
// Logits per vocab entry per token: bf16 output of the projection, its fp32 upcast for the
// loss, and the fp32 log-softmax cross-entropy saves (TorchTitan's loss path).
constexpr int64_t kLogitBytes = 2 + 4 + 4;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

ActivationCheckpoint parse_activation_checkpoint(const std::string& s) {
  if (s == "none") return ActivationCheckpoint::kNone;
  if (s == "selective") return ActivationCheckpoint::kSelective;
  if (s == "full") return ActivationCheckpoint::kFull;
  TITAN_CONFIG_FAIL("unknown activation checkpoint mode '", s, "' (valid: none selective full)");
}

MemoryReport memory_per_chip(const MemoryInputs& in, const ChipSpec& chip) {
  MemoryReport r;
  r.params = in.local_params * in.param_bytes;
  r.grads = in.local_params * in.grad_bytes;
  r.optimizer = in.local_params * in.optimizer_states * in.optimizer_state_bytes;
  r.master = in.master_weights ? in.local_params * 4 : 0;

  const int64_t layers = in.local_layers;
  int64_t per_micro = 0, working_set = 0;
  switch (in.ac) {
    case ActivationCheckpoint::kNone:
      per_micro = layers * in.layer_activation_bytes;
      break;
    case ActivationCheckpoint::kSelective:
      if (in.selective_every >= 1) {
        const int64_t checkpointed = layers / in.selective_every;
        per_micro = (layers - checkpointed) * in.layer_activation_bytes +
                    checkpointed * in.layer_input_bytes;
        working_set = checkpointed > 0 ? in.layer_activation_bytes : 0;
      } else {
        per_micro = layers * in.layer_selective_bytes;
        working_set = layers > 0 ? in.layer_activation_bytes - in.layer_selective_bytes : 0;
      }
      break;
    case ActivationCheckpoint::kFull:
      per_micro = layers * in.layer_input_bytes;
      // Backward recomputes one layer at a time: its full activations are live once.
      working_set = layers > 0 ? in.layer_activation_bytes : 0;
      break;
  }
  r.activations = std::max<int64_t>(1, in.microbatches_in_flight) * per_micro +
                  std::max<int64_t>(0, working_set) + in.extra_activation_bytes;
  r.collective_buffers = in.collective_buffer_bytes;
  r.runtime_reserve = chip.is_host() ? 0 : kRuntimeReserveBytes;
  r.total = r.params + r.grads + r.optimizer + r.master + r.activations + r.collective_buffers +
            r.runtime_reserve;
  r.capacity = chip.hbm_bytes;
  r.fits = r.total <= r.capacity;
  return r;
}

std::string MemoryReport::describe() const {
  auto g = [](int64_t b) { return static_cast<double>(b) / kGiB; };
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "%.2f GiB of %.2f GiB (%s): params %.2f, grads %.2f, optimizer %.2f, master "
                "%.2f, activations %.2f, collective buffers %.2f, runtime %.2f",
                g(total), g(capacity), fits ? "fits" : "DOES NOT FIT", g(params), g(grads),
                g(optimizer), g(master), g(activations), g(collective_buffers),
                g(runtime_reserve));
  return buf;
}

std::vector<std::pair<std::string, int64_t>> MemoryReport::consumers() const {
  std::vector<std::pair<std::string, int64_t>> c = {
      {"activations", activations},       {"optimizer states", optimizer},
      {"parameters", params},             {"gradients", grads},
      {"master weights", master},         {"collective buffers", collective_buffers},
      {"runtime reserve", runtime_reserve}};
  std::stable_sort(c.begin(), c.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return c;
}

void require_fits(const MemoryReport& r, const std::string& what) {
  if (r.fits) return;
  auto g = [](int64_t b) { return static_cast<double>(b) / kGiB; };
  const auto parts = r.consumers();
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "%.1f GiB per chip against %.1f GiB; largest: %s %.1f GiB, %s %.1f GiB, %s %.1f GiB",
                g(r.total), g(r.capacity), parts[0].first.c_str(), g(parts[0].second),
                parts[1].first.c_str(), g(parts[1].second), parts[2].first.c_str(),
                g(parts[2].second));
  TITAN_CONFIG_FAIL("the layout does not fit in memory (", what, "): ", buf,
                    ". Use more activation checkpointing, more chips or more sharding, or "
                    "--simulation.allow_oom true to report its step time anyway");
}

// Tensors autograd keeps per token of one layer (elements; t = tp, SP = sequence parallel
// norms so the residual stream is sharded by t, and the linears' gathered inputs are not):
//   attention_norm input                  D/t
//   its gathered output (wq, wk, wv input) D
//   q, k before QK-norm (Qwen3)           (Hq + Hkv)/t
//   q, k after RoPE, v (flash inputs)     (Hq + 2 Hkv)/t
//   attention output (wo input)           Hq/t        (+ fp32 LSE: heads/t x 4 bytes)
//   ffn_norm input                        D/t
//   its gathered output (w1, w3 input)    D
//   w1 out, w3 out, silu(w1), product     4 F/t
// Op-level selective keeps the layer input and what matmuls / attention produce (the rest is
// cheap pointwise work to recompute): D/t + (Hq + 2Hkv)/t + Hq/t + D/t + 2F/t + D/t.
LayerActivations transformer_activations(const ModelArgs& d, int64_t tokens, int64_t tp) {
  TITAN_CONFIG_CHECK(tp >= 1, "tp must be >= 1, got ", tp);
  const int64_t hq = d.n_heads * d.head_dim, hkv = d.n_kv_heads * d.head_dim;
  const int64_t D = d.dim, F = d.ffn_dim, t = tp;
  int64_t full = D / t + D + (d.qk_norm ? (hq + hkv) / t : 0) + (hq + 2 * hkv) / t + hq / t +
                 D / t + D + 4 * F / t;
  int64_t sel = D / t + (hq + 2 * hkv) / t + hq / t + D / t + 2 * F / t + D / t;
  const int64_t lse = d.n_heads / t * 4;
  LayerActivations a;
  a.full = tokens * (full * kActivationBytes + lse);
  a.selective = tokens * (sel * kActivationBytes + lse);
  a.input = tokens * (D / t) * kActivationBytes;
  return a;
}

MemoryInputs transformer_memory_inputs(const ModelArgs& d, const TransformerLayout& l) {
  TITAN_CONFIG_CHECK(l.tp >= 1 && l.pp >= 1 && l.fsdp >= 1, "degrees must be >= 1 (tp ", l.tp,
                     ", pp ", l.pp, ", fsdp ", l.fsdp, ")");
  const int64_t norms = 2 * d.dim + (d.qk_norm ? 2 * d.head_dim : 0);
  // TP shards every linear (and, in TorchTitan's plan, the embedding and output); norms are
  // replicated.
  const int64_t layer_local = (d.layer_params() - norms) / l.tp + norms;
  const int64_t embed = d.vocab_size * d.dim / l.tp;
  const int64_t output = d.tie_embeddings ? 0 : d.vocab_size * d.dim / l.tp;
  const int64_t layers = ceil_div(d.n_layers, l.pp);
  // The heaviest pipeline stage: with pp = 1 everything; otherwise the first stage carries
  // the embedding, the last the final norm and output projection.
  int64_t stage = layers * layer_local;
  stage += l.pp == 1 ? embed + output + d.dim : std::max(embed, output + d.dim);

  MemoryInputs in;
  in.local_params = ceil_div(stage, l.fsdp);
  in.param_bytes = l.bf16_params ? 2 : l.param_bytes;
  in.grad_bytes = in.param_bytes;
  in.master_weights = l.bf16_params;
  LayerActivations a = transformer_activations(d, l.tokens, l.tp);
  in.layer_activation_bytes = a.full;
  in.layer_selective_bytes = a.selective;
  in.layer_input_bytes = a.input;
  in.local_layers = layers;
  in.microbatches_in_flight = l.microbatches_in_flight;
  in.ac = l.ac;
  in.selective_every = l.selective_every;
  // Last stage: final norm input + its gathered output, and the logits path.
  in.extra_activation_bytes =
      l.tokens * ((d.dim / l.tp + d.dim) * kActivationBytes + d.vocab_size / l.tp * kLogitBytes);
  if (l.fsdp > 1) {
    // FSDP: the largest unit gathered in bf16 plus the prefetched next block, and its
    // unsharded fp32 gradients before the reduce-scatter.
    const int64_t unit = std::max({layer_local, embed, output});
    in.collective_buffer_bytes = (unit + layer_local) * 2 + unit * 4;
  }
  return in;
}

}  // namespace titan::devices
