// The fused linear kernels (trainer/model/kernels/linear_kernel.h) against matmul, forward and
// backward, in every SIMD variant and by finite differences (tests/trainer/kernel_compare.h):
// one weight, several weights sharing an input, a weight gradient accumulated in place
// (counted in aten ops), and weights back to back in one buffer taking one product.
#include <gtest/gtest.h>

#include <ATen/record_function.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "tests/trainer/kernel_compare.h"
#include "trainer/model/kernels/linear_kernel.h"
#include "trainer/model/kernels/thread_choice.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

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
    // Off: a GEMM site's one-time bit check (thread_choice.h) runs the product twice more when
    // an earlier test in this process left more than one intra-op thread.
    const bool choice = thread_choice_enabled();
    set_thread_choice_enabled(false);
    auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(&note_op).scopes({at::RecordScope::FUNCTION}));
    g_ops = &ops;
    *out = fused_linears(in, weights);
    g_ops = nullptr;
    at::removeCallback(handle);
    set_thread_choice_enabled(choice);
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

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
