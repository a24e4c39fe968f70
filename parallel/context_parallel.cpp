#include "parallel/context_parallel.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include "common/error.h"

namespace titan {

CpRotate parse_cp_rotate(const std::string& method) {
  if (method == "allgather") return CpRotate::kAllGather;
  if (method == "alltoall") return CpRotate::kAllToAll;
  TITAN_CONFIG_FAIL("parallelism.context_parallel_rotate_method: expected \"allgather\" or \"alltoall\", got \"",
                    method, "\"");
  return CpRotate::kAllGather;
}

void check_context_parallel(int64_t seq_len, int64_t cp) {
  if (cp == 1) return;
  TITAN_CONFIG_CHECK(seq_len % (2 * cp) == 0, "training.seq_len (", seq_len,
                     ") must be divisible by 2 x parallelism.context_parallel_degree (2 x ", cp, " = ", 2 * cp,
                     "): context parallel cuts the sequence into 2 x cp chunks, two per rank, for causal load "
                     "balancing");
}

torch::Tensor cp_shard_sequence(const torch::Tensor& x, int64_t dim, int64_t cp, int64_t rank) {
  if (cp == 1) return x;
  const int64_t n = x.size(dim);
  check_context_parallel(n, cp);
  const int64_t c = n / (2 * cp);
  return torch::cat({x.narrow(dim, rank * c, c), x.narrow(dim, (2 * cp - 1 - rank) * c, c)}, dim);
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int kKvTag = 7101;    // K/V passed around the ring
constexpr int kGradTag = 7102;  // their gradients, travelling with them in backward

// [B, KV, L, D] -> [B, H, L, D]: each KV head serves H / KV query heads (grouped-query attention).
torch::Tensor expand_kv(const torch::Tensor& x, int64_t heads) {
  const int64_t B = x.size(0), KV = x.size(1), L = x.size(2), D = x.size(3);
  if (KV == heads) return x;
  return x.unsqueeze(2).expand({B, KV, heads / KV, L, D}).reshape({B, heads, L, D});
}

// The gradient of expand_kv: each KV head sums its query heads'.
torch::Tensor sum_kv(const torch::Tensor& x, int64_t kv_heads) {
  const int64_t B = x.size(0), H = x.size(1), L = x.size(2), D = x.size(3);
  if (kv_heads == H) return x;
  return x.reshape({B, kv_heads, H / kv_heads, L, D}).sum(2);
}

// fp32 scores of one query chunk against one K/V chunk; a diagonal pair (the same chunk of the
// sequence) is causal, the kept off-diagonal ones see every key.
torch::Tensor block_scores(const torch::Tensor& qf, const torch::Tensor& kf, bool causal, double scale) {
  auto s = torch::matmul(qf, kf.transpose(-2, -1)) * scale;
  if (!causal) return s;
  auto mask = torch::ones({qf.size(2), kf.size(2)}, qf.options().dtype(torch::kBool)).triu(1);
  return s.masked_fill(mask, -std::numeric_limits<double>::infinity());
}

struct Partial {
  torch::Tensor out, lse;  // fp32 [B, H, Lq, D] and [B, H, Lq]
};

Partial block_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                      double scale) {
  RECORD_FUNCTION(kRingAttentionBlockScope, std::vector<c10::IValue>({q, k, v, causal, false}));
  const int64_t H = q.size(1);
  if (q.is_meta() && meta_ring_blocks_kept()) {
    const auto f32 = q.options().dtype(torch::kFloat32);
    Partial out{torch::empty({q.size(0), H, q.size(2), v.size(3)}, f32), torch::empty({q.size(0), H, q.size(2)}, f32)};
    if (guard.isActive()) guard.setOutputs(std::vector<c10::IValue>{out.out, out.lse});
    return out;
  }
  auto s = block_scores(q.to(torch::kFloat32), expand_kv(k, H).to(torch::kFloat32), causal, scale);
  // log-sum-exp by its row max (every kept row has a key: the diagonal's first), as
  // torch::logsumexp has no meta kernel in libtorch 1.13.
  auto hi = s.amax(-1, /*keepdim=*/true);
  auto lse = hi.squeeze(-1) + torch::exp(s - hi).sum(-1).log();
  auto p = torch::exp(s - lse.unsqueeze(-1));
  Partial out{torch::matmul(p, expand_kv(v, H).to(torch::kFloat32)), lse};
  if (guard.isActive()) guard.setOutputs(std::vector<c10::IValue>{out.out, out.lse});  // what the kernel writes
  return out;
}

// Online softmax: two partial attentions over disjoint key sets combine by their log-sum-exps.
void merge(Partial& acc, Partial p) {
  if (!acc.out.defined()) {
    acc = std::move(p);
    return;
  }
  auto hi = torch::max(acc.lse, p.lse);
  auto lse = hi + torch::log(torch::exp(acc.lse - hi) + torch::exp(p.lse - hi));
  acc.out = acc.out * torch::exp(acc.lse - lse).unsqueeze(-1) + p.out * torch::exp(p.lse - lse).unsqueeze(-1);
  acc.lse = lse;
}

struct BlockGrads {
  torch::Tensor dq, dk, dv;  // fp32: [B, H, Lq, D], [B, KV, Lk, D], [B, KV, Lk, D]
};

// One pair's gradients from the row's final log-sum-exp and delta = rowsum(dO * O) (flash
// attention's backward): P = exp(S - lse), dV = P^T dO, dS = P (dO V^T - delta), dQ = dS K s,
// dK = dS^T Q s.
BlockGrads block_backward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          const torch::Tensor& dout, const torch::Tensor& lse, const torch::Tensor& delta, bool causal,
                          double scale) {
  RECORD_FUNCTION(kRingAttentionBlockScope, std::vector<c10::IValue>({q, k, v, causal, true}));
  const int64_t H = q.size(1), KV = k.size(1);
  if (q.is_meta() && meta_ring_blocks_kept()) {
    const auto f32 = q.options().dtype(torch::kFloat32);
    BlockGrads g{torch::empty(q.sizes(), f32), torch::empty(k.sizes(), f32), torch::empty(v.sizes(), f32)};
    if (guard.isActive()) guard.setOutputs(std::vector<c10::IValue>{g.dq, g.dk, g.dv});
    return g;
  }
  auto qf = q.to(torch::kFloat32), kf = expand_kv(k, H).to(torch::kFloat32), vf = expand_kv(v, H).to(torch::kFloat32);
  auto p = torch::exp(block_scores(qf, kf, causal, scale) - lse.unsqueeze(-1));
  auto dv = torch::matmul(p.transpose(-2, -1), dout);
  auto ds = p * (torch::matmul(dout, vf.transpose(-2, -1)) - delta.unsqueeze(-1));
  auto dq = torch::matmul(ds, kf) * scale;
  auto dk = torch::matmul(ds.transpose(-2, -1), qf) * scale;
  BlockGrads g{dq, sum_kv(dk, KV), sum_kv(dv, KV)};
  if (guard.isActive()) guard.setOutputs(std::vector<c10::IValue>{g.dq, g.dk, g.dv});
  return g;
}

