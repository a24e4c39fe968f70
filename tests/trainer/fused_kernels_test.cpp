// Each fused kernel (trainer/model/kernels) against the composite ATen path, forward and
// backward, in double (to 1e-10) and float (to 1e-5), in every SIMD variant (AVX-512 where
// the kernel has one and the CPU runs it, AVX2, the baseline), on shapes with vector tails
// and on strided inputs; plus finite differences of each fused kernel in double
// (gradcheck-style) and the model-level switch.
#include <gtest/gtest.h>

#include <ATen/record_function.h>

#include <cmath>
#include <set>

#include "trainer/model/kernels/attention_kernel.h"
#include "trainer/model/kernels/cross_entropy_kernel.h"
#include "trainer/model/kernels/linear_kernel.h"
#include "trainer/model/kernels/rms_norm_kernel.h"
#include "trainer/model/kernels/rope_kernel.h"
#include "trainer/model/kernels/simd.h"
#include "trainer/model/kernels/swiglu_kernel.h"
#include "trainer/model/model.h"

namespace titan {
namespace {

using Fn = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

// Largest difference relative to the largest reference value; absolute where the reference is
// all zeros (a one-token softmax has no gradient, which roundoff leaves at ~1e-8).
double rel(const torch::Tensor& a, const torch::Tensor& b) {
  auto bd = b.to(torch::kFloat64);
  const double scale = bd.abs().max().item<double>();
  return (a.to(torch::kFloat64) - bd).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

double tolerance(torch::ScalarType t) { return t == torch::kFloat64 ? 1e-10 : 1e-5; }

// Runs fused and composite on copies of the same inputs (those at `grad_inputs` take
// gradients), backpropagates the same random upstream gradient and compares the outputs and
// every input gradient.
void expect_same(const Fn& fused, const Fn& composite, const std::vector<torch::Tensor>& inputs,
                 const std::vector<size_t>& grad_inputs, const std::string& what) {
  // 0: the best variant this CPU runs (AVX-512 for the wide kernels where it has it),
  // 1: AVX2 at most, 2: the baseline.
  for (int variant : {0, 1, 2}) {
    const bool baseline = variant == 2;
    simd::force_baseline(baseline);
    simd::force_no_avx512(variant == 1);
    std::vector<torch::Tensor> a, b;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const bool g = std::find(grad_inputs.begin(), grad_inputs.end(), i) != grad_inputs.end();
      a.push_back(inputs[i].detach().clone().requires_grad_(g));
      b.push_back(inputs[i].detach().clone().requires_grad_(g));
    }
    auto ya = fused(a), yb = composite(b);
    const std::string tag = what + (baseline ? " (baseline)" : variant == 1 ? " (avx2)" : " (best)") + " " +
                            c10::toString(ya.scalar_type());
    const double tol = tolerance(ya.scalar_type());
    ASSERT_EQ(ya.sizes(), yb.sizes()) << tag;
    EXPECT_LT(rel(ya, yb), tol) << tag << " forward";
    torch::manual_seed(99);
    auto up = torch::randn_like(yb);
    ya.backward(up);
    yb.backward(up);
    for (size_t i : grad_inputs) {
      ASSERT_TRUE(a[i].grad().defined()) << tag << " input " << i;
      EXPECT_LT(rel(a[i].grad(), b[i].grad()), tol) << tag << " gradient of input " << i;
    }
  }
  simd::force_baseline(false);
  simd::force_no_avx512(false);
}

// Central differences of <f(x), u> along a random direction of every gradient input, against
// the directional derivative the fused backward gives (double only).
void expect_gradcheck(const Fn& f, const std::vector<torch::Tensor>& inputs, const std::vector<size_t>& grad_inputs,
                      const std::string& what) {
  std::vector<torch::Tensor> x;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool g = std::find(grad_inputs.begin(), grad_inputs.end(), i) != grad_inputs.end();
    x.push_back(inputs[i].detach().clone().requires_grad_(g));
  }
  torch::manual_seed(7);
  auto y = f(x);
  auto u = torch::randn_like(y);
  (y * u).sum().backward();
  torch::NoGradGuard no_grad;
  for (size_t i : grad_inputs) {
    auto dir = torch::randn_like(x[i]);
    const double h = 1e-6;
    auto xp = x, xm = x;
    xp[i] = x[i].detach() + h * dir;
    xm[i] = x[i].detach() - h * dir;
    const double numeric = ((f(xp) * u).sum().item<double>() - (f(xm) * u).sum().item<double>()) / (2 * h);
    const double analytic = (x[i].grad() * dir).sum().item<double>();
    EXPECT_NEAR(numeric, analytic, 1e-6 * std::max(1.0, std::abs(analytic))) << what << " input " << i;
  }
}

torch::Tensor composite_rms(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  return w * (x * torch::rsqrt(x.pow(2).mean(-1, true) + eps));
}

// softmax(q k^T * scale, causal) v with kv heads repeated for their query heads.
torch::Tensor composite_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  double scale) {
  const int64_t rep = q.size(1) / k.size(1), S = q.size(2);
  auto kr = k.repeat_interleave(rep, 1), vr = v.repeat_interleave(rep, 1);
  auto s = torch::matmul(q, kr.transpose(-2, -1)) * scale;
  s = s.masked_fill(torch::ones({S, S}, torch::kBool).triu(1), -INFINITY);
  return torch::matmul(torch::softmax(s, -1), vr);
}

