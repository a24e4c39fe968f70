// The model-level switch of the fused kernels: the whole model fused against composite
// (logits, loss, every parameter gradient, and which kernels are in each graph), and meta
// tensors taking the composite path. The kernels one by one: fused_kernels_test.cpp and
// fused_linear_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "tests/trainer/kernel_compare.h"
#include "trainer/model/model.h"
#include "tests/trainer/tiny_model_args.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

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
    ModelArgs a = tiny_model_args();
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
  Transformer model(tiny_model_args(), 16, torch::TensorOptions().device(torch::kMeta));
  auto tokens = torch::empty({2, 16}, torch::TensorOptions().device(torch::kMeta).dtype(torch::kInt64));
  auto logits = model->forward(tokens);
  EXPECT_TRUE(logits.is_meta());
  auto loss = cross_entropy_sum(logits, tokens, 32.0);
  EXPECT_TRUE(loss.is_meta());
  loss.backward();
  EXPECT_TRUE(model->norm->weight.grad().is_meta());
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
