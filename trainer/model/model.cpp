#include "trainer/model/model.h"

#include <cmath>

#include <ATen/record_function.h>

#include "trainer/model/hooks/op_save_hook.h"
#include "trainer/model/kept_ops.h"
#include "trainer/model/kernels/attention_kernel.h"
#include "trainer/model/kernels/cross_entropy_kernel.h"
#include "trainer/model/kernels/linear_kernel.h"
#include "trainer/model/kernels/meta_kernel.h"
#include "trainer/model/kernels/rms_norm_kernel.h"
#include "trainer/model/kernels/rope_kernel.h"
#include "trainer/model/kernels/swiglu_kernel.h"
#include "trainer/model/moe.h"

namespace titan {
namespace {

// The composite ops; or, when `scoped` (the meta stand-in of a tensor the kernel takes,
// fused_kernels.h) in a recording that keeps the fused kernels, the kernel's stand-in
// (meta_kernel.h) in its scope with `inputs`, returning output() (the kernel's output layout).
template <class Out, class F>
torch::Tensor composite_or_stand_in(bool scoped, const char* scope, const std::vector<torch::Tensor>& inputs,
                                    Out output, F composite) {
  if (!scoped || !meta_records_fused_kernels()) return composite();
  return meta_kernel(scope, std::vector<c10::IValue>(inputs.begin(), inputs.end()), inputs, output);
}

// composite_or_stand_in under op-level activation checkpointing (trainer/model/hooks/op_save_hook.h):
// kKeep hands the output to the hook; kReuse returns the kept output, from reuse(kept) (the
// composite path's node, whose backward is the op's) or, where the recording keeps the
// kernel, from the kernel's stand-in inside KeptOutputScope (its backward only is recorded).
template <class Out, class F, class R>
torch::Tensor kept_or_stand_in(OpSaveAction act, SavedOp op, bool scoped, const char* scope,
                               const std::vector<torch::Tensor>& inputs, Out output, F composite, R reuse) {
  if (act == OpSaveAction::kReuse) {
    torch::Tensor kept = op_save_take(op)[0];
    if (!scoped || !meta_records_fused_kernels()) return reuse(kept);
    KeptOutputScope reused(true);
    return meta_kernel(scope, std::vector<c10::IValue>(inputs.begin(), inputs.end()), inputs, [kept] { return kept; });
  }
  auto y = composite_or_stand_in(scoped, scope, inputs, output, composite);
  if (act == OpSaveAction::kKeep) op_save_keep(op, {y});
  return y;
}

// The composite causal attention (q [B, H, S, D], k and v [B, KV, S, D]).
torch::Tensor composite_attention(const torch::Tensor& q, torch::Tensor k, torch::Tensor v, int64_t head_dim) {
  // A recording that costs the attention as one kernel sees none of the ops below.
  if (q.is_meta() && meta_records_attention_kernel()) return meta_attention_stand_in(q, k, v);
  const int64_t B = q.size(0), H = q.size(1), S = q.size(2), KV = k.size(1);
  if (H != KV) {  // grouped-query attention: each kv head serves H / KV query heads
    k = k.unsqueeze(2).expand({B, KV, H / KV, S, head_dim}).reshape({B, H, S, head_dim});
    v = v.unsqueeze(2).expand({B, KV, H / KV, S, head_dim}).reshape({B, H, S, head_dim});
  }
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(head_dim));
  auto causal = torch::ones({S, S}, q.options().dtype(torch::kBool)).triu(1);
  scores = scores.masked_fill(causal, -std::numeric_limits<double>::infinity());
  auto probs = torch::softmax(scores, -1, torch::kFloat32).to(q.scalar_type());
  return torch::matmul(probs, v);
}

// x [..., in] @ w^T as the fused linear returns it: contiguous [..., out].
torch::Tensor linear_output_like(const torch::Tensor& x, const torch::Tensor& w) {
  auto shape = x.sizes().vec();
  shape.back() = w.size(0);
  return torch::empty(shape, x.options());
}

// x through layers that all read it (q/k/v, gate/up): as one fused node where each layer
// would take the fused linear on its own and no plan wraps any of them (a wrap may change x
// or the product per layer: TP's row layers, a pipeline's deferred weight gradients), so
// the input gradient is summed inside the GEMMs (linear_kernel.h); else layer by layer.
// On the meta device, in a recording that keeps the fused kernels, the same grouping's
// stand-in, so that the recording holds the real run's ops.
std::vector<torch::Tensor> shared_input_linears(const std::vector<Linear*>& layers, const torch::Tensor& x) {
  bool together = true;
  std::vector<torch::Tensor> weights;
  for (Linear* l : layers) {
    together = together && (*l)->fused && !(*l)->wrap && (*l)->weight.scalar_type() == x.scalar_type();
    weights.push_back((*l)->weight);
  }
  // One op-save decision per layer, as each is one product of the block.
  auto actions = [&] {
    std::vector<OpSaveAction> a;
    for (size_t i = 0; i < layers.size(); ++i) a.push_back(op_save_next(SavedOp::kLinear));
    return a;
  };
  if (together && fusable(x)) return fused_linears(x, weights, actions());
  if (together && fusable_on_meta(x) && meta_records_fused_kernels())
    return meta_shared_input_linears(x, weights, actions());
  std::vector<torch::Tensor> out;
  for (Linear* l : layers) out.push_back((*l)(x));
  return out;
}

// relu as clamp_min(x, 0) with relu's backward (threshold_backward on the saved output):
// libtorch 1.13 has no meta kernel for aten::relu, and clamp_min's own backward reads its
// input through `where`, which has none either. The same node runs on real tensors, so a
// simulated step records what a real one runs and keeps (one ffn-wide output, which w2 keeps
// as its input too).
struct ReluFn : public torch::autograd::Function<ReluFn> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
    auto y = torch::clamp_min(x, 0);
    ctx->save_for_backward({y});
    return y;
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    return {torch::threshold_backward(grads[0], ctx->get_saved_variables()[0], 0)};
  }
};

}  // namespace