std::atomic<bool> ring_blocks_kept{false};

// Global chunk index of chunk j (0 or 1) held by cp rank s of n.
int64_t chunk_of(int64_t n, int64_t s, int64_t j) { return j == 0 ? s : 2 * n - 1 - s; }

// Calls fn(i, j, causal) for every pair of this rank's query chunk i and source rank s's K/V chunk j
// that causal attention keeps (a K/V chunk later in the sequence than the queries is skipped).
template <class F>
void for_kept_pairs(int64_t n, int64_t r, int64_t s, F fn) {
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2; ++j) {
      const int64_t a = chunk_of(n, r, i), b = chunk_of(n, s, j);
      if (b <= a) fn(i, j, b == a);
    }
}

// Sends `out` to the next cp rank and receives `in` from the previous one. Even ranks issue the
// send first, odd ranks the receive, so that blocking transfers (collective_mode = separate)
// pair up around the ring instead of every rank waiting in its send.
std::vector<WorkPtr> shift(Communicator& cp, const torch::Tensor& out, const torch::Tensor& in, int tag) {
  const int n = cp.size(), r = cp.rank(), next = (r + 1) % n, prev = (r + n - 1) % n;
  std::vector<WorkPtr> w;
  if (r % 2 == 0) {
    w.push_back(cp.send(out, next, tag));
    w.push_back(cp.recv(in, prev, tag));
  } else {
    w.push_back(cp.recv(in, prev, tag));
    w.push_back(cp.send(out, next, tag));
  }
  return w;
}