torch::Tensor reference_ce(const torch::Tensor& logits, const torch::Tensor& labels, double normalizer) {
  auto flat = logits.reshape({-1, logits.size(-1)});
  return -torch::log_softmax(flat, -1).gather(1, labels.reshape({-1, 1})).sum() / normalizer;
}

const torch::ScalarType kDtypes[] = {torch::kFloat64, torch::kFloat32};

TEST(FusedKernels, RmsNormMatchesComposite) {
  for (auto dt : kDtypes) {
    for (int64_t n : {12, 16, 48, 133}) {
      torch::manual_seed(n);
      auto x = torch::randn({5, 7, n}, dt), w = torch::rand({n}, dt) + 0.5;
      expect_same([](auto& t) { return fused_rms_norm(t[0], t[1], 1e-6); },
                  [](auto& t) { return composite_rms(t[0], t[1], 1e-6); }, {x, w}, {0, 1},
                  "rms_norm n=" + std::to_string(n));
      if (dt == torch::kFloat64) {
        expect_gradcheck([](auto& t) { return fused_rms_norm(t[0], t[1], 1e-6); }, {x, w}, {0, 1}, "rms_norm");
      }
    }
    // Strided rows, read in place: the per-head q of a fused q/k/v product ([B, S, H, D] columns
    // of [B, S, q + k + v]), and a transposed view that the kernel copies first.
    torch::manual_seed(4);
    auto qkv = torch::randn({2, 5, 3 * 16 + 2 * 16}, dt), w = torch::rand({16}, dt) + 0.5;
    auto q_heads = [](const torch::Tensor& t) { return t.narrow(-1, 0, 48).view({2, 5, 3, 16}); };
    expect_same([&](auto& t) { return fused_rms_norm(q_heads(t[0]), t[1], 1e-6); },
                [&](auto& t) { return composite_rms(q_heads(t[0]), t[1], 1e-6); }, {qkv, w}, {0, 1},
                "rms_norm on column-sliced heads");
    auto xt = torch::randn({16, 9}, dt);
    expect_same([](auto& t) { return fused_rms_norm(t[0].t(), t[1], 1e-6); },
                [](auto& t) { return composite_rms(t[0].t(), t[1], 1e-6); }, {xt, w}, {0, 1},
                "rms_norm on a transposed view");
    if (dt == torch::kFloat64) {
      expect_gradcheck([&](auto& t) { return fused_rms_norm(q_heads(t[0]), t[1], 1e-6); }, {qkv, w}, {0, 1},
                       "rms_norm on column-sliced heads");
    }
  }
}

TEST(FusedKernels, SwigluMatchesComposite) {
  for (auto dt : kDtypes) {
    torch::manual_seed(1);
    auto a = torch::randn({3, 41, 37}, dt) * 4, b = torch::randn({3, 41, 37}, dt);
    expect_same([](auto& t) { return fused_swiglu(t[0], t[1]); },
                [](auto& t) { return torch::silu(t[0]) * t[1]; }, {a, b}, {0, 1}, "swiglu");
    if (dt == torch::kFloat64) expect_gradcheck([](auto& t) { return fused_swiglu(t[0], t[1]); }, {a, b}, {0, 1}, "swiglu");
  }
}

