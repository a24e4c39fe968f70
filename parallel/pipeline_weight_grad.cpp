#include "parallel/pipeline_weight_grad.h"

#include <torch/csrc/autograd/custom_function.h>

#include "common/error.h"
#include "trainer/model/hooks/op_save_hook.h"

namespace titan {
namespace {

torch::Tensor weight_grad(const torch::Tensor& input, const torch::Tensor& grad_output) {
  auto x = input.reshape({-1, input.size(-1)});
  auto dy = grad_output.reshape({-1, grad_output.size(-1)});
  return torch::matmul(dy.t(), x);
}

struct DeferredLinear : public torch::autograd::Function<DeferredLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, int64_t store) {
    ctx->save_for_backward({x, weight});
    ctx->saved_data["store"] = store;
    // A product op-level activation checkpointing keeps (trainer/model/hooks/op_save_hook.h), as the
    // model's own linear does: the same policy under zero-bubble schedules.
    const OpSaveAction act = op_save_next(SavedOp::kLinear);
    if (act == OpSaveAction::kReuse) {
      // The kept output in the product's place, under the scope a reused op opens, given the
      // product's inputs: x exists from here on in a real run (the recompute made it for this
      // backward, the weight half of which may wait for a later W action), and the recorder
      // leaves a touch of them here as for a reused kernel (trainer/simulate/trace_recorder.cpp).
      const std::vector<c10::IValue> inputs = {x, weight};
      at::RecordFunction scope(at::RecordScope::USER_SCOPE);
      if (scope.isActive()) scope.before(kKeptOutputScope, &inputs);
      return op_save_take(SavedOp::kLinear)[0];
    }
    auto y = torch::matmul(x, weight.t());
    if (act == OpSaveAction::kKeep) op_save_keep(SavedOp::kLinear, {y});
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& w = saved[1];
    auto* store = reinterpret_cast<WeightGradStore*>(ctx->saved_data["store"].toInt());
    const torch::Tensor& dy = grads[0];
    torch::Tensor dx = torch::matmul(dy, w);
    if (store && store->collecting()) {
      store->defer(w, x, dy);
      return {dx, torch::Tensor(), torch::Tensor()};
    }
    return {dx, weight_grad(x, dy), torch::Tensor()};
  }
};

}  // namespace

void WeightGradStore::begin(int stage, int microbatch) {
  TITAN_CHECK(!collecting_, "WeightGradStore: begin inside another I action");
  collecting_ = true;
  key_ = {stage, microbatch};
}

void WeightGradStore::end() { collecting_ = false; }

void WeightGradStore::defer(const torch::Tensor& weight, const torch::Tensor& input, const torch::Tensor& grad_output) {
  TITAN_CHECK(collecting_, "WeightGradStore: defer outside an I action");
  entries_[key_].push_back({weight, input, grad_output});
}

void WeightGradStore::flush(int stage, int microbatch) {
  auto it = entries_.find({stage, microbatch});
  if (it == entries_.end()) return;  // a stage without linear layers (embedding only) defers nothing
  std::vector<Entry> entries = std::move(it->second);
  entries_.erase(it);
  // One weight at a time, each gradient dropped once autograd has taken it (with its inputs):
  // computing them all before one backward held every weight gradient of the stage until
  // the last was passed on, beside the copies autograd hands on (FSDP's gradient buffers).
  for (Entry& e : entries) {
    torch::Tensor g = weight_grad(e.input, e.grad_output);
    e.input = e.grad_output = torch::Tensor();
    torch::autograd::backward({e.weight}, {g});
  }
}

size_t WeightGradStore::pending() const {
  size_t n = 0;
  for (const auto& [k, v] : entries_) n += v.size();
  return n;
}

torch::Tensor deferred_linear(const torch::Tensor& x, const torch::Tensor& weight, WeightGradStore* store) {
  return DeferredLinear::apply(x, weight, reinterpret_cast<int64_t>(store));
}

}  // namespace titan
