// The flat-buffer AdamW (trainer/components/optimizer.h): the same numbers as the per-tensor
// torch.optim.AdamW arithmetic with clipping folded in (written out here, and libtorch's
// torch::optim::AdamW, over three steps: the PyTorch reference of reference_parity_test.cpp
// takes one, where bias correction cancels beta1 and beta2), in float and double and both SIMD
// variants; parameters, gradients and state are views of the flat buffers (writes through
// them land there, backward accumulates into them); replaced gradients are adopted; meta
// parameters keep the per-tensor ops.
#include <gtest/gtest.h>

#include "trainer/components/optimizer.h"
#include "trainer/model/kernels/simd.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

std::vector<NamedParam> make_params(torch::ScalarType dt, const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<NamedParam> out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    out.push_back({"p" + std::to_string(i), torch::randn(shapes[i], dt).requires_grad_(true)});
  }
  return out;
}

// torch.optim.AdamW (foreach=False) with the gradient scaled first, per tensor.
void reference_step(std::vector<torch::Tensor>& p, std::vector<torch::Tensor>& m, std::vector<torch::Tensor>& v,
                    const std::vector<torch::Tensor>& g, const OptimizerSection& c, double lr, double scale,
                    int64_t t) {
  const double bias1 = 1 - std::pow(c.beta1, double(t)), bias2_sqrt = std::sqrt(1 - std::pow(c.beta2, double(t)));
  for (size_t i = 0; i < p.size(); ++i) {
    auto gi = g[i] * scale;
    p[i].mul_(1 - lr * c.weight_decay);
    m[i].mul_(c.beta1).add_(gi, 1 - c.beta1);
    v[i].mul_(c.beta2).addcmul_(gi, gi, 1 - c.beta2);
    p[i].addcdiv_(m[i], (v[i].sqrt() / bias2_sqrt).add_(c.eps), -lr / bias1);
  }
}

TEST(FlatAdamW, MatchesPerTensorAdamWWithClippingFolded) {
  const std::vector<std::vector<int64_t>> shapes = {{7, 13}, {5}, {64, 3}, {1}, {33, 9}};
  for (auto dt : {torch::kFloat64, torch::kFloat32}) {
    for (bool baseline : {false, true}) {
      simd::force_baseline(baseline);
      torch::manual_seed(4);
      OptimizerSection cfg;
      auto params = make_params(dt, shapes);
      std::vector<torch::Tensor> rp, rm, rv, lp;
      for (auto& p : params) {
        rp.push_back(p.param.detach().clone());
        rm.push_back(torch::zeros_like(rp.back()));
        rv.push_back(torch::zeros_like(rp.back()));
        lp.push_back(p.param.detach().clone().requires_grad_(true));
      }
      // libtorch's own AdamW: an implementation this project did not write.
      torch::optim::AdamW lib(lp, torch::optim::AdamWOptions(1e-2)
                                      .betas(std::make_tuple(cfg.beta1, cfg.beta2))
                                      .eps(cfg.eps)
                                      .weight_decay(cfg.weight_decay));
      AdamW opt(params, cfg);
      for (int64_t t = 1; t <= 3; ++t) {
        opt.zero_grad();
        std::vector<torch::Tensor> grads;
        for (auto& p : opt.params()) {
          grads.push_back(torch::randn_like(p.param) * 1e-2);
          p.param.grad().add_(grads.back());
        }
        const double scale = t == 2 ? 0.37 : 1.0;
        EXPECT_NEAR(opt.grad_sq_norm(), local_grad_sq_norm(opt.params()), 1e-9 * opt.grad_sq_norm());
        opt.step(1e-2, scale);
        reference_step(rp, rm, rv, grads, cfg, 1e-2, scale, t);
        for (size_t i = 0; i < lp.size(); ++i) lp[i].mutable_grad() = grads[i] * scale;
        lib.step();
        const double tol = dt == torch::kFloat64 ? 1e-12 : 1e-6;
        for (size_t i = 0; i < rp.size(); ++i) {
          const double scale_ref = rp[i].abs().max().item<double>();
          EXPECT_LE((opt.params()[i].param - rp[i]).abs().max().item<double>(), tol * scale_ref)
              << "param " << i << " step " << t << (baseline ? " baseline" : " avx2");
          EXPECT_LE((opt.params()[i].param - lp[i].detach()).abs().max().item<double>(), tol * scale_ref)
              << "param " << i << " step " << t << " against torch::optim::AdamW";
          EXPECT_LE((opt.states()[i].exp_avg - rm[i]).abs().max().item<double>(),
                    tol * rm[i].abs().max().item<double>());
          // The gradient reads clipped, as clip_grads would leave it.
          EXPECT_LE((opt.params()[i].param.grad() - grads[i] * scale).abs().max().item<double>(),
                    tol * grads[i].abs().max().item<double>());
        }
      }
    }
  }
  simd::force_baseline(false);
}

