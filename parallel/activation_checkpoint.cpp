#include "parallel/activation_checkpoint.h"

#include <ATen/core/custom_class.h>
#include <algorithm>
#include <memory>
#include <utility>
#include <torch/csrc/autograd/custom_function.h>

#include "collectives/sim_backend.h"
#include "common/error.h"
#include "trainer/model/hooks/op_save_hook.h"

namespace titan {
namespace {

int64_t bytes_of(const std::vector<torch::Tensor>& ts) {
  int64_t b = 0;
  for (const auto& t : ts)
    if (t.defined()) b += t.numel() * static_cast<int64_t>(t.element_size());
  return b;
}

// What an offloaded tensor costs where it is recorded on the meta device: a device-to-host
// copy once it is made (the device buffer is freed after its last forward use, as the memory
// walk sees), and in backward a fresh device buffer filled by a host-to-device copy. On a
// real host run the tensor already sits in host memory: kept as it is, values unchanged.
struct Offloaded {
  std::vector<torch::Tensor> tensors;
  bool fetched = false;
  int64_t copy = -1;  // the host-to-device copy's sim id
  void send() {
    if (!tensors.empty() && tensors[0].is_meta()) sim_report_host_copy(/*to_host=*/true, bytes_of(tensors));
  }
  void fetch() {
    if (fetched) return;
    fetched = true;
    if (tensors.empty() || !tensors[0].is_meta()) return;
    for (auto& t : tensors)
      if (t.defined()) t = torch::empty_like(t);  // the device buffer the copy fills: live from here
    copy = sim_report_host_copy(/*to_host=*/false, bytes_of(tensors));
  }
  void wait() { sim_report_wait(std::exchange(copy, -1)); }
};

// The op-level policy and what it kept from one checkpointed forward: next() counts the
// block's linear products from the start of each pass (forward, then recompute), so both
// passes make the same decisions and take() hands back the kept outputs in forward order.
// With a remat policy (parallel/remat_policy.h) the decisions follow the named tensor each
// product is, and offloaded outputs go to host memory until the recompute fetches them.
class KeptOps : public OpSaveHook {
 public:
  KeptOps() = default;
  KeptOps(std::shared_ptr<const RematPolicy> p, BlockProducts products) : policy_(std::move(p)), products_(products) {}
  bool offloads() const { return policy_ && policy_->offloads(); }

  OpSaveAction next(SavedOp op) override {
    bool save = true;
    if (!policy_) {
      // TorchTitan's op policy recomputes every second matmul of a block and keeps the rest.
      save = op != SavedOp::kLinear || ++linears_ % 2 == 1;
    } else {
      if (op == SavedOp::kLinear)
        last_ = policy_->of(linear_remat_tensor(linears_++, products_.attention_linears, products_.mlp_linears));
      else if (op == SavedOp::kAttention)
        last_ = policy_->of(RematTensor::kContext);
      // A sequence-parallel reduce-scatter follows the product it reduces (out_proj, mlpwo).
      save = last_ != RematAction::kRemat;
      offload_next_ = last_ == RematAction::kOffload;
    }
    if (!save) return OpSaveAction::kRun;
    return replaying_ ? OpSaveAction::kReuse : OpSaveAction::kKeep;
  }
  void keep(SavedOp op, std::vector<torch::Tensor> outputs) override {
    TITAN_CHECK(!replaying_, "op-level activation checkpointing: ", saved_op_name(op), " kept during the recompute");
    Kept k{op, std::move(outputs), {}, -1};
    for (const auto& t : k.outputs) k.versions.push_back(t.defined() ? t._version() : 0);
    if (std::exchange(offload_next_, false)) {
      k.offload = static_cast<int64_t>(offloaded_.size());
      offloaded_.push_back({k.outputs});
      offloaded_.back().send();
    }
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
    // An offloaded one: the fetched device copy (the same tensor on a real host run).
    if (k.offload >= 0) return offloaded_[static_cast<size_t>(k.offload)].tensors;
    return std::move(k.outputs);
  }
  // Host-to-device copies of what this block offloaded, issued ahead of its recompute.
  void fetch() {
    for (Offloaded& o : offloaded_) o.fetch();
  }
  void start_replay() {
    fetch();  // if the block before did not fetch it ahead
    for (Offloaded& o : offloaded_) o.wait();
    replaying_ = true;
    linears_ = 0;
    next_ = 0;
    last_ = RematAction::kDevice;
  }
  void finish() {
    TITAN_CHECK(next_ == kept_.size(), "op-level activation checkpointing: the recompute reused ", next_, " of ",
                kept_.size(), " kept outputs: the block's recompute took other ops than its forward");
    kept_.clear();
    offloaded_.clear();
  }

