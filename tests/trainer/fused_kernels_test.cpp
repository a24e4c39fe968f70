// Each elementwise, normalising and attention kernel (trainer/model/kernels: RMSNorm, SwiGLU,
// RoPE, causal attention, cross-entropy) against the composite ATen path, forward and
// backward, in double (to 1e-10) and float (to 1e-5), in every SIMD variant (AVX-512 where
// the kernel has one and the CPU runs it, AVX2, the baseline), on shapes with vector tails
// and on strided inputs; plus finite differences of each fused kernel in double
// (gradcheck-style) and bad input. The linear kernels: fused_linear_test.cpp; the
// model-level switch: fused_model_switch_test.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "tests/trainer/kernel_compare.h"
#include "trainer/model/kernels/attention_kernel.h"
#include "trainer/model/kernels/cross_entropy_kernel.h"
#include "trainer/model/kernels/rms_norm_kernel.h"
#include "trainer/model/kernels/rope_kernel.h"
#include "trainer/model/kernels/swiglu_kernel.h"
#include "trainer/model/model.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

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

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
