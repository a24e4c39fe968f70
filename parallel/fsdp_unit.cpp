#include "parallel/fsdp_unit.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/strides.h>
#include <torch/csrc/autograd/custom_function.h>

namespace titan {

void free_storage(const torch::Tensor& t) {
  if (t.is_meta()) return note_storage_bytes(t, 0);
  auto* impl = t.storage().unsafeGetStorageImpl();
  if (impl->nbytes() == 0) return;
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  impl->set_nbytes(0);
}

void refill_storage(const torch::Tensor& t) {
  const size_t bytes = t.numel() * t.element_size();
  if (t.is_meta()) return note_storage_bytes(t, static_cast<int64_t>(bytes));
  auto* impl = t.storage().unsafeGetStorageImpl();
  if (impl->nbytes() == bytes) return;
  impl->set_data_ptr_noswap(c10::GetCPUAllocator()->allocate(bytes));
  impl->set_nbytes(bytes);
}

namespace {

// shard -> gathered full parameter; backward hands the full gradient to the unit, which
// reduce-scatters it (the shard's gradient arrives through finish_backward, not autograd).
struct UnshardFunction : public torch::autograd::Function<UnshardFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor shard,
                               torch::Tensor gathered, int64_t unit_ptr, int64_t index) {
    ctx->saved_data["unit"] = unit_ptr;
    ctx->saved_data["index"] = index;
    return gathered;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* unit = reinterpret_cast<FsdpUnit*>(ctx->saved_data["unit"].toInt());
    unit->add_grad(static_cast<size_t>(ctx->saved_data["index"].toInt()), grads[0]);
    return {torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Identity on a block's output whose backward gathers the block's parameters again (they
// were freed after forward) before autograd reaches the block's own backward.
struct PreBackwardFunction : public torch::autograd::Function<PreBackwardFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               int64_t unit_ptr, int64_t prev_ptr) {
    ctx->saved_data["unit"] = unit_ptr;
    ctx->saved_data["prev"] = prev_ptr;
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* unit = reinterpret_cast<FsdpUnit*>(ctx->saved_data["unit"].toInt());
    auto* prev = reinterpret_cast<FsdpUnit*>(ctx->saved_data["prev"].toInt());
    unit->wait_gather();
    // Fused mode: the next unit backward reaches (the previous block) is gathered meanwhile.
    if (prev) prev->issue_gather();
    return {grads[0], torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

void FsdpUnit::install() {
  wait_gather();
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    // An alias of the buffer's storage with its own version counter: the gathers that
    // refill the buffer for backward must not look like in-place edits of saved tensors.
    auto gathered = torch::empty({0}, p.gathered_flat.options());
    gathered.set_(p.gathered_flat.storage(), 0, p.full_shape, c10::contiguous_strides(p.full_shape));
    p.module->weight = UnshardFunction::apply(p.shard, gathered,
                                              reinterpret_cast<int64_t>(this), static_cast<int64_t>(i));
  }
}

torch::Tensor pre_backward(const torch::Tensor& x, FsdpUnit* unit, FsdpUnit* prev) {
  return PreBackwardFunction::apply(x, reinterpret_cast<int64_t>(unit), reinterpret_cast<int64_t>(prev));
}

}  // namespace titan