LinearImpl::LinearImpl(int64_t in, int64_t out, const torch::TensorOptions& opts) {
  weight = register_parameter("weight", torch::empty({out, in}, opts));
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  return apply_wrap(wrap, x, [this](const torch::Tensor& in) {
    const OpSaveAction act = op_save_next(SavedOp::kLinear);
    if (fused && fusable(in) && weight.scalar_type() == in.scalar_type()) return fused_linears(in, {weight}, {act})[0];
    return kept_or_stand_in(
        act, SavedOp::kLinear, fused && fusable_on_meta(in) && weight.scalar_type() == in.scalar_type(),
        kFusedLinearScope, {in, weight}, [&] { return linear_output_like(in, weight); },
        [&] { return torch::matmul(in, weight.t()); }, [&](const torch::Tensor& kept) { return kept_linear(in, weight, kept); });
  });
}

EmbeddingImpl::EmbeddingImpl(int64_t vocab, int64_t dim, const torch::TensorOptions& opts) {
  weight = register_parameter("weight", torch::empty({vocab, dim}, opts));
}

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& ids) {
  return apply_wrap(wrap, ids, [this](const torch::Tensor& in) { return weight.index({in}); });
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_, const torch::TensorOptions& opts) : eps(eps_) {
  weight = register_parameter("weight", torch::empty({dim}, opts));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  return apply_wrap(wrap, x, [this](const torch::Tensor& in) {
    if (fused && fusable(in) && in.scalar_type() == weight.scalar_type()) return fused_rms_norm(in, weight, eps);
    return composite_or_stand_in(fused && fusable_on_meta(in) && in.scalar_type() == weight.scalar_type(),
                                 kFusedRmsNormScope, {in, weight}, [&] { return torch::empty(in.sizes(), in.options()); }, [&] {
                                auto xf = in.to(torch::kFloat32);
                                auto normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
                                return weight * normed.to(in.scalar_type());
                              });
  });
}

