// Op-level selective activation checkpointing (parallel/activation_checkpoint.h with the hook
// of trainer/model/hooks/op_save_hook.h): the recompute reruns only the ops the policy does not keep
// (every second linear product of a block, the norms, RoPE, SwiGLU), the gradients are those
// of no checkpointing, and the simulator's meta recording holds the same recompute.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <array>

#include "common/error.h"
#include "devices/trace_memory.h"
#include "parallel/activation_checkpoint.h"
#include "trainer/model/hooks/op_save_hook.h"
#include "parallel/pipeline_weight_grad.h"
#include "tests/trainer/mm_counter.h"
#include "trainer/config/config_loader.h"
#include "trainer/model/model.h"
#include "trainer/simulate/trace_recorder.h"
#include "tests/trainer/tiny_model_args.h"

namespace titan {
namespace TITAN_UNIT_ID {
namespace {

enum class Ac { kNone, kOp, kFull };

// f(ac) for no AC, op-level AC and full AC.
template <class F>
auto per_ac(F f) {
  return std::array<decltype(f(Ac::kNone)), 3>{f(Ac::kNone), f(Ac::kOp), f(Ac::kFull)};
}

void apply_ac(Transformer& m, Ac ac) {
  if (ac == Ac::kOp) m->block_wrappers.push_back(op_activation_checkpoint_wrapper());
  if (ac == Ac::kFull) m->block_wrappers.push_back(activation_checkpoint_wrapper(1));
}

struct RealStep {
  int64_t forward_mm = 0, backward_mm = 0;
  std::vector<torch::Tensor> grads;
};

// One forward and backward of the tiny model on fixed weights and tokens, in double.
RealStep real_step(Ac ac, bool fused) {
  const ModelArgs a = tiny_model_args();
  Transformer m(a, 16, torch::TensorOptions().dtype(torch::kFloat64));
  m->init_weights(3);
  m->set_fused_kernels(FusedKernels::all(fused));
  apply_ac(m, ac);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  auto tokens = torch::randint(a.vocab_size, {2, 16}, gen, torch::kLong);
  RealStep r;
  torch::Tensor loss;
  {
    MmCounter c;
    loss = cross_entropy_sum(m(tokens), tokens, tokens.numel(), fused);
    r.forward_mm = MmCounter::count();
  }
  {
    MmCounter c;
    loss.backward();
    r.backward_mm = MmCounter::count();
  }
  for (const auto& p : m->parameters()) r.grads.push_back(p.grad().clone());
  return r;
}

double max_rel_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, ((a[i] - b[i]).abs().max() / b[i].abs().max().clamp_min(1e-30)).item<double>());
  return worst;
}

TEST(OpCheckpoint, RecomputeRunsOnlyTheDroppedProductsAndGradientsMatch) {
  const int64_t layers = tiny_model_args().n_layers;
  for (bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused kernels" : "composite ATen ops");
    const auto [none, op, full] = per_ac([&](Ac ac) { return real_step(ac, fused); });
    // The forward is the same; the recompute (run in backward) redoes 3 of a block's 7
    // products (k, wo, up: the 2nd, 4th and 6th) under op-level AC, all 7 under full AC.
    EXPECT_EQ(op.forward_mm, none.forward_mm);
    EXPECT_EQ(full.forward_mm, none.forward_mm);
    EXPECT_EQ(op.backward_mm - none.backward_mm, 3 * layers);
    EXPECT_EQ(full.backward_mm - none.backward_mm, 7 * layers);
    ASSERT_EQ(op.grads.size(), none.grads.size());
    EXPECT_LT(max_rel_diff(op.grads, none.grads), 1e-12);
    EXPECT_LT(max_rel_diff(full.grads, none.grads), 1e-12);
  }
}

// The recorded step on the meta device for a chip with flash attention, with the composite
// linears (an accelerator) or the fused kernels kept as one op each (the cpu device).
std::map<std::string, int64_t> recorded_ops(Ac ac, bool fused_kernels) {
  const ModelArgs a = tiny_model_args();
  Transformer m(a, 16, torch::TensorOptions().device(torch::kMeta));
  m->set_fused_kernels(FusedKernels::all(fused_kernels));
  apply_ac(m, ac);
  auto tokens = torch::zeros({2, 16}, torch::TensorOptions().device(torch::kMeta).dtype(torch::kLong));
  TraceRecorder rec(RecordOptions(true, fused_kernels));
  cross_entropy_sum(m(tokens), tokens, tokens.numel(), fused_kernels).backward();
  return rec.op_counts();
}

int64_t count(const std::map<std::string, int64_t>& ops, const std::string& name) {
  auto it = ops.find(name);
  return it == ops.end() ? 0 : it->second;
}

TEST(OpCheckpoint, RecordingHoldsTheRecomputeWithoutTheKeptOps) {
  const int64_t layers = tiny_model_args().n_layers;
  for (bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused kernels recorded" : "composite linears recorded");
    const auto [none, op, full] = per_ac([&](Ac ac) { return recorded_ops(ac, fused); });
    const std::string mm = fused ? "titan::linear" : "aten::mm";
    EXPECT_EQ(count(op, mm) - count(none, mm), 3 * layers);
    EXPECT_EQ(count(full, mm) - count(none, mm), 7 * layers);
    // Attention runs once per block forward under op-level AC (its output is kept), twice
    // under full AC; its backward once either way.
    const std::string attn = kAttentionScope;
    EXPECT_EQ(count(none, attn), layers);
    EXPECT_EQ(count(op, attn), layers);
    EXPECT_EQ(count(full, attn), 2 * layers);
    EXPECT_EQ(count(op, attn + "_backward"), layers);
    // Each reused kernel scope leaves one metadata-only op that reads its inputs (the memory
    // walk's sight of them): the attention, and with the fused kernels recorded also the
    // four kept products (q, v, gate, down).
    EXPECT_EQ(count(op, kKeptOutputScope), (fused ? 5 : 1) * layers);
    EXPECT_EQ(count(none, kKeptOutputScope), 0);
    // Every product still has its backward.
    if (fused) EXPECT_EQ(count(op, "titan::linear_weight_grad"), count(none, "titan::linear_weight_grad"));
  }
}

// Zero-bubble pipelines take each block product through deferred_linear
// (parallel/pipeline_weight_grad.h): the same policy there, 1st and 3rd kept, 2nd recomputed.
TEST(OpCheckpoint, DeferredLinearsFollowThePolicy) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  torch::manual_seed(5);
  std::vector<torch::Tensor> w;
  for (int i = 0; i < 3; ++i) w.push_back(torch::randn({8, 8}, opts).requires_grad_(true));
  const auto x0 = torch::randn({4, 8}, opts);
  ForwardFn fn = [&](const torch::Tensor& in) {
    return deferred_linear(deferred_linear(deferred_linear(in, w[0], nullptr), w[1], nullptr), w[2], nullptr);
  };
  auto run = [&](int ac) {  // 0: none, 1: op-level, 2: full
    for (auto& t : w) t.mutable_grad() = torch::Tensor();
    auto x = x0.clone().requires_grad_(true);
    auto y = ac == 0 ? fn(x) : checkpoint(fn, x, /*keep_ops=*/ac == 1);
    MmCounter c;
    (y * y).sum().backward();
    std::vector<torch::Tensor> g = {x.grad()};
    for (auto& t : w) g.push_back(t.grad().clone());
    return std::make_pair(MmCounter::count(), g);
  };
  const auto [none_mm, none_g] = run(0);
  const auto [op_mm, op_g] = run(1);
  const auto [full_mm, full_g] = run(2);
  EXPECT_EQ(none_mm, 6);  // dx and dW per product
  EXPECT_EQ(op_mm, 7);
  EXPECT_EQ(full_mm, 9);
  EXPECT_LT(max_rel_diff(op_g, none_g), 1e-12);
  EXPECT_LT(max_rel_diff(full_g, none_g), 1e-12);
}