TEST(FusedKernels, LinearMatchesMatmul) {
  for (auto dt : kDtypes) {
    torch::manual_seed(2);
    auto x = torch::randn({3, 17, 24}, dt), w = torch::randn({13, 24}, dt);
    expect_same([](auto& t) { return fused_linear(t[0], t[1]); },
                [](auto& t) { return torch::matmul(t[0], t[1].t()); }, {x, w}, {0, 1}, "linear");
    // A strided input (a transposed view) and a weight that takes no gradient.
    auto xt = torch::randn({24, 9}, dt).t();
    expect_same([](auto& t) { return fused_linear(t[0], t[1]); },
                [](auto& t) { return torch::matmul(t[0], t[1].t()); }, {xt, w}, {0}, "linear strided");
    if (dt == torch::kFloat64) expect_gradcheck([](auto& t) { return fused_linear(t[0], t[1]); }, {x, w}, {0, 1}, "linear");
  }
}

// Layers that read one x (q/k/v, gate/up) as one node: each output as its own matmul, x's
// gradient the sum over the layers (summed in the GEMMs), each weight's gradient its own.
TEST(FusedKernels, LinearsSharingAnInputMatchMatmuls) {
  for (auto dt : kDtypes) {
    torch::manual_seed(3);
    auto x = torch::randn({2, 11, 24}, dt), w0 = torch::randn({16, 24}, dt), w1 = torch::randn({8, 24}, dt),
         w2 = torch::randn({5, 24}, dt);
    auto joined = [](const std::vector<torch::Tensor>& ys) {
      std::vector<torch::Tensor> flat;
      for (const auto& y : ys) flat.push_back(y.flatten());
      return torch::cat(flat);
    };
    auto fused = [&](auto& t) { return joined(fused_linears(t[0], {t[1], t[2], t[3]})); };
    auto composite = [&](auto& t) {
      return joined({torch::matmul(t[0], t[1].t()), torch::matmul(t[0], t[2].t()), torch::matmul(t[0], t[3].t())});
    };
    expect_same(fused, composite, {x, w0, w1, w2}, {0, 1, 2, 3}, "linears");
    expect_same(fused, composite, {x, w0, w1, w2}, {0, 2}, "linears, some gradients");
    if (dt == torch::kFloat64) expect_gradcheck(fused, {x, w0, w1, w2}, {0, 1, 2, 3}, "linears");
  }
}

// aten ops run on this thread while counting is on (a RecordFunction callback).
thread_local std::vector<std::string>* g_ops = nullptr;
std::unique_ptr<at::ObserverContext> note_op(const at::RecordFunction& fn) {
  if (g_ops) g_ops->push_back(fn.name());
  return nullptr;
}

