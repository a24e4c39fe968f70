// The trace recorder's process-wide state and its RecordFunction callbacks, shared by the
// recorder (trace_recorder.cpp) and the callbacks (recorder_callbacks.cpp). Internal to
// trainer/simulate: one recording at a time (TraceRecorder).
#pragma once

#include <ATen/record_function.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "devices/compute_cost.h"

namespace titan {

class TraceRecorder;

namespace recorder_state {

extern std::mutex mu;  // guards the recorder and the attention intervals
extern TraceRecorder* active;
extern bool fuse_attention_scope;      // set with `active`, before the callback is installed
extern bool fuse_kernel_scopes;        // the same, for the fused kernels' scopes
extern bool fuse_cross_entropy_scope;  // the same, for the cross entropy's scope alone
extern bool fuse_grouped_matmul_scope; // the same, for the grouped matmuls' scopes

// Forward scopes kept as one kernel (attention, fused kernels): on thread `thread`, autograd
// nodes with sequence numbers in [lo, hi) were created inside the scope; their backward is
// the kernel's backward, `backward`.
struct ScopeInterval {
  int64_t hi = 0;
  std::vector<devices::OpDesc> backward;
  bool backward_emitted = false;
};
extern std::map<std::pair<uint64_t, int64_t>, ScopeInterval> intervals;
// The last kernel backward whose gradients its scope's nodes made out of sight (a composite
// attention under a kept scope): compute op number and thread, -1 when none. A tensor a later
// backward node takes that the recording never saw is one of them (add_late_write).
extern int64_t unseen_grads_writer;
extern uint64_t unseen_grads_thread;

// The RecordFunction callbacks TraceRecorder installs: each aten call, backward node and user
// scope becomes a Frame on enter and, where it is a leaf op or a kept kernel, trace ops on exit.
std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn);
void on_exit(const at::RecordFunction& fn, at::ObserverContext* ctx);

}  // namespace recorder_state
}  // namespace titan