RopeTables make_rope_tables(int64_t max_seq, int64_t head_dim, double theta,
                            const torch::TensorOptions& opts) {
  if (opts.device().is_meta()) {
    auto o = opts.dtype(torch::kFloat32);
    return {torch::empty({max_seq, head_dim}, o), torch::empty({max_seq, head_dim}, o)};
  }
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  auto inv_freq = 1.0 / torch::pow(theta, torch::arange(0, head_dim, 2, f64) / double(head_dim));
  auto freqs = torch::outer(torch::arange(max_seq, f64), inv_freq);
  auto emb = torch::cat({freqs, freqs}, -1);
  auto o = opts.dtype(torch::kFloat32);
  return {emb.cos().to(o), emb.sin().to(o)};
}

torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  // x [B, H, S, D]; cos/sin [S, D]. rotate_half(x) = cat(-x2, x1).
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  auto rotated = torch::cat({-x2, x1}, -1);
  auto c = cos.to(x.scalar_type()), s = sin.to(x.scalar_type());
  return x * c + rotated * s;
}

AttentionImpl::AttentionImpl(const ModelArgs& a, const torch::TensorOptions& opts)
    : head_dim(a.head_dim) {
  wq = register_module("wq", Linear(a.dim, a.n_heads * a.head_dim, opts));
  wk = register_module("wk", Linear(a.dim, a.n_kv_heads * a.head_dim, opts));
  wv = register_module("wv", Linear(a.dim, a.n_kv_heads * a.head_dim, opts));
  wo = register_module("wo", Linear(a.n_heads * a.head_dim, a.dim, opts));
  if (a.qk_norm) {
    q_norm = register_module("q_norm", RMSNorm(a.head_dim, a.norm_eps, opts));
    k_norm = register_module("k_norm", RMSNorm(a.head_dim, a.norm_eps, opts));
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const RopeTables& rope) {
  const int64_t B = x.size(0), S = x.size(1);
  auto qkv = shared_input_linears({&wq, &wk, &wv}, x);
  auto q = qkv[0].view({B, S, -1, head_dim});
  auto k = qkv[1].view({B, S, -1, head_dim});
  auto v = qkv[2].view({B, S, -1, head_dim});
  if (q_norm) {
    q = q_norm(q);
    k = k_norm(k);
  }
  q = q.transpose(1, 2);  // [B, H, S, D]
  k = k.transpose(1, 2);
  v = v.transpose(1, 2);
  auto cos = rope.cos.narrow(0, 0, S), sin = rope.sin.narrow(0, 0, S);
  if (kernels.rope && fusable(q) && fusable(k)) {
    q = fused_rope(q, cos, sin);
    k = fused_rope(k, cos, sin);
  } else {
    const bool scoped = kernels.rope && fusable_on_meta(q) && fusable_on_meta(k);
    // The kernel keeps its input's layout ([B, S, H, D] memory).
    q = composite_or_stand_in(scoped, kFusedRopeScope, {q, cos, sin}, [&] { return torch::empty_like(q); },
                              [&] { return apply_rope(q, cos, sin); });
    k = composite_or_stand_in(scoped, kFusedRopeScope, {k, cos, sin}, [&] { return torch::empty_like(k); },
                              [&] { return apply_rope(k, cos, sin); });
  }
  const int64_t H = q.size(1);
  // A plan's attention across ranks (context parallel) in place of the local causal one.
  if (attention_fn) return wo(attention_fn(q, k, v, 1.0 / std::sqrt(double(head_dim))).transpose(1, 2).reshape({B, S, H * head_dim}));
  torch::Tensor attn;
  const OpSaveAction act = op_save_next(SavedOp::kAttention);
  {
    // A reused attention output: the recorder costs no forward inside this scope.
    KeptOutputScope reused(act == OpSaveAction::kReuse);
    // Profiling annotation only (no effect on the math): the simulator costs what runs in
    // this scope as one flash-attention kernel (kAttentionScope,
    // trainer/simulate/trace_recorder.h).
    RECORD_FUNCTION("titan::attention", std::vector<c10::IValue>({q, k, v}));
    if (kernels.attention && fusable(q) && k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type()) {
      attn = fused_causal_attention(q, k, v, 1.0 / std::sqrt(double(head_dim)), act);
    } else {
      const bool scoped = kernels.attention && fusable_on_meta(q) && k.scalar_type() == q.scalar_type() &&
                          v.scalar_type() == q.scalar_type();
      const int64_t hd = head_dim;
      // The kernel writes [B, H, S, D] as a view of [B, S, H, D] memory, like q.
      attn = kept_or_stand_in(
          act, SavedOp::kAttention, scoped, kFusedAttentionScope, {q, k, v}, [&] { return torch::empty_like(q); },
          [&] { return composite_attention(q, k, v, hd); },
          [&](const torch::Tensor& kept) {
            return kept_recomputed({q, k, v}, kept, [hd](const std::vector<torch::Tensor>& in) {
              return composite_attention(in[0], in[1], in[2], hd);
            });
          });
    }
    // The output, as the recorder's flash kernel writes it (the memory walk names it its maker).
    if (guard.isActive()) guard.setOutputs(std::vector<c10::IValue>{attn});
  }
  auto out = attn.transpose(1, 2).reshape({B, S, H * head_dim});
  return wo(out);
}

FeedForwardImpl::FeedForwardImpl(const ModelArgs& a, const torch::TensorOptions& opts)
    : activation(a.mlp_activation) {
  w1 = register_module("w1", Linear(a.dim, a.ffn_dim, opts));
  w2 = register_module("w2", Linear(a.ffn_dim, a.dim, opts));
  if (a.gated_mlp()) w3 = register_module("w3", Linear(a.dim, a.ffn_dim, opts));
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  // Non-gated: plain ATen ops (no fused CPU kernel; they run on the meta device too, where the
  // simulator records them as element-wise ops that a compiled step fuses).
  if (activation == MlpActivation::kGelu) return w2(torch::gelu(w1(x), "tanh"));
  if (activation == MlpActivation::kRelu) return w2(ReluFn::apply(w1(x)));
  auto gate_up = shared_input_linears({&w1, &w3}, x);
  auto &gate = gate_up[0], &up = gate_up[1];
  if (fused && fusable(gate) && up.scalar_type() == gate.scalar_type()) return w2(fused_swiglu(gate, up));
  return w2(composite_or_stand_in(fused && fusable_on_meta(gate) && up.scalar_type() == gate.scalar_type(),
                                  kFusedSwigluScope, {gate, up}, [&] { return torch::empty(gate.sizes(), gate.options()); },
                                  [&] { return torch::silu(gate) * up; }));
}

TransformerBlockImpl::TransformerBlockImpl(const ModelArgs& a, const torch::TensorOptions& opts, int64_t layer) {
  attention = register_module("attention", Attention(a, opts));
  if (a.moe_layer(layer)) moe = register_module("moe", std::make_shared<MoEImpl>(a, opts));
  else feed_forward = register_module("feed_forward", FeedForward(a, opts));
  attention_norm = register_module("attention_norm", RMSNorm(a.dim, a.norm_eps, opts));
  ffn_norm = register_module("ffn_norm", RMSNorm(a.dim, a.norm_eps, opts));
}

torch::Tensor TransformerBlockImpl::forward(const torch::Tensor& x, const RopeTables& rope) {
  // Profiling annotation only: the simulator tells the block's ops from the rest of the step by
  // it (kBlockScope, trainer/simulate/trace_recorder.h), for compilers that cover only blocks.
  RECORD_FUNCTION("titan::block", std::vector<c10::IValue>());
  auto h = x + attention(attention_norm(x), rope);
  return h + (moe ? moe->forward(ffn_norm(h)) : feed_forward(ffn_norm(h)));
}

TransformerImpl::TransformerImpl(const ModelArgs& a, int64_t max_seq_len,
                                 const torch::TensorOptions& opts)
    : args(a) {
  tok_embeddings = register_module("tok_embeddings", Embedding(a.vocab_size, a.dim, opts));
  auto list = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < a.n_layers; ++i) {
    layers.push_back(TransformerBlock(a, opts, i));
    list->push_back(layers.back());
  }
  norm = register_module("norm", RMSNorm(a.dim, a.norm_eps, opts));
  if (!a.tie_embeddings) output = register_module("output", Linear(a.dim, a.vocab_size, opts));
  rope = make_rope_tables(max_seq_len, a.head_dim, a.rope_theta, opts);
}