void wait_all(const std::vector<WorkPtr>& works) {
  for (const auto& w : works) w->wait();
}

// Forward over every source rank's K/V: (out fp32 [B, H, L, D], lse fp32 [B, H, L]).
std::pair<torch::Tensor, torch::Tensor> ring_forward(const torch::Tensor& q, const torch::Tensor& k,
                                                     const torch::Tensor& v, double scale, Communicator& cp,
                                                     CpRotate method) {
  const int64_t n = cp.size(), r = cp.rank(), c = q.size(2) / 2;
  Partial acc[2];
  auto attend = [&](const torch::Tensor& kv, int64_t s) {
    for_kept_pairs(n, r, s, [&](int64_t i, int64_t j, bool causal) {
      merge(acc[i], block_forward(q.narrow(2, i * c, c), kv[0].narrow(2, j * c, c), kv[1].narrow(2, j * c, c),
                                  causal, scale));
    });
  };
  torch::Tensor kv = torch::stack({k, v}).contiguous();  // one transfer carries both
  if (method == CpRotate::kAllGather) {
    auto sizes = kv.sizes().vec();
    sizes.insert(sizes.begin(), n);
    auto all = torch::empty(sizes, kv.options());
    // The local (diagonal) blocks need only this rank's K/V: they run while the gather is in
    // flight, as PyTorch's all-gather rotater overlaps it with the first ring step.
    WorkPtr gather = cp.all_gather(all, kv);
    attend(kv, r);
    gather->wait();
    for (int64_t t = 1; t < n; ++t) attend(all[(r - t + n) % n], (r - t + n) % n);
  } else {
    // Step t attends to the K/V of rank r - t while the next rank's arrives.
    for (int64_t t = 0; t < n; ++t) {
      torch::Tensor next;
      std::vector<WorkPtr> w;
      if (t + 1 < n) {
        next = torch::empty_like(kv);
        w = shift(cp, kv, next, kKvTag);
      }
      attend(kv, (r - t + n) % n);
      wait_all(w);
      if (t + 1 < n) kv = next;
    }
  }
  return {torch::cat({acc[0].out, acc[1].out}, 2), torch::cat({acc[0].lse, acc[1].lse}, 2)};
}

