// Model pieces against naive references: RMSNorm, rotary embedding, grouped-query attention,
// SwiGLU and non-gated (gelu, relu) MLPs; flavors and the FLOPs convention; building on the meta device.
#include <gtest/gtest.h>

#include <cmath>

#include "trainer/config/resolve_model.h"
#include "trainer/config/job_config.h"
#include "trainer/model/model.h"
#include "tests/trainer/tiny_model_args.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

double max_rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item<double>();
}

TEST(Model, RMSNormMatchesFormula) {
  torch::manual_seed(0);
  RMSNorm norm(16, 1e-6, torch::TensorOptions());
  torch::NoGradGuard g;
  norm->weight.uniform_(0.5, 1.5);
  auto x = torch::randn({3, 5, 16});
  auto y = norm(x);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 5; ++j) {
      double ms = 0;
      for (int64_t k = 0; k < 16; ++k) ms += std::pow(x[i][j][k].item<double>(), 2);
      const double inv = 1.0 / std::sqrt(ms / 16 + 1e-6);
      for (int64_t k = 0; k < 16; ++k) {
        EXPECT_NEAR(y[i][j][k].item<double>(),
                    x[i][j][k].item<double>() * inv * norm->weight[k].item<double>(), 1e-5);
      }
    }
  }
}

TEST(Model, RopeRotatesPairsHalfApart) {
  const int64_t S = 6, D = 8;
  const double theta = 10000.0;
  auto rope = make_rope_tables(S, D, theta, torch::TensorOptions());
  torch::manual_seed(1);
  auto x = torch::randn({1, 1, S, D});
  auto y = apply_rope(x, rope.cos, rope.sin);
  // HF layout: dims i and i + D/2 form a pair rotated by angle pos * theta^(-2i/D).
  for (int64_t pos = 0; pos < S; ++pos) {
    for (int64_t i = 0; i < D / 2; ++i) {
      const double ang = pos * std::pow(theta, -2.0 * i / D);
      const double a = x[0][0][pos][i].item<double>(), b = x[0][0][pos][i + D / 2].item<double>();
      EXPECT_NEAR(y[0][0][pos][i].item<double>(), a * std::cos(ang) - b * std::sin(ang), 1e-5);
      EXPECT_NEAR(y[0][0][pos][i + D / 2].item<double>(), b * std::cos(ang) + a * std::sin(ang), 1e-5);
    }
  }
  // Rotation preserves the norm, and position 0 is the identity.
  EXPECT_LT(max_rel_diff(y.norm(2, -1), x.norm(2, -1)), 1e-5);
  EXPECT_LT(max_rel_diff(y.select(2, 0), x.select(2, 0)), 1e-6);
}

TEST(Model, GroupedQueryAttentionMatchesNaiveLoops) {
  ModelArgs a = tiny_model_args();
  torch::manual_seed(2);
  Attention attn(a, torch::TensorOptions());
  {
    torch::NoGradGuard g;
    for (auto& p : attn->parameters()) p.normal_(0, 0.3);
  }
  const int64_t B = 2, S = 5, D = a.head_dim, H = a.n_heads, KV = a.n_kv_heads;
  auto rope = make_rope_tables(S, D, a.rope_theta, torch::TensorOptions());
  auto x = torch::randn({B, S, a.dim});
  torch::NoGradGuard g;
  auto y = attn->forward(x, rope);

  auto q = attn->q_norm(x.matmul(attn->wq->weight.t()).view({B, S, H, D}));
  auto k = attn->k_norm(x.matmul(attn->wk->weight.t()).view({B, S, KV, D}));
  auto v = x.matmul(attn->wv->weight.t()).view({B, S, KV, D});
  q = apply_rope(q.transpose(1, 2), rope.cos, rope.sin);
  k = apply_rope(k.transpose(1, 2), rope.cos, rope.sin);
  v = v.transpose(1, 2);
  auto out = torch::zeros({B, S, H * D});
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvh = h / (H / KV);
      for (int64_t i = 0; i < S; ++i) {
        std::vector<double> w(i + 1);
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          w[j] = (q[b][h][i] * k[b][kvh][j]).sum().item<double>() / std::sqrt(double(D));
          mx = std::max(mx, w[j]);
        }
        for (auto& e : w) sum += (e = std::exp(e - mx));
        auto acc = torch::zeros({D});
        for (int64_t j = 0; j <= i; ++j) acc += v[b][kvh][j] * (w[j] / sum);
        out[b][i].narrow(0, h * D, D).copy_(acc);
      }
    }
  }
  auto ref = out.matmul(attn->wo->weight.t());
  EXPECT_LT(max_rel_diff(y, ref), 1e-5);
}