// A weight whose gradient is already allocated (the optimizer's flat buffer) takes dy^T x in
// place, in one addmm_ and no mm + add_: onto zeros the same bits as autograd's fresh
// product; onto a nonzero gradient the sum; with a hook on the weight, the composite route,
// and the hook sees the product.
TEST(FusedKernels, LinearWeightGradientAccumulatesInPlace) {
  torch::manual_seed(5);
  auto x = torch::randn({4, 64, 96}), w0 = torch::randn({80, 96}), up = torch::randn({4, 64, 80});
  int calls = 0;
  auto grad_of = [&](const torch::Tensor& start, bool hook, std::vector<std::string>* ops) {
    auto w = w0.clone().requires_grad_(true);
    if (start.defined()) w.mutable_grad() = start.clone();
    if (hook) w.register_hook([&calls](torch::Tensor g) { ++calls; return g; });
    auto y = fused_linear(x, w);
    auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(&note_op).scopes({at::RecordScope::FUNCTION}));
    g_ops = ops;
    y.backward(up);
    g_ops = nullptr;
    at::removeCallback(handle);
    return w.grad();
  };
  auto count = [](const std::vector<std::string>& ops, const std::string& name) {
    return std::count(ops.begin(), ops.end(), name);
  };
  std::vector<std::string> fresh_ops, zeroed_ops, summed_ops, hooked_ops;
  auto fresh = grad_of(torch::Tensor(), false, &fresh_ops);
  EXPECT_EQ(count(fresh_ops, "aten::addmm_"), 0) << "no gradient yet: autograd's product";
  auto zeroed = grad_of(torch::zeros({80, 96}), false, &zeroed_ops);
  EXPECT_EQ(count(zeroed_ops, "aten::addmm_"), 1);
  EXPECT_EQ(count(zeroed_ops, "aten::add_"), 0) << "no AccumulateGrad add";
  EXPECT_TRUE(torch::equal(zeroed, fresh)) << "onto zeros: the bits of the fresh product";
  auto start = torch::randn({80, 96});
  auto summed = grad_of(start, false, &summed_ops);
  EXPECT_EQ(count(summed_ops, "aten::addmm_"), 1);
  EXPECT_LT(rel(summed, start + fresh), 1e-6);
  auto hooked = grad_of(torch::zeros({80, 96}), true, &hooked_ops);
  EXPECT_EQ(count(hooked_ops, "aten::addmm_"), 0) << "a hook: AccumulateGrad's route";
  EXPECT_EQ(calls, 1) << "a hook on the weight sees its gradient";
  EXPECT_TRUE(torch::equal(hooked, fresh));
}

// The thread choice keeps the faster variant: here the all-threads variant is made slow, so
// after the trials the site runs on one thread.
// Weights back to back in one buffer (as the optimizer's flat buffer holds q, k, v): one
// forward GEMM for all of them, and the same outputs and gradients as the matmuls.
TEST(FusedKernels, LinearsStackedInOneBufferTakeOneForwardProduct) {
  torch::manual_seed(6);
  auto x = torch::randn({3, 7, 24}), up = torch::randn({3, 7, 29});
  auto flat = torch::randn({29 * 24});
  auto leaf = [&](int64_t row, int64_t rows) {
    auto w = torch::empty({rows, 24}).requires_grad_(true);
    w.set_data(flat.narrow(0, row * 24, rows * 24).view({rows, 24}));
    return w;
  };
  std::vector<torch::Tensor> ws = {leaf(0, 16), leaf(16, 8), leaf(24, 5)};
  // The aten::mm calls of fused_linears(in, weights), and its outputs.
  auto products = [](const torch::Tensor& in, const std::vector<torch::Tensor>& weights, std::vector<torch::Tensor>* out) {
    std::vector<std::string> ops;
    auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(&note_op).scopes({at::RecordScope::FUNCTION}));
    g_ops = &ops;
    *out = fused_linears(in, weights);
    g_ops = nullptr;
    at::removeCallback(handle);
    return std::count(ops.begin(), ops.end(), "aten::mm");
  };
  auto xa = x.clone().requires_grad_(true), xb = x.clone().requires_grad_(true);
  std::vector<torch::Tensor> ys;
  EXPECT_EQ(products(xa, ws, &ys), 1) << "one product for the three weights";
  torch::cat({ys[0], ys[1], ys[2]}, -1).backward(up);
  std::vector<torch::Tensor> wb, refs;
  for (auto& w : ws) wb.push_back(w.detach().clone().requires_grad_(true));
  for (auto& w : wb) refs.push_back(torch::matmul(xb, w.t()));
  torch::cat(refs, -1).backward(up);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_LT(rel(ys[i], refs[i]), 1e-5) << "output " << i;
    EXPECT_LT(rel(ws[i].grad(), wb[i].grad()), 1e-5) << "weight gradient " << i;
  }
  EXPECT_LT(rel(xa.grad(), xb.grad()), 1e-5);
  // Not back to back: one product per weight, the same values.
  auto apart = std::vector<torch::Tensor>{leaf(0, 16), leaf(24, 5)};
  std::vector<torch::Tensor> ya;
  EXPECT_EQ(products(x, apart, &ya), 2);
  EXPECT_LT(rel(ya[1], torch::matmul(x, apart[1].detach().t())), 1e-5);
}

