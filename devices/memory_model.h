// Memory per chip of a training layout (parameters, gradients, optimizer states, activations
// under activation checkpointing, collective buffers) and whether it fits in the chip's HBM;
// used by the trainer's simulated report.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/model_args.h"
#include "devices/chip_catalog.h"

namespace titan::devices {

enum class ActivationCheckpoint { kNone, kSelective, kFull };
ActivationCheckpoint parse_activation_checkpoint(const std::string& s);  // none|selective|full

// Everything in bytes per chip, after TP / PP / FSDP sharding. The trainer can fill the
// parameter count from its own sharded (meta) model and take activation sizes from
// `transformer_activations` below or from its recorded trace.
struct MemoryInputs {
  int64_t local_params = 0;       // parameter elements this chip stores
  int64_t param_bytes = 4;        // storage dtype of the (sharded) parameters
  int64_t grad_bytes = 4;         // gradients are kept in the parameter dtype
  int64_t optimizer_states = 2;   // AdamW: exp_avg and exp_avg_sq
  int64_t optimizer_state_bytes = 4;  // fp32 states
  // Mixed precision with bf16-stored params keeps an fp32 master copy for the update.
  bool master_weights = false;

  // Activations of one microbatch, per chip.
  int64_t layer_activation_bytes = 0;  // saved by one layer with no checkpointing
  int64_t layer_selective_bytes = 0;   // saved by one layer under op-level selective AC
  int64_t layer_input_bytes = 0;       // one layer's input (all that full AC keeps)
  int64_t local_layers = 0;
  int64_t extra_activation_bytes = 0;  // outside the layers: final norm, logits, loss
  int64_t microbatches_in_flight = 1;  // pipeline: microbatches whose activations are live
  ActivationCheckpoint ac = ActivationCheckpoint::kNone;
  // Selective AC flavour: 0 = op-level (layer_selective_bytes per layer); N >= 1 = every Nth
  // layer fully checkpointed, the others keep everything (TorchTitan's layer SAC).
  int64_t selective_every = 0;

  // Transient buffers: FSDP's unsharded parameters (current + prefetched block) and unsharded
  // gradients awaiting reduce-scatter, TP gather buffers.
  int64_t collective_buffer_bytes = 0;
};

struct MemoryReport {
  int64_t params = 0, grads = 0, optimizer = 0, master = 0, activations = 0,
          collective_buffers = 0, runtime_reserve = 0;
  int64_t total = 0;
  int64_t capacity = 0;
  bool fits = false;
  double total_gib() const { return static_cast<double>(total) / kGiB; }
  std::string describe() const;  // "41.2 GiB of 192.0 GiB: params 2.0, grads 2.0, ..."
  // Every part with its bytes, largest first.
  std::vector<std::pair<std::string, int64_t>> consumers() const;
};

MemoryReport memory_per_chip(const MemoryInputs& in, const ChipSpec& chip);

// A layout that does not fit is refused: a config error giving the total against the
// capacity and naming the largest consumers (no step time is reported for it). `what`
// describes the layout ("8192 x tpu-v7, dp_shard 8192").
void require_fits(const MemoryReport& r, const std::string& what);

// Dense decoder-only transformer (Llama 3 / Qwen3 shape: GQA attention, SwiGLU MLP, RMSNorm).

// Per-layer activation bytes for `tokens` tokens of one microbatch on one chip under tensor
// parallel degree tp (sequence parallel on the norms, as TorchTitan's TP plan), 2-byte
// activations, flash attention (no S x S). See memory_model.cpp for the tensor list.
struct LayerActivations {
  int64_t full = 0;       // no checkpointing
  int64_t selective = 0;  // op-level selective: matmul / attention outputs + layer input
  int64_t input = 0;      // layer input only (full AC)
};
LayerActivations transformer_activations(const ModelArgs& d, int64_t tokens, int64_t tp);

// Fills MemoryInputs for a dense transformer laid out as dp_shard (FSDP, including cp) x tp
// x pp with `tokens` tokens per microbatch per chip (local_batch * seq_len / cp).
struct TransformerLayout {
  int64_t tp = 1, pp = 1, fsdp = 1;       // fsdp = dp_shard * cp (FSDP shards over both)
  int64_t tokens = 0;                     // per microbatch per chip
  int64_t microbatches_in_flight = 1;
  int64_t param_bytes = 4;                // 4: fp32 params (bf16 compute via FSDP MP)
  bool bf16_params = false;               // params stored in bf16 -> fp32 master copy
  ActivationCheckpoint ac = ActivationCheckpoint::kNone;
  int64_t selective_every = 0;
};
MemoryInputs transformer_memory_inputs(const ModelArgs& d, const TransformerLayout& l);

}  // namespace titan::devices