ModelArgs mlp_args(MlpActivation act) {
  ModelArgs a;
  a.dim = 8, a.ffn_dim = 12, a.mlp_activation = act;
  return a;
}

TEST(Model, SwiGluMlpMatchesFormula) {
  torch::manual_seed(3);
  FeedForward ff(mlp_args(MlpActivation::kSwiglu), torch::TensorOptions());
  torch::NoGradGuard g;
  for (auto& p : ff->parameters()) p.normal_(0, 0.5);
  auto x = torch::randn({4, 8});
  auto h1 = x.matmul(ff->w1->weight.t()), h3 = x.matmul(ff->w3->weight.t());
  auto ref = (h1 / (1 + torch::exp(-h1)) * h3).matmul(ff->w2->weight.t());
  EXPECT_LT(max_rel_diff(ff(x), ref), 1e-6);
}

// Non-gated: w2(act(w1 x)), no w3; gelu is the tanh approximation, written out here.
TEST(Model, NonGatedMlpsMatchFormula) {
  torch::manual_seed(4);
  for (MlpActivation act : {MlpActivation::kGelu, MlpActivation::kRelu}) {
    FeedForward ff(mlp_args(act), torch::TensorOptions());
    EXPECT_FALSE(ff->w3);
    EXPECT_EQ(ff->parameters().size(), 2u);
    torch::NoGradGuard g;
    for (auto& p : ff->parameters()) p.normal_(0, 0.5);
    auto x = torch::randn({4, 8});
    auto h = x.matmul(ff->w1->weight.t());
    auto a = act == MlpActivation::kRelu
                 ? torch::clamp_min(h, 0)
                 : 0.5 * h * (1 + torch::tanh(std::sqrt(2.0 / M_PI) * (h + 0.044715 * h.pow(3))));
    auto ref = a.matmul(ff->w2->weight.t());
    EXPECT_LT(max_rel_diff(ff(x), ref), 1e-6) << static_cast<int>(act);
  }
}

// layer_params / num_params count the model's real parameters for every MLP: a non-gated
// block has 2 dim x ffn matrices where SwiGLU has 3, and FLOPs per token follow.
TEST(Model, ParameterCountsFollowTheMlp) {
  for (MlpActivation act : {MlpActivation::kSwiglu, MlpActivation::kGelu, MlpActivation::kRelu}) {
    ModelArgs a = tiny_model_args();
    a.mlp_activation = act;
    Transformer m(a, 8, torch::TensorOptions().device(torch::kMeta));
    int64_t n = 0;
    for (auto& p : m->parameters()) n += p.numel();
    EXPECT_EQ(n, a.num_params()) << static_cast<int>(act);
  }
  ModelArgs s = model_flavor("qwen3", "8B"), g = s;
  g.mlp_activation = MlpActivation::kGelu, g.ffn_dim = 16384;
  s.ffn_dim = 16384;
  EXPECT_EQ(s.layer_params() - g.layer_params(), 4096LL * 16384);
  EXPECT_DOUBLE_EQ(flops_per_token(s, 8192) - flops_per_token(g, 8192), 6.0 * 36 * 4096 * 16384);
}

TEST(Model, PublishedParameterCounts) {
  EXPECT_NEAR(model_flavor("qwen3", "0.6B").num_params() / 1e9, 0.596, 0.01);
  EXPECT_NEAR(model_flavor("qwen3", "8B").num_params() / 1e9, 8.19, 0.01);
  EXPECT_NEAR(model_flavor("qwen3", "32B").num_params() / 1e9, 32.76, 0.02);
  EXPECT_NEAR(model_flavor("llama3", "8B").num_params() / 1e9, 8.03, 0.01);
  EXPECT_NEAR(model_flavor("llama3", "70B").num_params() / 1e9, 70.55, 0.05);
}

