// The two-layer Qwen3-shaped model the model, kernel and recording tests build (dim 32, 4 query
// and 2 KV heads of 8, MLP 48, vocabulary 50).
#pragma once

#include "common/model_args.h"

namespace titan {

inline ModelArgs tiny_model_args() {
  ModelArgs a = model_flavor("qwen3", "debugmodel");
  a.dim = 32, a.n_layers = 2, a.n_heads = 4, a.n_kv_heads = 2, a.head_dim = 8, a.ffn_dim = 48;
  a.vocab_size = 50;
  return a;
}

}  // namespace titan