 private:
  struct Kept {
    SavedOp op;
    std::vector<torch::Tensor> outputs;
    std::vector<int64_t> versions;  // of each output when kept
    int64_t offload = -1;           // its entry in offloaded_; -1: kept on device
  };
  std::shared_ptr<const RematPolicy> policy_;
  BlockProducts products_;
  RematAction last_ = RematAction::kDevice;
  bool offload_next_ = false;
  bool replaying_ = false;
  int64_t linears_ = 0;
  size_t next_ = 0;
  std::vector<Kept> kept_;
  std::vector<Offloaded> offloaded_;
};

// Keeps the forward function (and what the op policy kept) alive inside the autograd graph
// until backward has run.
struct ForwardHolder : torch::CustomClassHolder {
  ForwardHolder(ForwardFn f, std::unique_ptr<KeptOps> k, bool offload_x)
      : fn(std::move(f)), kept(std::move(k)), offload_input(offload_x) {}
  ForwardFn fn;
  std::unique_ptr<KeptOps> kept;
  bool offload_input = false;  // the remat policy offloads decoder_layer_input
  Offloaded input;
  void fetch() {
    if (kept) kept->fetch();
    if (offload_input) input.fetch();
  }
};

// Checkpointed blocks that offloaded something, in forward order: a block's backward fetches
// the offloaded tensors of the block forwarded before it (the next backward without pipeline
// parallelism), so that copy overlaps this block's recompute and backward.
std::vector<c10::weak_intrusive_ptr<ForwardHolder>>& offload_chain() {
  thread_local std::vector<c10::weak_intrusive_ptr<ForwardHolder>> chain;
  return chain;
}

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               c10::IValue holder) {
    auto fn = c10::static_intrusive_pointer_cast<ForwardHolder>(holder.toCapsule());
    ctx->saved_data["fn"] = holder;
    if (fn->offload_input) {
      fn->input.tensors = {x.detach()};
      fn->input.send();
    } else {
      ctx->save_for_backward({x});
    }
    if (fn->offload_input || (fn->kept && fn->kept->offloads())) {
      auto& chain = offload_chain();
      chain.erase(std::remove_if(chain.begin(), chain.end(), [](const auto& w) { return w.expired(); }), chain.end());
      chain.emplace_back(fn);
    }
    OpSaveHookScope hook(fn->kept.get());
    return fn->fn(x);  // autograd records nothing inside a custom function's forward
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto fn = c10::static_intrusive_pointer_cast<ForwardHolder>(ctx->saved_data["fn"].toCapsule());
    fn->fetch();
    auto& chain = offload_chain();
    for (size_t i = 0; i < chain.size(); ++i) {
      if (chain[i].lock().get() != fn.get()) continue;
      if (i > 0)
        if (auto before = chain[i - 1].lock()) before->fetch();
      chain.erase(chain.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
    if (fn->offload_input) fn->input.wait();
    auto x = (fn->offload_input ? fn->input.tensors[0] : ctx->get_saved_variables()[0]).detach().requires_grad_(true);
    torch::Tensor out;
    {
      torch::AutoGradMode enable(true);
      if (fn->kept) fn->kept->start_replay();
      OpSaveHookScope hook(fn->kept.get());
      out = fn->fn(x);
      if (fn->kept) fn->kept->finish();
    }
    fn->input.tensors.clear();
    // Gradients of the block's parameters flow on from here (to FSDP when it is applied).
    torch::autograd::backward({out}, {grads[0]});
    return {x.grad(), torch::Tensor()};
  }
};

torch::Tensor checkpoint_with(const ForwardFn& fn, const torch::Tensor& x, std::unique_ptr<KeptOps> kept,
                              bool offload_input) {
  auto holder = c10::IValue::make_capsule(c10::make_intrusive<ForwardHolder>(fn, std::move(kept), offload_input));
  return CheckpointFunction::apply(x, holder);
}

}  // namespace

torch::Tensor checkpoint(const ForwardFn& fn, const torch::Tensor& x, bool keep_ops) {
  return checkpoint_with(fn, x, keep_ops ? std::make_unique<KeptOps>() : nullptr, false);
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

BlockWrapFn policy_activation_checkpoint_wrapper(const RematPolicy& policy, BlockProducts products) {
  auto p = std::make_shared<const RematPolicy>(policy);
  return [p, products](int64_t, const torch::Tensor& x, const ForwardFn& inner) {
    if (!torch::GradMode::is_enabled()) return inner(x);
    return checkpoint_with(inner, x, std::make_unique<KeptOps>(p, products),
                           p->of(RematTensor::kDecoderLayerInput) == RematAction::kOffload);
  };
}

}  // namespace titan
