// Test helper: a synthetic FSDP + TP trace of a dense transformer step (what the trainer's
// recorder would produce, simplified), used by the scenario tests in tests/devices.
#pragma once

#include <vector>

#include "common/model_args.h"
#include "devices/step_simulator.h"

namespace titan::devices::testing {

struct SyntheticStep {
  ModelArgs dims;
  int64_t batch = 1, seq = 8192;  // per data-parallel rank
  int64_t tp = 1;
};

// An elementwise op over these tensors, its byte counts theirs (the data flow is linked when
// a trace records it).
inline OpDesc elementwise(const char* name, std::vector<TensorUse> reads, std::vector<TensorUse> writes) {
  int64_t r = 0, w = 0;
  for (const auto& t : reads) r += t.bytes;
  for (const auto& t : writes) w += t.bytes;
  OpDesc op = pointwise_op(name, OpKind::kElementwise, r, w);
  op.reads = std::move(reads);
  op.writes = std::move(writes);
  return op;
}

inline void pointwise(Trace& t, int n, int64_t bytes) {
  for (int i = 0; i < n; ++i)
    t.compute(pointwise_op("aten::mul", OpKind::kElementwise, bytes, bytes));
}

// Forward: FSDP all-gathers the next block while this one computes; TP (sequence parallel)
// gathers before and reduce-scatters after each projection pair. Backward: the same
// all-gathers again, 2 GEMMs per forward GEMM, flash backward, and an async fp32 gradient
// reduce-scatter per block, waited for before the optimizer.
inline Trace synthetic_step(const SyntheticStep& s) {
  Trace t;
  const ModelArgs& d = s.dims;
  const int64_t T = s.batch * s.seq, tp = s.tp;
  const int64_t hq = d.n_heads * d.head_dim, hkv = d.n_kv_heads * d.head_dim;
  const int64_t block = d.layer_params() / tp;
  const int64_t act = T * d.dim * 2, act_sp = act / tp;
  auto mm = [&](int64_t m, int64_t n, int64_t k) { t.compute(matmul_op("aten::mm", {1, m, n, k})); };
  auto tpc = [&](CollectiveKind k) {
    if (tp > 1) t.blocking({k, "tp", act, "tp"});
  };
  auto gather = [&]() { return t.issue({CollectiveKind::kAllGather, "dp_shard", block * 2, "ag"}); };
  const AttentionShape fwd{s.batch, d.n_heads / tp, d.n_kv_heads / tp, s.seq, s.seq, d.head_dim, true, false};
  AttentionShape bwd = fwd;
  bwd.backward = true;

  std::vector<int64_t> ag(static_cast<size_t>(d.n_layers));
  ag[0] = gather();
  t.compute(pointwise_op("aten::index", OpKind::kOther, act, act));
  for (int64_t l = 0; l < d.n_layers; ++l) {
    if (l + 1 < d.n_layers) ag[static_cast<size_t>(l + 1)] = gather();
    t.wait(ag[static_cast<size_t>(l)]);
    pointwise(t, 5, act_sp);  // RMSNorm
    tpc(CollectiveKind::kAllGather);
    mm(T, hq / tp, d.dim);
    mm(T, hkv / tp, d.dim);
    mm(T, hkv / tp, d.dim);
    pointwise(t, 16, T * hq / tp * 2);  // QK-norm + RoPE
    t.compute(attention_op(fwd));
    mm(T, d.dim, hq / tp);
    tpc(CollectiveKind::kReduceScatter);
    pointwise(t, 6, act_sp);  // residual + RMSNorm
    tpc(CollectiveKind::kAllGather);
    mm(T, d.ffn_dim / tp, d.dim);
    mm(T, d.ffn_dim / tp, d.dim);
    pointwise(t, 3, T * d.ffn_dim / tp * 2);  // SwiGLU
    mm(T, d.dim, d.ffn_dim / tp);
    tpc(CollectiveKind::kReduceScatter);
    pointwise(t, 1, act_sp);
  }
  mm(T, d.vocab_size / tp, d.dim);
  pointwise(t, 4, T * d.vocab_size / tp * 4);  // fp32 cross-entropy
  mm(T, d.dim, d.vocab_size / tp);
  mm(d.vocab_size / tp, d.dim, T);
  std::vector<int64_t> rs;
  int64_t next = gather();
  for (int64_t l = d.n_layers - 1; l >= 0; --l) {
    int64_t cur = next;
    if (l > 0) next = gather();
    t.wait(cur);
    tpc(CollectiveKind::kAllGather);
    mm(T, d.ffn_dim / tp, d.dim);
    mm(d.ffn_dim / tp, d.dim, T);
    pointwise(t, 6, T * d.ffn_dim / tp * 2);
    for (int i = 0; i < 2; ++i) {
      mm(T, d.dim, d.ffn_dim / tp);
      mm(d.ffn_dim / tp, d.dim, T);
    }
    tpc(CollectiveKind::kReduceScatter);
    pointwise(t, 8, act_sp);
    tpc(CollectiveKind::kAllGather);
    mm(T, hq / tp, d.dim);
    mm(d.dim, hq / tp, T);
    t.compute(attention_op(bwd));
    pointwise(t, 20, T * hq / tp * 2);
    mm(T, d.dim, hq / tp);
    mm(hq / tp, d.dim, T);
    for (int i = 0; i < 2; ++i) {
      mm(T, d.dim, hkv / tp);
      mm(hkv / tp, d.dim, T);
    }
    tpc(CollectiveKind::kReduceScatter);
    pointwise(t, 8, act_sp);
    rs.push_back(t.issue({CollectiveKind::kReduceScatter, "dp_shard", block * 4, "rs"}));
  }
  for (int64_t w : rs) t.wait(w);
  return t;
}

inline ModelArgs qwen3_8b_dims() {
  ModelArgs d;
  d.vocab_size = 151936;
  d.dim = 4096;
  d.n_layers = 36;
  d.n_heads = 32;
  d.n_kv_heads = 8;
  d.head_dim = 128;
  d.ffn_dim = 12288;
  d.qk_norm = true;
  return d;
}

}  // namespace titan::devices::testing
