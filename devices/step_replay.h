// The step simulator's replay (devices/step_simulator.h, simulate_step): one pass over a
// recorded trace, building timeline tasks as it goes. Internal to the simulator: kernels and
// collectives in step_simulator.cpp, async tensor parallelism's chunked matmuls and ring steps
// and host-memory copies in step_replay_async_tp.cpp.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/id_map.h"
#include "devices/collective_matmul.h"
#include "devices/replay_memo.h"
#include "devices/step_simulator.h"

namespace titan::devices::detail {

// Bases of the uncertainty report beyond the kernels' CostBasis (TimelineTask::basis).
enum ReplayBasis {
  kLatencyBoundComm = kCostBases,  // exposed collectives whose latency + launch exceeds the transfer
  kBandwidthBoundComm,
  kLaunchGaps,
  kCommSlowdown,
  kAsyncTpChunks,  // matmuls split into chunks beside an async-TP collective
};
const char* replay_basis_name(int b);

class Replay {
 public:
  // time_only: only the step time is asked for (step_time()): tasks carry no categories and
  // kernels are not counted by op, so report() is not to be called.
  Replay(const Placement& p, const ChipSpec& chip, const SimulationOptions& o, bool time_only = false)
      : placement_(p), model_(chip, o.execution), options_(o), time_only_(time_only) {
    compute_ = timeline_.add_stream("compute", false);
    host_ = timeline_.add_stream("host", StreamKind::kHost);
    sep_launch_ = o.separate_launch_s >= 0 ? o.separate_launch_s : separate_launch_s(chip);
    if (o.memo) lowering_ = &o.memo->lowering(chip, o.execution);
  }

  void run(const Trace& trace);

  StepReport report() const;
  double step_time() const { return timeline_.makespan(); }

 private:
  int comm_stream(const std::string& name);
  // "all_gather dp_shard": a collective task's category, interned once per kind and group.
  const InternedName& collective_category(const CollectiveDesc& c);

  // Each kernel is dispatched by a host task (FIFO on the host stream: the host runs ahead
  // of the device) and runs on the compute stream once dispatched. A synchronous host (cpu)
  // dispatches the next op only after the previous one has finished. `next`: the collective
  // issued right after these ops, if any.
  void flush_ops(const CollectiveDesc* next = nullptr);

  void add_kernel(const Kernel& k);

  int64_t add_host(const Kernel& k);

  // The kernel's compute task, or its `share` of it (a chunk; the launch with the first).
  int64_t add_compute(const Kernel& k, double share, bool launch, int basis);

  void count_kernel(const Kernel& k);

  // The kernels of `span` as `chunks` chunks in chunk-major order (every kernel's chunk c,
  // then chunk c + 1: one shard of the input through all of them, as a collective matmul runs
  // it); chunk c >= 1 waits for ring step c - 1 of `steps` (an all-gather's: shard c has
  // arrived). Each chunk takes 1 / chunks of its kernel's time (same total seconds). Returns
  // each chunk's last task (what a reduce-scatter's step c waits for).
  std::vector<int64_t> add_chunked(KernelSpan span, int64_t chunks, const std::vector<int64_t>& steps);

  // A collective async TP decomposes (collective_matmul.h): fused mode only (separate mode
  // runs each collective alone), and an asynchronous host (a synchronous one, the cpu
  // device, cannot issue the next chunk while one runs).
  bool decomposes(const CollectiveDesc& c) const;

  // placement_.group(name), worked out once per group name: a step issues hundreds of
  // collectives over a handful of groups. References stay valid (a deque).
  const std::vector<AxisSegment>& group(const std::string& name) const;

  // Chunks of a collective matmul on c's group: one per member (TP degree).
  int64_t tp_chunks(const CollectiveDesc& c) const;

  // Fused: adjacent issues of the same collective on the same group and stream, with no
  // compute or wait between them, share one launch and one latency (coalesced buffer).
  void issue_fused(const TraceEvent& e);

  void close_bucket();

