// TraceRecorder: while alive, turns every leaf aten op this process runs (forward, backward,
// optimizer; meta tensors welcome) and every collective the `sim` backend receives into a
// devices::Trace for the step simulator. Used by trainer/simulate/simulate.cpp and its tests.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/sim_backend.h"
#include "devices/step_simulator.h"

namespace at {
class Tensor;
}

namespace titan {

// Name of the profiling scope the model puts around its attention core (scores, mask,
// softmax, probs x V); its inputs are q [B, H, S, D], k and v [B, KV, S, D] before GQA
// expansion. The recorder costs the scope as one flash-attention kernel, and the backward
// nodes autograd created inside it as one flash-attention backward kernel.
constexpr const char* kAttentionScope = "titan::attention";
// Name of the profiling scope around each transformer block's forward (the model opens it inside
// every wrapper: FSDP's gathers and activation checkpointing stay outside). Ops recorded
// elsewhere, and the backward of nodes made elsewhere, are OpDesc::outside_blocks: what
// torch.compile per block leaves eager.
constexpr const char* kBlockScope = "titan::block";

// Communicator names of the trainer's mesh -> group names devices::Placement knows.
std::string placement_group(const std::string& communicator_name);

// What the recorder keeps as one kernel, after the simulated chip (record_options).
struct RecordOptions {
  // ChipSpec::fused_attention: cost kAttentionScope as one flash kernel; false records the
  // ops inside it (and their backward) one by one.
  bool fuse_attention = true;
  // ChipSpec::host_fused_kernels: keep each fused-kernel scope (trainer/model/kernels/
  // fused_kernels.h; the model opens them only where training.fused_kernels would run the
  // kernel) as that kernel's ops (devices/fused_ops.h), forward and backward; false records
  // the composite ops inside them.
  bool fused_kernels = false;
  // The cross entropy's kernel scope only (kept where fused_kernels keeps every scope): a
  // compiler that covers the whole step (XLA under MaxText: execution compiled on a chip with
  // compiled_covers_step) fuses the loss into the logits' consumers, so neither an fp32 copy
  // of the logits nor their log-probabilities are stored; the backward writes the logits'
  // gradient in their dtype. Set by record_options(chip, execution).
  bool fused_cross_entropy = false;
  // Keep each grouped-matmul scope (the MoE experts' products, trainer/model/grouped_matmul.h)
  // as one grouped GEMM, forward and per gradient: what an accelerator's framework runs. Off
  // where the trainer itself runs (the host CPU, fused_kernels): its loop of products is recorded.
  bool grouped_matmul = true;
  RecordOptions(bool fuse_attention_ = true, bool fused_kernels_ = false)  // NOLINT: from a bool
      : fuse_attention(fuse_attention_), fused_kernels(fused_kernels_), grouped_matmul(!fused_kernels_) {}
};
RecordOptions record_options(const devices::ChipSpec& chip);
RecordOptions record_options(const devices::ChipSpec& chip, devices::ExecutionMode execution);

// The id the active recording gave t's storage (devices::TensorUse::id); 0 when it has not
// seen it. For notes taken during a recording (trainer/simulate/shard_probe.cpp).
int64_t recorded_storage_id(const at::Tensor& t);
// Collectives issued in the active recording's trace so far (-1: none active).
int64_t recorded_issue_count();

class TraceRecorder {
 public:
  // Installs a global at::RecordFunction callback (FUNCTION, BACKWARD_FUNCTION and
  // USER_SCOPE, inputs and outputs) and the sim listener. One recorder at a time.
  explicit TraceRecorder(const RecordOptions& options = {});
  ~TraceRecorder();
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  const devices::Trace& trace() const { return trace_; }
  // The trace with its storage table (devices::StorageRecord) filled in; call once the
  // recorded step is over, so that what it freed no longer counts as state.
  const devices::Trace& finish();
  // After finish(): the trace's events handed over (devices::Trace::take_events), its storage
  // table and resizes left in trace().
  std::vector<devices::TraceEvent> take_events();
  // After finish(): the whole trace handed over (not copied); trace() is left empty.
  devices::Trace take_trace();
  // Every Communicator call in issue order (kCall events), for comparison with real runs.
  const std::vector<SimCollectiveEvent>& calls() const { return calls_; }
  // Recorded leaf ops per aten name (attention ops under kAttentionScope's name, fused kernels
  // under their op names).
  std::map<std::string, int64_t> op_counts() const;

  // Called by the RecordFunction callbacks and the sim listener (any thread; serialized).
  void add_compute(devices::OpDesc&& op);
  void add_collective(const SimCollectiveEvent& e);
  // Compute op number `op` (already recorded) wrote `use` too: a tensor first seen after the
  // op that made it (a composite attention backward's gradients, seen when the next backward
  // node takes them). No op touched it before; finish() adds it to the op.
  void add_late_write(int64_t op, const devices::TensorUse& use);

 private:
  devices::Trace trace_;
  std::vector<SimCollectiveEvent> calls_;
  // op_counts(), keyed by the interned name's string (one per name: devices::InternedName), so
  // that counting an op hashes a pointer, not its characters.
  std::unordered_map<const std::string*, int64_t> counts_;
  std::map<int64_t, int64_t> work_of_;  // sim id -> trace work id
  std::vector<std::pair<int64_t, devices::TensorUse>> late_writes_;
  uint64_t handle_ = 0;
};

}  // namespace titan
