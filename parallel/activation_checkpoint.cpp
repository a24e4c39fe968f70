#include "parallel/activation_checkpoint.h"

#include <ATen/core/custom_class.h>
#include <torch/csrc/autograd/custom_function.h>

#include "common/error.h"
#include "parallel/op_save_hook.h"

namespace titan {
namespace {

// The op-level policy and what it kept from one checkpointed forward: next() counts the
// block's linear products from the start of each pass (forward, then recompute), so both
// passes make the same decisions and take() hands back the kept outputs in forward order.
class KeptOps : public OpSaveHook {
 public:
  OpSaveAction next(SavedOp op) override {
    // TorchTitan's op policy recomputes every second matmul of a block and keeps the rest.
    const bool save = op != SavedOp::kLinear || ++linears_ % 2 == 1;
    if (!save) return OpSaveAction::kRun;
    return replaying_ ? OpSaveAction::kReuse : OpSaveAction::kKeep;
  }
  void keep(SavedOp op, std::vector<torch::Tensor> outputs) override {
    TITAN_CHECK(!replaying_, "op-level activation checkpointing: ", saved_op_name(op), " kept during the recompute");
    Kept k{op, std::move(outputs), {}};
    for (const auto& t : k.outputs) k.versions.push_back(t.defined() ? t._version() : 0);
    kept_.push_back(std::move(k));
  }
  std::vector<torch::Tensor> take(SavedOp op) override {
    TITAN_CHECK(replaying_ && next_ < kept_.size() && kept_[next_].op == op,
                "op-level activation checkpointing: the recompute asked for ", saved_op_name(op), " output ", next_ + 1,
                " of ", kept_.size(), " kept, ",
                next_ < kept_.size() ? std::string("which holds ") + saved_op_name(kept_[next_].op) : std::string("none left"),
                ": the block's recompute took other ops than its forward");
    Kept& k = kept_[next_++];
    // A kept output changed in place after its op ran would hand its backward wrong values.
    for (size_t i = 0; i < k.outputs.size(); ++i)
      TITAN_CHECK(!k.outputs[i].defined() || k.outputs[i]._version() == k.versions[i],
                  "op-level activation checkpointing: ", saved_op_name(op), " output ", next_, " was modified in place ",
                  "after it was kept (version ", k.versions[i], " -> ", k.outputs[i]._version(), ")");
    return std::move(k.outputs);
  }
  void start_replay() {
    replaying_ = true;
    linears_ = 0;
    next_ = 0;
  }
  void finish() {
    TITAN_CHECK(next_ == kept_.size(), "op-level activation checkpointing: the recompute reused ", next_, " of ",
                kept_.size(), " kept outputs: the block's recompute took other ops than its forward");
    kept_.clear();
  }

 private:
  bool replaying_ = false;
  int64_t linears_ = 0;
  size_t next_ = 0;
  struct Kept {
    SavedOp op;
    std::vector<torch::Tensor> outputs;
    std::vector<int64_t> versions;  // of each output when kept
  };
  std::vector<Kept> kept_;
};

// Keeps the forward function (and what the op policy kept) alive inside the autograd graph
// until backward has run.
struct ForwardHolder : torch::CustomClassHolder {
  ForwardHolder(ForwardFn f, bool keep_ops) : fn(std::move(f)) {
    if (keep_ops) kept = std::make_unique<KeptOps>();
  }
  ForwardFn fn;
  std::unique_ptr<KeptOps> kept;
};

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               c10::IValue holder) {
    auto fn = c10::static_intrusive_pointer_cast<ForwardHolder>(holder.toCapsule());
    ctx->saved_data["fn"] = holder;
    ctx->save_for_backward({x});
    OpSaveHookScope hook(fn->kept.get());
    return fn->fn(x);  // autograd records nothing inside a custom function's forward
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto fn = c10::static_intrusive_pointer_cast<ForwardHolder>(ctx->saved_data["fn"].toCapsule());
    auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::Tensor out;
    {
      torch::AutoGradMode enable(true);
      if (fn->kept) fn->kept->start_replay();
      OpSaveHookScope hook(fn->kept.get());
      out = fn->fn(x);
      if (fn->kept) fn->kept->finish();
    }
    // Gradients of the block's parameters flow on from here (to FSDP when it is applied).
    torch::autograd::backward({out}, {grads[0]});
    return {x.grad(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor checkpoint(const ForwardFn& fn, const torch::Tensor& x, bool keep_ops) {
  auto holder = c10::IValue::make_capsule(c10::make_intrusive<ForwardHolder>(fn, keep_ops));
  return CheckpointFunction::apply(x, holder);
}

BlockWrapFn activation_checkpoint_wrapper(int64_t every) {
  TITAN_CONFIG_CHECK(every >= 1, "activation_checkpoint.selective_every must be >= 1, got ", every);
  const int64_t n = every;
  return [n](int64_t layer, const torch::Tensor& x, const ForwardFn& inner) {
    if ((layer + 1) % n != 0 || !torch::GradMode::is_enabled()) return inner(x);
    return checkpoint(inner, x);
  };
}

BlockWrapFn op_activation_checkpoint_wrapper() {
  return [](int64_t, const torch::Tensor& x, const ForwardFn& inner) {
    if (!torch::GradMode::is_enabled()) return inner(x);
    return checkpoint(inner, x, /*keep_ops=*/true);
  };
}

}  // namespace titan
