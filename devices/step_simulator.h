// Trace (recorded ops and collectives of one rank's step) and simulate_step, which replays
// it on a device's timeline; the trainer's simulated runs call this to get a step time.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/collective_mode.h"
#include "devices/collective_cost.h"
#include "devices/compute_cost.h"
#include "devices/placement.h"
#include "devices/timeline.h"

namespace titan::devices {

// Fused: issued asynchronously once inputs are ready, overlapped, adjacent ones coalesced.
// Separate: each collective its own unit: waits for prior work, fixed launch, runs alone.
using ::titan::CollectiveMode;

struct CollectiveDesc {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  std::string group;          // mesh dim or flattened group name (Placement::group)
  int64_t bytes = 0;          // nccl-tests convention, see collective_cost.h
  std::string stream = "comm";  // communication stream it was issued on
};

// A storage the recorded ops touch (TensorUse::id), for the memory walk (devices/trace_memory.h).
struct StorageRecord {
  int64_t bytes = 0;           // its size when the recorder first saw it
  bool outlives_step = false;  // still referenced when the step ended: state, not a temporary
};
// A storage a parallel plan resized outside any op (FSDP frees a gathered buffer after its
// block ran and refills it before the next gather), before compute op number at_op.
struct StorageResize {
  int64_t at_op = 0;
  int64_t id = 0;
  int64_t bytes = 0;
};

struct TraceEvent {
  enum class Type { kCompute, kIssue, kWait };
  Type type = Type::kCompute;
  OpDesc op;                // kCompute
  CollectiveDesc collective;  // kIssue
  int64_t work = -1;        // kIssue: the handle it returns; kWait: the handle waited on
};

// One representative rank's step in program order. The recorder calls compute() per aten op,
// issue() when the sim backend receives a collective (returns its Work id) and wait() when
// that Work is waited on (a blocking collective is issue + wait).
class Trace {
 public:
  void compute(const OpDesc& op);
  int64_t issue(const CollectiveDesc& c);
  void wait(int64_t work);
  int64_t blocking(const CollectiveDesc& c) {
    int64_t w = issue(c);
    wait(w);
    return w;
  }
  const std::vector<TraceEvent>& events() const { return events_; }
  size_t size() const { return events_.size(); }
  size_t compute_ops() const { return op_event_.size(); }

  // Storages by id (index id - 1; ids are 1, 2, ... in the order the recorder saw them).
  std::vector<StorageRecord>& storages() { return storages_; }
  const std::vector<StorageRecord>& storages() const { return storages_; }
  std::vector<StorageResize>& storage_resizes() { return resizes_; }
  const std::vector<StorageResize>& storage_resizes() const { return resizes_; }

 private:
  struct Writer {
    int64_t op = -1;  // index of the op that last wrote the tensor
    size_t slot = 0;  // which of its writes
  };
  std::vector<TraceEvent> events_;
  std::vector<size_t> op_event_;  // event position of each compute op
  std::unordered_map<int64_t, Writer> writer_;
  int64_t next_work_ = 0;
  std::vector<StorageRecord> storages_;
  std::vector<StorageResize> resizes_;
};

struct SimulationOptions {
  ExecutionMode execution = ExecutionMode::kDeferAndFuse;
  CollectiveMode collective_mode = CollectiveMode::kFused;
  // Fixed cost of a collective run as its own unit (separate mode); < 0: the chip's
  // (separate_launch_s).
  double separate_launch_s = -1;
  bool keep_events = false;  // StepReport::events: every task's timing (timeline traces)
  // Fused mode, pipeline sends and receives: posted at issue, any number in flight, as the
  // trainer runs them (mpi, gloo) and NCCL's batched p2p does; false: queued in issue order on
  // one communication thread, the what-if of a runtime that hands them to its progress thread
  // (what the trainer did until December 2026). Separate mode blocks on each either way.
  // devices/pipeline_replay.h: kPosted / kAsync.
  bool p2p_posted = true;
  // Async tensor parallelism (parallelism.enable_async_tensor_parallel), fused mode on an
  // asynchronous host: each tensor-parallel all-gather and the matmuls it feeds, and each
  // reduce-scatter and the matmuls feeding it, run as a collective matmul decomposed into tp
  // chunks (devices/collective_matmul.h); otherwise the matmul waits for the whole transfer.
  bool async_tensor_parallel = false;
};

// Fixed cost per collective in separate mode: the chip's separate_collective_launch_s (XLA:
// its own program launch plus the implicit cross-chip rendezvous; GPU: a standalone NCCL
// launch and stream synchronisation); cpu: the measured per-op framework overhead.
double separate_launch_s(const ChipSpec& chip);

struct CostItem {
  std::string category;
  double seconds = 0;
};

struct StepReport {
  std::string device, topology, layout, execution, collective_mode;
  double step_time_s = 0;
  double compute_s = 0;                 // compute stream busy
  double comm_s = 0;                    // any communication stream busy
  double exposed_comm_s = 0;            // communication while compute waits
  double exposed_comm_fraction = 0;     // of the step
  double idle_s = 0;                    // nothing on the device (host-dispatch bound)
  double executed_flops = 0;            // per chip, as the kernels run (causal halving,
                                        // recompute included; not the MFU convention)
  int64_t ops = 0, kernels = 0, collectives = 0;  // collectives after coalescing
  std::vector<StreamBusy> streams;
  std::vector<CostItem> costs;          // busy time per category, largest first
  // Kernel execution time per op name (a fused chain under "fused from <its first op>"),
  // without launch gaps or the slowdown under communication, largest first: the profiler's
  // view of which ops the step's compute goes to. Not filled for pipeline runs.
  std::vector<CostItem> op_costs;
  // The parts of the step the model is least sure of: seconds of the step per basis of
  // its estimate (see uncertain_share), largest first; matmuls at a measured rate and
  // communication hidden under compute are not listed.
  std::vector<CostItem> uncertain;
  std::vector<TimelineEvent> events;    // every task as it ran, with options.keep_events
};

// Share of the step's time that rests on unmeasured parts of the model: sum of `uncertain`
// over step_time_s (at most 1).
double uncertain_share(const StepReport& r);
// The `uncertain` category of an exposed transfer: latency-bound (its latency and launch
// exceed the transfer) or bandwidth-bound.
const char* exposed_comm_basis_name(bool latency_bound);

// Replays `trace` on the device: ops are lowered to kernels per execution mode (fusion never
// crosses a collective), collectives are costed on their group's placement and put on their
// stream per collective mode. O(trace length); chip count only enters through closed forms.
StepReport simulate_step(const Trace& trace, const Placement& placement, const ChipSpec& chip,
                         const SimulationOptions& options);
// simulate_step(...).step_time_s alone, without the report's breakdowns (a pipeline's other
// ranks: the schedule needs only their segments' times).
double simulate_step_time(const Trace& trace, const Placement& placement, const ChipSpec& chip,
                          const SimulationOptions& options);

}  // namespace titan::devices
