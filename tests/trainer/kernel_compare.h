// Fused kernel (trainer/model/kernels) against composite ATen: compares outputs and input
// gradients in every SIMD variant (expect_same) and checks the fused backward against central
// differences (expect_gradcheck). Shared by the fused_*_test.cpp files.
#pragma once

#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "trainer/model/kernels/simd.h"

namespace titan {

using Fn = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

// Largest difference relative to the largest reference value; absolute where the reference is
// all zeros (a one-token softmax has no gradient, which roundoff leaves at ~1e-8).
inline double rel(const torch::Tensor& a, const torch::Tensor& b) {
  auto bd = b.to(torch::kFloat64);
  const double scale = bd.abs().max().item<double>();
  return (a.to(torch::kFloat64) - bd).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

inline double tolerance(torch::ScalarType t) { return t == torch::kFloat64 ? 1e-10 : 1e-5; }

// Runs fused and composite on copies of the same inputs (those at `grad_inputs` take
// gradients), backpropagates the same random upstream gradient and compares the outputs and
// every input gradient.
inline void expect_same(const Fn& fused, const Fn& composite,
                        const std::vector<torch::Tensor>& inputs,
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
inline void expect_gradcheck(const Fn& f, const std::vector<torch::Tensor>& inputs,
                             const std::vector<size_t>& grad_inputs, const std::string& what) {
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

inline constexpr torch::ScalarType kDtypes[] = {torch::kFloat64, torch::kFloat32};

}  // namespace titan