torch::Tensor TransformerImpl::hidden(const torch::Tensor& tokens) {
  return norm(run_layers(tok_embeddings(tokens), 0, static_cast<int64_t>(layers.size())));
}

torch::Tensor TransformerImpl::run_layers(torch::Tensor h, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    ForwardFn fn = [this, i](const torch::Tensor& x) { return layers[i]->forward(x, rope); };
    // Wrappers compose outermost first: wrapper 0 sees the others as its inner function.
    for (auto it = block_wrappers.rbegin(); it != block_wrappers.rend(); ++it) {
      const BlockWrapFn& w = *it;
      fn = [w, i, fn](const torch::Tensor& x) { return w(i, x, fn); };
    }
    h = fn(h);
  }
  return h;
}

torch::Tensor TransformerImpl::head(const torch::Tensor& h) {
  if (output) return output(h);
  const auto& w = tok_embeddings->weight;
  if (kernels.linear && fusable(h) && w.scalar_type() == h.scalar_type()) return fused_linear(h, w);
  return composite_or_stand_in(kernels.linear && fusable_on_meta(h) && w.scalar_type() == h.scalar_type(),
                               kFusedLinearScope, {h, w}, [&] { return linear_output_like(h, w); },
                               [&] { return torch::matmul(h, w.t()); });
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens) {
  return apply_wrap(forward_wrap, tokens, [this](const torch::Tensor& t) { return head(hidden(t)); });
}

