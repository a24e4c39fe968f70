// simulate_step, which replays a Trace (devices/trace.h: recorded ops and collectives of one
// rank's step) on a device's timeline; the trainer's simulated runs call this to get a step time.
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
#include "devices/trace.h"

namespace titan::devices {

class ReplayMemo;  // devices/replay_memo.h

// Fused: issued asynchronously once inputs are ready, overlapped, adjacent ones coalesced.
// Separate: each collective its own unit: waits for prior work, fixed launch, runs alone.
using ::titan::CollectiveMode;

struct SimulationOptions {
  ExecutionMode execution = ExecutionMode::kDeferAndFuse;
  CollectiveMode collective_mode = CollectiveMode::kFused;
  // Fixed cost of a collective run as its own unit (separate mode); < 0: the chip's
  // (separate_launch_s).
  double separate_launch_s = -1;
  bool keep_events = false;  // StepReport::events: every task's timing (timeline traces)
  bool exposed_by_kind = false;  // StepReport::exposed_by_kind (devices/exposed_by_kind.h)
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
  // Replays already made (devices/replay_memo.h): a replay found there is not made again.
  ReplayMemo* memo = nullptr;
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
  // Exposed communication by collective kind, largest first, with options.exposed_by_kind.
  std::vector<CostItem> exposed_by_kind;
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