TEST(FusedKernels, RopeMatchesCompositeOnStridedHeads) {
  for (auto dt : kDtypes) {
    for (int64_t D : {12, 16, 64}) {
      const int64_t B = 2, S = 9, H = 3;
      auto rope = make_rope_tables(S, D, 1e6, torch::TensorOptions());
      torch::manual_seed(D);
      // [B, H, S, D] as the model hands it over: a transposed view of [B, S, H, D] memory.
      auto x = torch::randn({B, S, H, D}, dt).transpose(1, 2);
      auto fused = [&](auto& t) { return fused_rope(t[0].transpose(1, 2), rope.cos, rope.sin); };
      auto composite = [&](auto& t) { return apply_rope(t[0].transpose(1, 2), rope.cos, rope.sin); };
      auto xs = x.transpose(1, 2).contiguous();  // leaf in [B, S, H, D]; the lambdas transpose it
      expect_same(fused, composite, {xs}, {0}, "rope D=" + std::to_string(D));
      if (dt == torch::kFloat64) expect_gradcheck(fused, {xs}, {0}, "rope");
      EXPECT_EQ(fused_rope(x, rope.cos, rope.sin).strides(), x.strides()) << "keeps the input's layout";
    }
  }
}

TEST(FusedKernels, CausalAttentionMatchesComposite) {
  struct Case {
    int64_t B, H, KV, S, D;
  };
  for (auto dt : kDtypes) {
    for (Case c : {Case{2, 4, 2, 37, 12}, Case{1, 2, 2, 70, 16}, Case{2, 6, 3, 33, 32}, Case{1, 1, 1, 1, 8},
                   Case{1, 2, 1, 96, 64}}) {
      torch::manual_seed(c.S);
      const double scale = 1.0 / std::sqrt(double(c.D));
      // q, k, v as the model hands them over: [B, H, S, D] views of [B, S, H, D] memory.
      auto q = torch::randn({c.B, c.S, c.H, c.D}, dt), k = torch::randn({c.B, c.S, c.KV, c.D}, dt);
      auto v = torch::randn({c.B, c.S, c.KV, c.D}, dt);
      auto fused = [&](auto& t) {
        return fused_causal_attention(t[0].transpose(1, 2), t[1].transpose(1, 2), t[2].transpose(1, 2), scale);
      };
      auto composite = [&](auto& t) {
        return composite_attention(t[0].transpose(1, 2), t[1].transpose(1, 2), t[2].transpose(1, 2), scale);
      };
      const std::string what = "attention S=" + std::to_string(c.S) + " D=" + std::to_string(c.D);
      expect_same(fused, composite, {q, k, v}, {0, 1, 2}, what);
      if (dt == torch::kFloat64) expect_gradcheck(fused, {q, k, v}, {0, 1, 2}, what);
    }
  }
}

TEST(FusedKernels, CrossEntropyMatchesLogSoftmax) {
  for (auto dt : kDtypes) {
    for (int64_t V : {97, 300, 1000}) {
      torch::manual_seed(V);
      auto logits = torch::randn({3, 5, V}, dt) * 3;
      auto labels = torch::randint(0, V, {3, 5}, torch::kInt64);
      labels[0][0] = V - 1;
      expect_same([&](auto& t) { return fused_cross_entropy_sum(t[0], labels, 7.0); },
                  [&](auto& t) { return reference_ce(t[0], labels, 7.0); }, {logits}, {0},
                  "cross_entropy V=" + std::to_string(V));
      if (dt == torch::kFloat64) {
        expect_gradcheck([&](auto& t) { return fused_cross_entropy_sum(t[0], labels, 7.0); }, {logits}, {0},
                         "cross_entropy");
      }
    }
  }
  // The composite loss (log_softmax in fp32) agrees too.
  auto logits = torch::randn({4, 11});
  auto labels = torch::randint(0, 11, {4}, torch::kInt64);
  EXPECT_LT(rel(cross_entropy_sum(logits, labels, 4.0, true), cross_entropy_sum(logits, labels, 4.0, false)), 1e-6);
}

