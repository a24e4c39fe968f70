// Test helper: a synthetic FSDP + TP trace of a dense transformer step (what the trainer's
// recorder would produce, simplified), used by the scenario tests in tests/devices.
#pragma once

#include <vector>

#include "devices/memory_model.h"
#include "devices/step_simulator.h"

namespace titan::devices::testing {

struct SyntheticStep {
  TransformerDims dims;
  int64_t batch = 1, seq = 8192;  // per data-parallel rank
  int64_t tp = 1;
};

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
  const TransformerDims& d = s.dims;
  const int64_t T = s.batch * s.seq, tp = s.tp;
  const int64_t hq = d.heads * d.head_dim, hkv = d.kv_heads * d.head_dim;
  const int64_t block = transformer_layer_params(d) / tp;
  const int64_t act = T * d.dim * 2, act_sp = act / tp;
  auto mm = [&](int64_t m, int64_t n, int64_t k) { t.compute(matmul_op("aten::mm", {1, m, n, k})); };
  auto tpc = [&](CollectiveKind k) {
    if (tp > 1) t.blocking({k, "tp", act, "tp"});
  };
  auto gather = [&]() { return t.issue({CollectiveKind::kAllGather, "dp_shard", block * 2, "ag"}); };
  const AttentionShape fwd{s.batch, d.heads / tp, d.kv_heads / tp, s.seq, s.seq, d.head_dim, true, false};
  AttentionShape bwd = fwd;
  bwd.backward = true;

  std::vector<int64_t> ag(static_cast<size_t>(d.layers));
  ag[0] = gather();
  t.compute(pointwise_op("aten::index", OpKind::kOther, act, act));
  for (int64_t l = 0; l < d.layers; ++l) {
    if (l + 1 < d.layers) ag[static_cast<size_t>(l + 1)] = gather();
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
    mm(T, d.ffn / tp, d.dim);
    mm(T, d.ffn / tp, d.dim);
    pointwise(t, 3, T * d.ffn / tp * 2);  // SwiGLU
    mm(T, d.dim, d.ffn / tp);
    tpc(CollectiveKind::kReduceScatter);
    pointwise(t, 1, act_sp);
  }
  mm(T, d.vocab / tp, d.dim);
  pointwise(t, 4, T * d.vocab / tp * 4);  // fp32 cross-entropy
  mm(T, d.dim, d.vocab / tp);
  mm(d.vocab / tp, d.dim, T);
  std::vector<int64_t> rs;
  int64_t next = gather();
  for (int64_t l = d.layers - 1; l >= 0; --l) {
    int64_t cur = next;
    if (l > 0) next = gather();
    t.wait(cur);
    tpc(CollectiveKind::kAllGather);
    mm(T, d.ffn / tp, d.dim);
    mm(d.ffn / tp, d.dim, T);
    pointwise(t, 6, T * d.ffn / tp * 2);
    for (int i = 0; i < 2; ++i) {
      mm(T, d.dim, d.ffn / tp);
      mm(d.ffn / tp, d.dim, T);
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

inline TransformerDims qwen3_8b_dims() {
  TransformerDims d;
  d.vocab = 151936;
  d.dim = 4096;
  d.layers = 36;
  d.heads = 32;
  d.kv_heads = 8;
  d.head_dim = 128;
  d.ffn = 12288;
  d.qk_norm = true;
  return d;
}

// DESIGN.md section 6: 6 * params without the input embedding + 12 * L * H * hd * seq.
inline double flops_per_token(const TransformerDims& d, int64_t seq) {
  double n = static_cast<double>(transformer_params(d) - d.vocab * d.dim);
  return 6 * n + 12.0 * static_cast<double>(d.layers * d.heads * d.head_dim * seq);
}

}  // namespace titan::devices::testing
