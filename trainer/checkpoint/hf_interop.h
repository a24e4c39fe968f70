// Hugging Face interop for Qwen3 / Llama weights: titan <-> HF tensor names
// (model.layers.N.self_attn.q_proj.weight ...), export of a trained model as safetensors plus
// config.json, and import of published safetensors (one file or a sharded folder) into a
// Trainer under any mesh. Used by the checkpointer (final export, initial_load_path) and tests.
#pragma once

#include <string>

#include <torch/torch.h>

#include "common/model_args.h"
#include "trainer/checkpoint/safetensors.h"

namespace titan {

class Trainer;

// "layers.3.feed_forward.w1.weight" -> "model.layers.3.mlp.gate_proj.weight" (a non-gated
// MLP, !gated_mlp: w1 -> up_proj, w2 -> down_proj, no w3); throws for a name that is not a
// titan parameter.
std::string hf_name(const std::string& titan_name, bool gated_mlp = true);
// The inverse; "" for a name titan has no parameter for (e.g. rotary buffers).
std::string titan_name(const std::string& hf_name, bool gated_mlp = true);

// Full titan tensors -> HF names in `dtype` (tied embeddings: no lm_head.weight, as HF does).
TensorMap to_hf(const TensorMap& titan_tensors, torch::ScalarType dtype, bool gated_mlp = true);
// HF tensors -> titan names for a model with `args`: checks every parameter is present with
// its shape; a tied model ignores lm_head.weight, an untied one given none reuses
// embed_tokens (as HF does for tie_word_embeddings checkpoints).
TensorMap from_hf(const TensorMap& hf_tensors, const ModelArgs& args);

// HF config.json text for these dims (hidden_act silu, gelu_pytorch_tanh or relu; a
// non-gated MLP adds "mlp_gated": false, which transformers' Qwen3 / Llama classes do not read).
std::string hf_config_json(const ModelArgs& args, torch::ScalarType dtype);

// Every rank calls it (gathers shards); rank 0 writes `path` (a .safetensors file) and
// config.json beside it.
void export_hf(Trainer& trainer, const std::string& path, torch::ScalarType dtype);
// Every rank reads `path` (a .safetensors file or a folder of them) and takes its pieces.
void load_hf(Trainer& trainer, const std::string& path);

}  // namespace titan