  // Separate: the collective waits for everything before it, pays the fixed launch, runs
  // alone, and the compute after it waits for it whether or not the trace waits.
  void issue_separate(const TraceEvent& e);

  // One collective task: alpha-beta cost on its group plus a launch (none for a group of 1).
  // Its bandwidth part shares the physical axes it spans with concurrent collectives.
  int64_t add_collective(const CollectiveDesc& c, const std::vector<int64_t>& deps,
                         double launch_s);

  // The task of collective c, or of its `share` (one ring step), on the physical axes its group
  // spans: `launch` is this task's launch, `whole_launch` the whole collective's, which with
  // its latency decides whether it counts as latency- or bandwidth-bound. Fills fresh_task().
  TimelineTask& collective_task(const CollectiveDesc& c, const std::vector<AxisSegment>& segments,
                                const CollectiveCost& cost, double share, double launch, double whole_launch);

  // task_ as a default TimelineTask, keeping its vectors' and strings' buffers: the timeline
  // copies what it is given, so one task is filled again for each (no allocation per task).
  TimelineTask& fresh_task();

  // A collective async TP decomposes, as its tp - 1 ring steps on its stream, each a share of
  // the whole collective's time (the launch with the first). A reduce-scatter's step s sends
  // chunk s's partial sums: it waits for that chunk of the matmuls feeding it (scatter_chunks_,
  // when flush_ops found them) instead of all of the compute before it.
  std::vector<int64_t> add_ring_steps(const CollectiveDesc& c, const std::vector<int64_t>& deps, double launch_s);

  // A copy between the chip and host memory (activation offload): bytes over the chip's host
  // link on its own copy stream (c.stream: one per direction, as the link is full duplex),
  // beside compute; the host itself (cpu) holds offloaded tensors where they are, for free.
  int64_t add_host_copy(const CollectiveDesc& c, const std::vector<int64_t>& deps);

  const Placement& placement_;
  ComputeModel model_;
  SimulationOptions options_;
  bool time_only_ = false;
  double sep_launch_ = 0;
  Timeline timeline_;
  TimelineTask task_;  // see fresh_task
  int compute_ = 0, host_ = 0;
  std::unordered_map<std::string, int> streams_;
  mutable std::deque<std::pair<std::string, std::vector<AxisSegment>>> groups_;  // see group()
  struct CollectiveCategory {
    CollectiveKind kind;
    InternedName group, name;
  };
  std::vector<CollectiveCategory> collective_categories_;
  IdMap<int64_t> work_task_;  // work handle -> its task (handles are numbered 0, 1, ...)
  std::vector<const OpDesc*> pending_ops_;
  std::vector<Kernel> kernels_buf_;  // flush_ops' lowering, reused
  LoweringMemo* lowering_ = nullptr;  // the caller's memo's, if any
  uint64_t ops_id_ = 0;               // the trace being run's (Trace::ops_id)
  std::vector<int64_t> next_compute_deps_;
  // Async TP: each decomposed all-gather's ring steps by the work handles it serves; the
  // steps of the one just waited on, which the next compute run overlaps; the chunk ends of
  // the matmuls feeding the reduce-scatter about to be issued.
  std::unordered_map<int64_t, std::vector<int64_t>> gather_steps_;
  std::vector<int64_t> pending_gather_, scatter_chunks_;
  int64_t last_compute_ = -1, last_collective_ = -1, last_host_ = -1;
  bool bucket_open_ = false;
  CollectiveDesc bucket_;
  std::vector<int64_t> bucket_works_;
  int64_t bucket_dep_ = -1, bucket_host_ = -1;
  double flops_ = 0;
  int64_t ops_ = 0, kernels_ = 0, collectives_ = 0;
  // Kernel execution seconds by op name: single ops, and fused chains by their first op.
  // By the op's interned name (Kernel::lead: one address per name), not hashed as text per kernel.
  std::unordered_map<const std::string*, double> op_seconds_, chain_seconds_;
};

}  // namespace titan::devices::detail