void TransformerImpl::set_fused_kernels(const FusedKernels& k) {
  kernels = k;
  if (output) output->fused = k.linear;
  for (auto& block : layers) {
    block->attention->kernels = k;
    Linear none{nullptr};
    FeedForward& ff = block->moe ? block->moe->shared_expert : block->feed_forward;
    for (auto* l : {&block->attention->wq, &block->attention->wk, &block->attention->wv, &block->attention->wo,
                    ff ? &ff->w1 : &none, ff ? &ff->w2 : &none, ff ? &ff->w3 : &none,
                    block->moe ? &block->moe->router : &none}) {
      if (*l) (*l)->fused = k.linear;
    }
    for (auto* n : {&block->attention_norm, &block->ffn_norm, &block->attention->q_norm, &block->attention->k_norm}) {
      if (*n) (*n)->fused = k.rms_norm;
    }
    if (ff) ff->fused = k.swiglu;
  }
  norm->fused = k.rms_norm;
}

torch::Tensor cross_entropy_sum(const torch::Tensor& logits, const torch::Tensor& labels,
                                double normalizer, bool fused) {
  if (fused && fusable(logits)) return fused_cross_entropy_sum(logits, labels, normalizer);
  // A recording for a compiler that covers the whole step keeps the loss as one fusion: no
  // fp32 copy or log-probabilities of the logits reach memory (trainer/simulate/trace_recorder.h).
  if (logits.is_meta() && meta_records_fused_cross_entropy() && !(fused && fusable_on_meta(logits) && meta_records_fused_kernels()))
    return meta_kernel(kFusedCrossEntropyScope, {logits, labels}, {logits, labels},
                       [&] { return torch::empty({}, logits.options()); });
  return composite_or_stand_in(
      fused && fusable_on_meta(logits), kFusedCrossEntropyScope, {logits, labels},
      [&] { return torch::empty({}, logits.options()); }, [&] {
    auto flat = logits.reshape({-1, logits.size(-1)}).to(torch::kFloat32);
    auto logp = torch::log_softmax(flat, -1);
    auto picked = logp.gather(1, labels.reshape({-1, 1}));
    return -picked.sum() / normalizer;
  });
}

}  // namespace titan