TEST(Model, FlopsPerTokenConvention) {
  // Qwen3-8B at seq 8192: 6 * (8.19B - 0.62B input embedding) + 12*36*32*128*8192 ~= 59.9 GFLOP.
  ModelArgs a = model_flavor("qwen3", "8B");
  const double expected = 6.0 * (a.num_params() - 151936.0 * 4096) + 12.0 * 36 * 32 * 128 * 8192;
  EXPECT_DOUBLE_EQ(flops_per_token(a, 8192), expected);
  EXPECT_NEAR(flops_per_token(a, 8192) / 1e9, 59.9, 0.1);
  // Tied embedding counts once, as the output projection.
  ModelArgs t = model_flavor("qwen3", "0.6B");
  EXPECT_DOUBLE_EQ(flops_per_token(t, 1), 6.0 * t.num_params() + 12.0 * 28 * 16 * 128);
}

TEST(Model, UnknownFlavorListsValidOnes) {
  try {
    model_flavor("qwen3", "7B");
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("expected one of debugmodel, 0.6B"), std::string::npos) << e.what();
  }
}

TEST(Model, ExplicitDimsOverrideFlavor) {
  ModelSection m;
  m.name = ModelFamily::kLlama3;
  m.flavor = "8B";
  m.n_layers = 2;
  m.tie_embeddings = FlavorBool::kTrue;
  ModelArgs a = resolve_model_args(m, 257);
  EXPECT_EQ(a.n_layers, 2);
  EXPECT_EQ(a.dim, 4096);
  EXPECT_TRUE(a.tie_embeddings);
  EXPECT_FALSE(a.qk_norm);
  EXPECT_DOUBLE_EQ(a.rope_theta, 500000.0);
}

TEST(Model, BuildsAndRunsOnMetaDevice) {
  ModelArgs a = model_flavor("qwen3", "8B");
  a.n_layers = 2;  // shapes only: no memory is used
  Transformer model(a, 64, torch::TensorOptions().device(torch::kMeta).dtype(torch::kBFloat16));
  auto tokens = torch::zeros({1, 64}, torch::TensorOptions().device(torch::kMeta).dtype(torch::kInt64));
  auto logits = model->forward(tokens);
  EXPECT_TRUE(logits.is_meta());
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{1, 64, 151936}));
}

TEST(Model, NonGatedMlpRunsOnMetaDevice) {
  for (MlpActivation act : {MlpActivation::kGelu, MlpActivation::kRelu}) {
    ModelArgs a = model_flavor("qwen3", "8B");
    a.n_layers = 2, a.mlp_activation = act;
    auto meta = torch::TensorOptions().device(torch::kMeta);
    Transformer model(a, 64, meta.dtype(torch::kBFloat16));
    auto tokens = torch::zeros({1, 64}, meta.dtype(torch::kInt64));
    auto loss = cross_entropy_sum(model->forward(tokens), torch::zeros({1, 64}, meta.dtype(torch::kInt64)), 64.0);
    loss.backward();
    EXPECT_TRUE(model->layers[0]->feed_forward->w1->weight.grad().is_meta());
    EXPECT_EQ(model->layers[0]->feed_forward->w2->weight.grad().sizes(), (std::vector<int64_t>{4096, 12288}));
  }
}

TEST(Model, InitIsDeterministicPerName) {
  ModelArgs a = tiny_model_args();
  Transformer m1(a, 8, torch::TensorOptions()), m2(a, 8, torch::TensorOptions());
  m1->init_weights(7);
  m2->init_weights(7);
  for (auto& p : m1->named_parameters()) {
    EXPECT_TRUE(torch::equal(p.value(), m2->named_parameters()[p.key()])) << p.key();
  }
  m2->init_weights(8);
  EXPECT_FALSE(torch::equal(m1->tok_embeddings->weight, m2->tok_embeddings->weight));
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