// Zero-bubble schedules route every block product through deferred_linear
// (trainer/step/pipeline_model.cpp), whose weight half waits in the store for the W action,
// holding the product's input. A reused product's input is made by the recompute; where the
// fused kernels' scopes are recorded (the cpu device) the scope that made it (SwiGLU for the
// down projection) records no outputs, so the recording must touch it where the product is
// reused, as it does for the model's own reused linears: the memory walk then has every such
// input live from the recompute to its weight gradient (before, from the W action only).
TEST(OpCheckpoint, ReusedDeferredLinearsKeepTheirInputsLiveUntilTheWeightGradients) {
  const ModelArgs a = tiny_model_args();
  for (bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused kernels recorded" : "composite ops recorded");
    Transformer m(a, 16, torch::TensorOptions().device(torch::kMeta));
    m->set_fused_kernels(FusedKernels::all(fused));
    apply_ac(m, Ac::kOp);
    WeightGradStore store;
    bool recomputing = false;
    std::vector<torch::Tensor> inputs;  // of the products in the recompute
    for (auto& layer : m->layers)
      for (Linear* l : {&layer->attention->wq, &layer->attention->wk, &layer->attention->wv, &layer->attention->wo,
                        &layer->feed_forward->w1, &layer->feed_forward->w2, &layer->feed_forward->w3}) {
        LinearImpl* raw = l->get();
        raw->wrap = [raw, &store, &recomputing, &inputs](const torch::Tensor& x, const ForwardFn&) {
          if (recomputing) inputs.push_back(x);
          return deferred_linear(x, raw->weight, &store);
        };
      }
    auto tokens = torch::zeros({2, 16}, torch::TensorOptions().device(torch::kMeta).dtype(torch::kLong));
    TraceRecorder rec(RecordOptions(true, fused));
    {
      auto loss = cross_entropy_sum(m(tokens), tokens, tokens.numel(), fused);
      recomputing = true;
      store.begin(0, 0);  // the I action: input gradients, weight halves deferred
      loss.backward();
      store.end();
      recomputing = false;
    }
    const int64_t w_action = static_cast<int64_t>(rec.trace().compute_ops());
    store.flush(0, 0);
    ASSERT_EQ(inputs.size(), 7u * a.n_layers);
    std::vector<int64_t> ids;
    for (const auto& t : inputs) ids.push_back(recorded_storage_id(t));
    inputs.clear();  // not state: the step is over
    // As for the model's linears: a touch per reused product (q, v, gate, down) where the
    // fused kernels are recorded, besides the attention's.
    EXPECT_EQ(count(rec.op_counts(), kKeptOutputScope), (fused ? 5 : 1) * a.n_layers);
    const devices::Trace& t = rec.finish();
    const devices::LiveRanges live = devices::live_ranges({&t}, t.storages(), t.storage_resizes());
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto r = std::find_if(live.ranges.begin(), live.ranges.end(),
                                  [&](const devices::LiveRange& z) { return z.id == ids[i]; });
      ASSERT_NE(r, live.ranges.end()) << "product " << i << " storage " << ids[i];
      EXPECT_EQ(r->kind, devices::LiveRange::Kind::kTemporary) << "product " << i;
      EXPECT_LT(r->from, w_action) << "product " << i << " (" << i % 7 << " of its block), made by "
                                   << live.makers[r->maker];
      EXPECT_GT(r->to, w_action) << "product " << i;
    }
  }
}