// Backward: dQ stays here; dK/dV of each source rank's chunks are summed over the ranks that
// attended to them and returned to their owner.
variable_list ring_backward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& out, const torch::Tensor& lse, const torch::Tensor& grad,
                            double scale, Communicator& cp, CpRotate method) {
  const int64_t n = cp.size(), r = cp.rank(), c = q.size(2) / 2;
  auto dout = grad.to(torch::kFloat32);
  auto delta = (dout * out).sum(-1);
  auto dq = torch::zeros(out.sizes(), out.options());
  torch::Tensor kv = torch::stack({k, v}).contiguous();
  const auto f32 = kv.options().dtype(torch::kFloat32);
  auto grads_of = [&](const torch::Tensor& kv_s, int64_t s) {
    auto dkv = torch::zeros(kv_s.sizes(), f32);
    for_kept_pairs(n, r, s, [&](int64_t i, int64_t j, bool causal) {
      auto g = block_backward(q.narrow(2, i * c, c), kv_s[0].narrow(2, j * c, c), kv_s[1].narrow(2, j * c, c),
                              dout.narrow(2, i * c, c), lse.narrow(2, i * c, c), delta.narrow(2, i * c, c), causal,
                              scale);
      dq.narrow(2, i * c, c).add_(g.dq);
      dkv[0].narrow(2, j * c, c).add_(g.dk);
      dkv[1].narrow(2, j * c, c).add_(g.dv);
    });
    return dkv;
  };
  torch::Tensor dkv = torch::empty(kv.sizes(), f32);
  if (method == CpRotate::kAllGather) {
    // Gathered again rather than kept from forward (cp x the K/V held between the passes).
    auto sizes = kv.sizes().vec();
    sizes.insert(sizes.begin(), n);
    auto all = torch::empty(sizes, kv.options());
    WorkPtr gather = cp.all_gather(all, kv);  // overlaps the local blocks, as in forward
    auto grads = torch::empty(sizes, f32);
    grads[r].copy_(grads_of(kv, r));
    gather->wait();
    for (int64_t t = 1; t < n; ++t) {
      const int64_t s = (r - t + n) % n;
      grads[s].copy_(grads_of(all[s], s));
    }
    cp.reduce_scatter(dkv, grads, ReduceOp::kSum)->wait();
  } else {
    // total: the gradient of the K/V held at this step, summed over the ranks it has visited.
    // It moves on to the next rank while that rank's K/V arrives, and after n steps is home.
    torch::Tensor total;
    for (int64_t t = 0; t < n; ++t) {
      torch::Tensor next, arrived;
      std::vector<WorkPtr> w, wg;
      if (t + 1 < n) {
        next = torch::empty_like(kv);
        w = shift(cp, kv, next, kKvTag);
      }
      if (t > 0) {
        arrived = torch::empty(kv.sizes(), f32);
        wg = shift(cp, total, arrived, kGradTag);  // the previous source's sum goes on, this one's comes in
      }
      auto local = grads_of(kv, (r - t + n) % n);
      wait_all(wg);
      total = t > 0 ? local + arrived : local;
      wait_all(w);
      if (t + 1 < n) kv = next;
    }
    wait_all(shift(cp, total, dkv, kGradTag));
  }
  return {dq.to(q.scalar_type()), dkv[0].to(k.scalar_type()), dkv[1].to(v.scalar_type())};
}

struct RingAttentionFn : torch::autograd::Function<RingAttentionFn> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor q, torch::Tensor k, torch::Tensor v, double scale,
                               int64_t comm, int64_t method) {
    auto& cp = *reinterpret_cast<Communicator*>(comm);
    auto [out, lse] = ring_forward(q, k, v, scale, cp, static_cast<CpRotate>(method));
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["cp"] = comm;
    ctx->saved_data["method"] = method;
    return out.to(q.scalar_type());
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    auto s = ctx->get_saved_variables();
    auto& cp = *reinterpret_cast<Communicator*>(ctx->saved_data["cp"].toInt());
    auto grads = ring_backward(s[0], s[1], s[2], s[3], s[4], g[0], ctx->saved_data["scale"].toDouble(), cp,
                               static_cast<CpRotate>(ctx->saved_data["method"].toInt()));
    grads.resize(6);
    return grads;
  }
};

}  // namespace

bool meta_ring_blocks_kept() { return ring_blocks_kept.load(std::memory_order_relaxed); }
void set_meta_ring_blocks_kept(bool on) { ring_blocks_kept.store(on, std::memory_order_relaxed); }

torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale,
                             Communicator& cp, CpRotate method) {
  TITAN_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && k.sizes() == v.sizes(),
              "ring attention: expected q [B, H, L, D], k and v [B, KV, L, D], got ", q.sizes(), ", ", k.sizes(),
              ", ", v.sizes());
  TITAN_CHECK(k.size(2) == q.size(2) && q.size(2) % 2 == 0 && q.size(1) % k.size(1) == 0,
              "ring attention: this rank's sequence must be two equal chunks of q, k and v, and the KV heads must "
              "divide the query heads; got q ", q.sizes(), ", k ", k.sizes());
  return RingAttentionFn::apply(q, k, v, scale, reinterpret_cast<int64_t>(&cp), static_cast<int64_t>(method));
}

AttentionFn ring_attention_fn(Communicator& cp, CpRotate method) {
  return [&cp, method](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale) {
    return ring_attention(q, k, v, scale, cp, method);
  };
}

}  // namespace titan
