// A thread-local hook through which an activation-checkpointing policy (op-level selective
// AC, parallel/activation_checkpoint.h) decides, op by op, which outputs of a checkpointed
// block are kept from its forward instead of recomputed. The model's ops and the fused
// kernels consult it at the few ops a policy can keep (linear products, attention, the
// sequence-parallel reduce-scatter); they know nothing of the policy. With no hook installed
// (the default) every op runs as usual.
//
// Protocol, per op call: next(op) says what to do. kKeep (the block's forward): run the op
// and hand its outputs to keep(). kReuse (the block's recompute in backward): do not run the
// op; take() returns the outputs kept for this call, which the op returns from an autograd
// node whose backward is the op's own backward, on the recomputed inputs. Header-only and
// owned by the model layer: the policies in parallel/ implement it without the model linking
// them.
#pragma once

#include <string>
#include <vector>

#include <ATen/record_function.h>
#include <torch/torch.h>

#include "common/error.h"

namespace titan {

enum class SavedOp { kLinear, kAttention, kReduceScatter };
enum class OpSaveAction { kRun, kKeep, kReuse };

inline const char* saved_op_name(SavedOp op) {
  switch (op) {
    case SavedOp::kLinear: return "linear";
    case SavedOp::kAttention: return "attention";
    case SavedOp::kReduceScatter: return "reduce_scatter";
  }
  return "?";
}

class OpSaveHook {
 public:
  virtual ~OpSaveHook() = default;
  virtual OpSaveAction next(SavedOp op) = 0;
  virtual void keep(SavedOp op, std::vector<torch::Tensor> outputs) = 0;
  virtual std::vector<torch::Tensor> take(SavedOp op) = 0;
};

inline OpSaveHook*& op_save_hook_slot() {
  thread_local OpSaveHook* hook = nullptr;
  return hook;
}
inline OpSaveHook* op_save_hook() { return op_save_hook_slot(); }

// Installs `hook` on this thread for the scope's lifetime (restoring the previous one).
class OpSaveHookScope {
 public:
  explicit OpSaveHookScope(OpSaveHook* hook) : prev_(op_save_hook_slot()) { op_save_hook_slot() = hook; }
  ~OpSaveHookScope() { op_save_hook_slot() = prev_; }
  OpSaveHookScope(const OpSaveHookScope&) = delete;
  OpSaveHookScope& operator=(const OpSaveHookScope&) = delete;

 private:
  OpSaveHook* prev_;
};

inline OpSaveAction op_save_next(SavedOp op) {
  OpSaveHook* h = op_save_hook();
  return h ? h->next(op) : OpSaveAction::kRun;
}
// kKeep / kReuse come from next(): an op handed one without a hook installed is a caller's bug.
inline OpSaveHook& installed_op_save_hook(SavedOp op) {
  OpSaveHook* h = op_save_hook();
  TITAN_CHECK(h != nullptr, saved_op_name(op), ": asked to keep or reuse its output with no op-save hook installed");
  return *h;
}
inline void op_save_keep(SavedOp op, std::vector<torch::Tensor> outputs) {
  installed_op_save_hook(op).keep(op, std::move(outputs));
}
inline std::vector<torch::Tensor> op_save_take(SavedOp op) { return installed_op_save_hook(op).take(op); }

// The profiling scope a reused op opens around its place (and around any kernel scope it
// still opens so that its backward is costed): the simulator's recorder
// (trainer/simulate/trace_recorder.h) records no forward work inside it, since a real run
// computes nothing there.
constexpr const char* kKeptOutputScope = "titan::kept_output";

class KeptOutputScope {
 public:
  explicit KeptOutputScope(bool on) : fn_(at::RecordScope::USER_SCOPE) {
    if (on && fn_.isActive()) fn_.before(kKeptOutputScope);
  }

 private:
  at::RecordFunction fn_;
};

}  // namespace titan