TEST(FusedKernels, BadInputIsAClearError) {
  auto x = torch::randn({2, 8});
  try {
    fused_rms_norm(x, torch::ones({7}), 1e-6);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("fused_rms_norm"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fused_cross_entropy_sum(x, torch::tensor({0, 8}, torch::kInt64), 1.0), std::exception);
  EXPECT_THROW(fused_causal_attention(torch::randn({1, 3, 4, 8}), torch::randn({1, 2, 4, 8}),
                                      torch::randn({1, 2, 4, 8}), 1.0),
               std::exception);
}

ModelArgs tiny_args() {
  ModelArgs a = model_flavor("qwen3", "debugmodel");
  a.dim = 32, a.n_layers = 2, a.n_heads = 4, a.n_kv_heads = 2, a.head_dim = 8, a.ffn_dim = 48;
  a.vocab_size = 50;
  return a;
}

// Names of the autograd nodes behind `t` (each node once).
std::set<std::string> graph_nodes(const torch::Tensor& t) {
  std::set<std::string> names;
  std::set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> todo = {t.grad_fn().get()};
  while (!todo.empty()) {
    torch::autograd::Node* n = todo.back();
    todo.pop_back();
    if (!n || !seen.insert(n).second) continue;
    names.insert(n->name());
    for (const auto& e : n->next_edges()) todo.push_back(e.function.get());
  }
  return names;
}

size_t nodes_naming(const std::set<std::string>& names, const std::string& what) {
  return std::count_if(names.begin(), names.end(), [&](const std::string& n) { return n.find(what) != std::string::npos; });
}

// The whole model, fused against composite: logits, loss and every parameter gradient; and
// the switch really switches (with both models on one path the comparisons could not fail).
TEST(FusedKernels, ModelSwitchKeepsLossAndGradients) {
  for (bool tied : {false, true}) {
    ModelArgs a = tiny_args();
    a.tie_embeddings = tied;
    Transformer fused(a, 40, torch::TensorOptions()), composite(a, 40, torch::TensorOptions());
    fused->init_weights(3);
    composite->init_weights(3);
    composite->set_fused_kernels(FusedKernels::all(false));
    auto tokens = torch::randint(0, a.vocab_size, {3, 40}, torch::kInt64);
    auto labels = torch::randint(0, a.vocab_size, {3, 40}, torch::kInt64);
    auto lf = fused->forward(tokens), lc = composite->forward(tokens);
    const auto fused_nodes = graph_nodes(lf), composite_nodes = graph_nodes(lc);
    for (const char* kernel : {"RmsNormFunction", "RopeFunction", "CausalAttentionFunction", "SwigluFunction",
                               "LinearsFunction"}) {
      EXPECT_GT(nodes_naming(fused_nodes, kernel), 0u) << kernel << " not in the fused model's graph";
      EXPECT_EQ(nodes_naming(composite_nodes, kernel), 0u) << kernel << " in the composite model's graph";
    }
    EXPECT_LT(rel(lf, lc), 1e-5);
    auto loss_f = cross_entropy_sum(lf, labels, 120.0, true), loss_c = cross_entropy_sum(lc, labels, 120.0, false);
    EXPECT_LT(rel(loss_f, loss_c), 1e-6);
    EXPECT_NE(std::string(loss_f.grad_fn()->name()), std::string(loss_c.grad_fn()->name()));
    loss_f.backward();
    loss_c.backward();
    auto pc = composite->named_parameters();
    for (auto& p : fused->named_parameters()) {
      EXPECT_LT(rel(p.value().grad(), pc[p.key()].grad()), 1e-5) << p.key();
    }
  }
}

TEST(FusedKernels, MetaTensorsTakeTheCompositePath) {
  Transformer model(tiny_args(), 16, torch::TensorOptions().device(torch::kMeta));
  auto tokens = torch::empty({2, 16}, torch::TensorOptions().device(torch::kMeta).dtype(torch::kInt64));
  auto logits = model->forward(tokens);
  EXPECT_TRUE(logits.is_meta());
  auto loss = cross_entropy_sum(logits, tokens, 32.0);
  EXPECT_TRUE(loss.is_meta());
  loss.backward();
  EXPECT_TRUE(model->norm->weight.grad().is_meta());
}

}  // namespace
}  // namespace titan