TEST(OpCheckpoint, SelectiveAcOptionIsOpOrABlockPeriod) {
  auto load = [](const std::string& option) {
    return load_job_config({"--config", std::string(TITAN_SOURCE_DIR) + "/configs/debug_model.toml",
                            "--activation_checkpoint.mode", "selective",
                            "--activation_checkpoint.selective_ac_option", option});
  };
  EXPECT_TRUE(load("op").activation_checkpoint.op_level());
  const JobConfig three = load("3");
  EXPECT_FALSE(three.activation_checkpoint.op_level());
  EXPECT_EQ(three.activation_checkpoint.every(), 3);
  for (const std::string bad : {"foo", "0", "2x", "-1"}) {
    try {
      load(bad);
      ADD_FAILURE() << "no error for selective_ac_option = " << bad;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("activation_checkpoint.selective_ac_option = \"" + bad + "\""), std::string::npos) << what;
    }
  }
}

// A recompute that asks for other ops than its forward kept, or finds a kept output changed in
// place since, is an error naming what went wrong, not silently wrong gradients.
TEST(OpCheckpoint, RecomputeThatDiffersFromItsForwardIsAnError) {
  auto backward_error = [](const ForwardFn& fn) {
    auto x = torch::randn({3}, torch::requires_grad());
    try {
      checkpoint(fn, x, /*keep_ops=*/true).sum().backward();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // The forward keeps an attention output; the recompute asks for a linear product instead.
  int passes = 0;
  std::string why = backward_error([&](const torch::Tensor& x) {
    const SavedOp op = ++passes == 1 ? SavedOp::kAttention : SavedOp::kLinear;
    torch::Tensor y = x * 2;
    const OpSaveAction a = op_save_next(op);
    if (a == OpSaveAction::kKeep) op_save_keep(op, {y});
    if (a == OpSaveAction::kReuse) y = op_save_take(op)[0];
    return y;
  });
  EXPECT_NE(why.find("the recompute asked for linear output 1 of 1 kept, which holds attention"), std::string::npos)
      << why;
  // The forward changes its kept output in place after keeping it.
  why = backward_error([&](const torch::Tensor& x) {
    torch::Tensor y = x * 2;
    const OpSaveAction a = op_save_next(SavedOp::kAttention);
    if (a == OpSaveAction::kKeep) {
      op_save_keep(SavedOp::kAttention, {y});
      y.add_(1);
    }
    if (a == OpSaveAction::kReuse) y = op_save_take(SavedOp::kAttention)[0];
    return y * 1;
  });
  EXPECT_NE(why.find("attention output 1 was modified in place after it was kept"), std::string::npos) << why;
  // Keep / reuse without a hook installed.
  EXPECT_THROW(op_save_keep(SavedOp::kLinear, {torch::ones({1})}), Error);
}

}  // namespace
}  // namespace TITAN_UNIT_ID
}  // namespace titan
