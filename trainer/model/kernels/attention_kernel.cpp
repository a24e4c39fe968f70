#include "trainer/model/kernels/attention_kernel.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include "common/error.h"
#include "trainer/model/hooks/op_save_hook.h"
#include "trainer/model/kernels/attention_tiles.h"
#include "trainer/model/kernels/fused_kernels.h"
#include "trainer/model/kernels/thread_choice.h"

namespace titan {
namespace {

using namespace simd;

// Strides of a [B, heads, S, D] tensor (last dim 1) and its base pointer.
template <typename T>
View<T> view_of(const torch::Tensor& t) {
  return {t.data_ptr<T>(), t.stride(0), t.stride(1), t.stride(2)};
}

// This thread's scratch for the task bodies: grown to the largest request and kept, so that a
// training step whose shapes repeat allocates none.
template <typename T>
T* thread_scratch(int64_t n) {
  thread_local std::vector<T> buf;
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

torch::Tensor last_dim_contiguous(const torch::Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); }

// Whether the AVX-512 tiles (two 64-byte vectors wide: 32 floats) fit a head dim: a head dim
// that is no multiple of their width (the debug model's 16) runs the products into dq, dk,
// dv and o on the tiles' narrow tail path, which measured slower than AVX2 (backward 2.3 vs
// 1.8 ms at B8 H8 S128 D16, 1 thread).
template <typename T>
bool wide_tiles_fit(int64_t D) {
  return D % (2 * lanes<T, 64>) == 0;
}

// [B, H, S, D] view of fresh [B, S, H, D] memory.
torch::Tensor bshd_like(const torch::Tensor& q) {
  return torch::empty({q.size(0), q.size(2), q.size(1), q.size(3)}, q.options()).transpose(1, 2);
}

struct CausalAttentionFunction : public torch::autograd::Function<CausalAttentionFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q_in,
                               const torch::Tensor& k_in, const torch::Tensor& v_in, double scale, int64_t action) {
    auto q = last_dim_contiguous(q_in), k = last_dim_contiguous(k_in), v = last_dim_contiguous(v_in);
    const int64_t B = q.size(0), H = q.size(1), S = q.size(2), D = q.size(3), KV = k.size(1);
    const auto act = static_cast<OpSaveAction>(action);
    if (act == OpSaveAction::kReuse) {
      // The output and log-sum-exp kept from the block's forward: the backward needs no more.
      auto kept = op_save_take(SavedOp::kAttention);
      ctx->save_for_backward({q, k, v, kept[0], kept[1]});
      ctx->saved_data["scale"] = scale;
      return kept[0];
    }
    auto o = bshd_like(q);
    auto lse = torch::empty({B, H, S}, q.options());
    dispatch_float(q, [&](auto tag) {
      using T = decltype(tag);
      const AttentionShape<T> shape{B, H, KV, S, D, T(scale)};
      const bool wide = wide_tiles_fit<T>(D);
      const View<T> qv = view_of<T>(q), kv = view_of<T>(k), vv = view_of<T>(v), ov = view_of<T>(o);
      T* lp = lse.data_ptr<T>();
      chosen_parallel_for("attention.forward", S * D * H, 0, B * KV, 1, [&](int64_t begin, int64_t end) {
        T* ws = thread_scratch<T>(forward_workspace(shape));
        for (int64_t task = begin; task < end; ++task) {
          if (wide) {
            attention_forward_task<T>(shape, qv, kv, vv, ov, lp, task, ws);
          } else {
            attention_forward_task_narrow<T>(shape, qv, kv, vv, ov, lp, task, ws);
          }
        }
      });
    });
    ctx->save_for_backward({q, k, v, o, lse});
    ctx->saved_data["scale"] = scale;
    if (act == OpSaveAction::kKeep) op_save_keep(SavedOp::kAttention, {o, lse});
    return o;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto &q = saved[0], &k = saved[1], &v = saved[2], &o = saved[3], &lse = saved[4];
    auto dout = last_dim_contiguous(grads[0]);
    const int64_t B = q.size(0), H = q.size(1), S = q.size(2), D = q.size(3), KV = k.size(1);
    auto dq = bshd_like(q), dk = bshd_like(k), dv = bshd_like(v);
    auto delta = torch::empty({B, H, S}, q.options());
    dispatch_float(q, [&](auto tag) {
      using T = decltype(tag);
      const AttentionShape<T> shape{B, H, KV, S, D, T(ctx->saved_data["scale"].toDouble())};
      const bool wide = wide_tiles_fit<T>(D);
      const View<T> qv = view_of<T>(q), kv = view_of<T>(k), vv = view_of<T>(v), ov = view_of<T>(o),
                    gv = view_of<T>(dout), dqv = view_of<T>(dq), dkv = view_of<T>(dk), dvv = view_of<T>(dv);
      const T* lp = lse.data_ptr<T>();
      T* dp = delta.data_ptr<T>();
      chosen_parallel_for("attention.delta", H * D, 0, B * S, row_grain(H * D), [&](int64_t begin, int64_t end) {
        if (wide) {
          attention_delta<T>(shape, ov, gv, dp, begin, end);
        } else {
          attention_delta_narrow<T>(shape, ov, gv, dp, begin, end);
        }
      });
      chosen_parallel_for("attention.backward", S * D * H, 0, B * KV, 1, [&](int64_t begin, int64_t end) {
        T* ws = thread_scratch<T>(backward_workspace(shape));
        for (int64_t task = begin; task < end; ++task) {
          if (wide) {
            attention_backward_task<T>(shape, qv, kv, vv, gv, lp, dp, dqv, dkv, dvv, task, ws);
          } else {
            attention_backward_task_narrow<T>(shape, qv, kv, vv, gv, lp, dp, dqv, dkv, dvv, task, ws);
          }
        }
      });
    });
    return {dq, dk, dv, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor fused_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     double scale, OpSaveAction action) {
  TITAN_CHECK(fusable(q) && q.dim() == 4 && k.dim() == 4 && k.sizes() == v.sizes() &&
                  k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type() &&
                  k.size(0) == q.size(0) && k.size(2) == q.size(2) && k.size(3) == q.size(3) &&
                  k.size(1) > 0 && q.size(1) % k.size(1) == 0,
              "fused_causal_attention: needs float or double CPU q [B, H, S, D] and k, v [B, KV, S, D] with KV "
              "dividing H, got q ",
              q.sizes(), " ", q.scalar_type(), ", k ", k.sizes(), ", v ", v.sizes());
  return CausalAttentionFunction::apply(q, k, v, scale, static_cast<int64_t>(action));
}

}  // namespace titan