TEST(FlatAdamW, ParametersGradientsAndStateAreViewsOfTheBuffers) {
  torch::manual_seed(5);
  auto params = make_params(torch::kFloat32, {{4, 4}, {3}});
  auto w = params[0].param;  // another handle to the parameter object, as a module holds it
  AdamW opt(params, OptimizerSection{});
  EXPECT_TRUE(w.is_same(opt.params()[0].param));
  // Adjacent in one buffer, each starting on a 64-byte line.
  auto* a = static_cast<char*>(opt.params()[0].param.data_ptr());
  auto* b = static_cast<char*>(opt.params()[1].param.data_ptr());
  EXPECT_EQ(b - a, 64);
  opt.zero_grad();
  auto* grad_before = opt.params()[0].param.grad().data_ptr();
  (w * w).sum().backward();
  EXPECT_EQ(opt.params()[0].param.grad().data_ptr(), grad_before) << "backward accumulates in place";
  EXPECT_TRUE(torch::allclose(opt.params()[0].param.grad(), 2 * w.detach()));
  // A checkpoint-style in-place load of the state is what the next step reads.
  torch::NoGradGuard no_grad;
  opt.states()[0].exp_avg.view({-1}).copy_(torch::full({16}, 1.0));
  opt.states()[0].exp_avg_sq.view({-1}).copy_(torch::full({16}, 1.0));
  opt.params()[0].param.grad().zero_();
  auto before = w.detach().clone();
  opt.step(0.1);
  // m = 0.9, v = 0.95, step 1: p = p (1 - 0.01) - 0.1 / 0.1 * 0.9 / (sqrt(0.95) / sqrt(0.05) + 1e-8)
  const double expect_delta = -0.9 / (std::sqrt(0.95) / std::sqrt(0.05) + 1e-8);
  EXPECT_NEAR((w - before * 0.99).mean().item<double>(), expect_delta, 1e-5);
}

TEST(FlatAdamW, ReplacedGradientsAreAdopted) {
  auto params = make_params(torch::kFloat32, {{2, 3}});
  AdamW opt(params, OptimizerSection{});
  auto& p = opt.params()[0].param;
  p.mutable_grad() = torch::full({2, 3}, 2.0);
  EXPECT_NEAR(opt.grad_sq_norm(), 24.0, 1e-9);
  opt.zero_grad();
  EXPECT_TRUE(p.grad().defined());
  EXPECT_EQ(p.grad().abs().sum().item<double>(), 0.0);
}

TEST(FlatAdamW, MetaParametersKeepPerTensorOps) {
  auto p = torch::empty({8, 8}, torch::TensorOptions().device(torch::kMeta)).requires_grad_(true);
  AdamW opt({{"w", p}}, OptimizerSection{});
  opt.zero_grad();
  p.mutable_grad() = torch::empty({8, 8}, torch::TensorOptions().device(torch::kMeta));
  EXPECT_EQ(opt.grad_sq_norm(), 0.0);
  opt.step(1e-3, 0.5);
  EXPECT_TRUE(opt.states()[0].exp_avg.is_meta());
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
