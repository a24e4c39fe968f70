#include "devices/step_simulator.h"

#include <algorithm>
#include <unordered_map>

#include "common/error.h"
#include "devices/collective_matmul.h"

namespace titan::devices {

double separate_launch_s(const ChipSpec& chip) {
  if (chip.is_host()) return chip.cpu_op_overhead_s > 0 ? chip.cpu_op_overhead_s : 5e-6;
  return chip.separate_collective_launch_s;  // [dispatch] of the chip file
}

// Links the op into the step's data flow: who wrote what it reads, and (on the writer) that
// it was read. A view aliases its input's storage: it neither produces nor consumes data.
void Trace::compute(const OpDesc& op) {
  TraceEvent e;
  e.type = TraceEvent::Type::kCompute;
  e.op = op;
  OpDesc& d = e.op;
  d.index = static_cast<int64_t>(op_event_.size());
  d.read_from.assign(d.reads.size(), -1);
  d.last_read_by.assign(d.writes.size(), -1);
  if (d.kind != OpKind::kView) {
    for (size_t r = 0; r < d.reads.size(); ++r) {
      auto it = writer_.find(d.reads[r].id);
      if (d.reads[r].id == 0 || it == writer_.end()) continue;
      d.read_from[r] = it->second.op;
      events_[op_event_[static_cast<size_t>(it->second.op)]].op.last_read_by[it->second.slot] =
          d.index;
    }
    for (size_t w = 0; w < d.writes.size(); ++w)
      if (d.writes[w].id != 0) writer_[d.writes[w].id] = Writer{d.index, w};
  }
  op_event_.push_back(events_.size());
  events_.push_back(std::move(e));
}

int64_t Trace::issue(const CollectiveDesc& c) {
  TraceEvent e;
  e.type = TraceEvent::Type::kIssue;
  e.collective = c;
  const int64_t work = next_work_++;
  e.work = work;
  events_.push_back(std::move(e));
  return work;
}

void Trace::wait(int64_t work) {
  TITAN_CHECK(work >= 0 && work < next_work_, "wait on unknown work ", work);
  TraceEvent e;
  e.type = TraceEvent::Type::kWait;
  e.work = work;
  events_.push_back(std::move(e));
}

double uncertain_share(const StepReport& r) {
  double s = 0;
  for (const CostItem& c : r.uncertain) s += c.seconds;
  return r.step_time_s > 0 ? std::min(1.0, s / r.step_time_s) : 0.0;
}

namespace {

// Bases of the uncertainty report beyond the kernels' CostBasis (TimelineTask::basis).
enum ReplayBasis {
  kLatencyBoundComm = kCostBases,  // exposed collectives whose latency + launch exceeds the transfer
  kBandwidthBoundComm,
  kLaunchGaps,
  kCommSlowdown,
  kAsyncTpChunks,  // matmuls split into chunks beside an async-TP collective
};

const char* replay_basis_name(int b) {
  if (b < kCostBases) return cost_basis_name(static_cast<CostBasis>(b));
  switch (b) {
    case kLatencyBoundComm: return "exposed latency-bound collectives (hop latency and launch estimated)";
    case kBandwidthBoundComm: return "exposed bandwidth-bound collectives (fabric efficiency assumed)";
    case kLaunchGaps: return "per-kernel launch gaps (estimated)";
    case kCommSlowdown: return "compute slowed by communication (SM and HBM share estimated)";
    case kAsyncTpChunks:
      return "matmuls chunked by async TP (collective matmul; each chunk assumed at the whole matmul's rate)";
  }
  return "?";
}

// The replay state: one pass over the trace, building timeline tasks as it goes.
class Replay {
 public:
  Replay(const Placement& p, const ChipSpec& chip, const SimulationOptions& o)
      : placement_(p), model_(chip, o.execution), options_(o) {
    compute_ = timeline_.add_stream("compute", false);
    host_ = timeline_.add_stream("host", StreamKind::kHost);
    sep_launch_ = o.separate_launch_s >= 0 ? o.separate_launch_s : separate_launch_s(chip);
  }

  void run(const Trace& trace) {
    for (const TraceEvent& e : trace.events()) {
      switch (e.type) {
        case TraceEvent::Type::kCompute:
          pending_ops_.push_back(&e.op);  // the trace outlives the replay
          ++ops_;
          break;
        case TraceEvent::Type::kIssue:
          flush_ops(&e.collective);
          if (options_.collective_mode == CollectiveMode::kFused) issue_fused(e);
          else issue_separate(e);
          break;
        case TraceEvent::Type::kWait: {
          flush_ops();
          close_bucket();
          auto it = work_task_.find(e.work);
          TITAN_CHECK(it != work_task_.end(), "wait on work ", e.work, " that was never issued");
          auto steps = gather_steps_.find(e.work);
          if (steps != gather_steps_.end()) pending_gather_ = steps->second;  // flush_ops overlaps it
          else if (it->second >= 0) next_compute_deps_.push_back(it->second);
          break;
        }
      }
    }
    flush_ops();
    close_bucket();
  }

  StepReport report() const {
    StepReport r;
    TimelineSummary s = timeline_.summarize();
    r.device = model_.chip().name;
    r.topology = placement_.topology.describe();
    r.layout = placement_.describe();
    r.execution = execution_name(options_.execution);
    r.collective_mode = collective_mode_name(options_.collective_mode);
    r.step_time_s = s.makespan_s;
    r.compute_s = s.compute_busy_s;
    r.comm_s = s.comm_busy_s;
    r.exposed_comm_s = s.exposed_comm_s;
    r.exposed_comm_fraction = s.exposed_comm_fraction;
    r.idle_s = s.idle_s;
    r.executed_flops = flops_;
    r.ops = ops_;
    r.kernels = kernels_;
    r.collectives = collectives_;
    r.streams = s.streams;
    for (const auto& c : s.categories) r.costs.push_back({c.first, c.second});
    for (const auto& [name, sec] : op_seconds_) r.op_costs.push_back({name, sec});
    for (const auto& [name, sec] : chain_seconds_) r.op_costs.push_back({"fused from " + name, sec});
    std::sort(r.op_costs.begin(), r.op_costs.end(), [](const CostItem& a, const CostItem& b) {
      return a.seconds != b.seconds ? a.seconds > b.seconds : a.category < b.category;
    });
    if (options_.keep_events) r.events = timeline_.events();
    if (s.idle_s > 0) {
      // Device idle with nothing in flight: the host could not dispatch fast enough.
      CostItem idle{"host dispatch (device idle)", s.idle_s};
      auto pos = r.costs.begin();
      while (pos != r.costs.end() && pos->seconds >= idle.seconds) ++pos;
      r.costs.insert(pos, idle);
    }
    for (size_t b = 0; b < s.basis_s.size(); ++b) {
      const int basis = static_cast<int>(b);
      if (s.basis_s[b] <= 0 || basis == static_cast<int>(CostBasis::kMatmulMeasured) ||
          basis == static_cast<int>(CostBasis::kKernelMeasured) ||
          basis == static_cast<int>(CostBasis::kNone))
        continue;
      r.uncertain.push_back({replay_basis_name(basis), s.basis_s[b]});
    }
    if (s.idle_s > 0) r.uncertain.push_back({"host dispatch stalls (per-op costs estimated)", s.idle_s});
    std::stable_sort(r.uncertain.begin(), r.uncertain.end(),
                     [](const CostItem& a, const CostItem& b) { return a.seconds > b.seconds; });
    return r;
  }

 private:
  int comm_stream(const std::string& name) {
    auto it = streams_.find(name);
    if (it != streams_.end()) return it->second;
    int id = timeline_.add_stream(name, true);
    streams_[name] = id;
    return id;
  }

  // Each kernel is dispatched by a host task (FIFO on the host stream: the host runs ahead
  // of the device) and runs on the compute stream once dispatched. A synchronous host (cpu)
  // dispatches the next op only after the previous one has finished. `next`: the collective
  // issued right after these ops, if any.
  void flush_ops(const CollectiveDesc* next = nullptr) {
    if (pending_ops_.empty()) return;
    close_bucket();  // compute between collectives ends a coalescing run
    model_.lower(pending_ops_, &kernels_buf_);
    // Async TP: the matmuls a decomposed all-gather feeds (the run's start) and those feeding
    // a decomposed reduce-scatter issued next (its end) run in chunks beside the ring steps.
    KernelSpan fed, feeding;
    if (!pending_gather_.empty()) {
      fed = matmuls_fed_by_gather(kernels_buf_);
      if (fed.empty()) next_compute_deps_.push_back(pending_gather_.back());  // waits for all of it
    }
    scatter_chunks_.clear();
    if (next && decomposes(*next)) feeding = matmuls_feeding_scatter(kernels_buf_, fed.end);
    for (size_t i = 0; i < kernels_buf_.size();) {
      if (i == fed.begin && !fed.empty()) {
        add_chunked(fed, static_cast<int64_t>(pending_gather_.size()) + 1, pending_gather_);
        i = fed.end;
      } else if (i == feeding.begin && !feeding.empty()) {
        scatter_chunks_ = add_chunked(feeding, tp_chunks(*next), {});
        i = feeding.end;
      } else {
        add_kernel(kernels_buf_[i++]);
      }
    }
    pending_gather_.clear();
    pending_ops_.clear();
  }

  void add_kernel(const Kernel& k) {
    add_host(k);
    add_compute(k, 1.0, true, static_cast<int>(k.basis));
    count_kernel(k);
  }

  int64_t add_host(const Kernel& k) {
    TimelineTask h;
    h.stream = host_;
    h.duration_s = k.host_s;
    if (!model_.overheads().async && last_compute_ >= 0) h.deps.push_back(last_compute_);
    return last_host_ = timeline_.add(std::move(h));
  }

  // The kernel's compute task, or its `share` of it (a chunk; the launch with the first).
  int64_t add_compute(const Kernel& k, double share, bool launch, int basis) {
    TimelineTask t;
    t.stream = compute_;
    t.duration_s = (launch ? k.launch_s : 0.0) + k.exec_s * share;
    t.overhead_s = launch ? k.launch_s : 0.0;
    t.category = k.category;
    t.rate_under_comm = model_.rate_under_comm(k);
    t.basis = basis;
    t.overhead_basis = kLaunchGaps;
    t.slowdown_basis = kCommSlowdown;
    t.deps.swap(next_compute_deps_);
    t.deps.push_back(last_host_);
    return last_compute_ = timeline_.add(std::move(t));
  }

  void count_kernel(const Kernel& k) {
    if (k.lead) (k.chain ? chain_seconds_ : op_seconds_)[*k.lead] += k.exec_s;
    flops_ += k.flops;
    ++kernels_;
  }

  // The kernels of `span` as `chunks` chunks in chunk-major order (every kernel's chunk c,
  // then chunk c + 1: one shard of the input through all of them, as a collective matmul runs
  // it); chunk c >= 1 waits for ring step c - 1 of `steps` (an all-gather's: shard c has
  // arrived). Each chunk takes 1 / chunks of its kernel's time (same total seconds). Returns
  // each chunk's last task (what a reduce-scatter's step c waits for).
  std::vector<int64_t> add_chunked(KernelSpan span, int64_t chunks, const std::vector<int64_t>& steps) {
    std::vector<int64_t> hosts;
    for (size_t i = span.begin; i < span.end; ++i) hosts.push_back(add_host(kernels_buf_[i]));
    std::vector<int64_t> ends;
    const double share = 1.0 / static_cast<double>(chunks);
    for (int64_t c = 0; c < chunks; ++c) {
      if (c >= 1 && c - 1 < static_cast<int64_t>(steps.size())) next_compute_deps_.push_back(steps[c - 1]);
      for (size_t i = span.begin; i < span.end; ++i) {
        const Kernel& k = kernels_buf_[i];
        last_host_ = hosts[i - span.begin];
        const bool mm = k.category == op_kind_name(OpKind::kMatmul);
        add_compute(k, share, c == 0, mm ? static_cast<int>(kAsyncTpChunks) : static_cast<int>(k.basis));
      }
      ends.push_back(last_compute_);
    }
    last_host_ = hosts.back();
    for (size_t i = span.begin; i < span.end; ++i) count_kernel(kernels_buf_[i]);
    return ends;
  }

  // A collective async TP decomposes (collective_matmul.h): fused mode only (separate mode
  // runs each collective alone), and an asynchronous host (a synchronous one, the cpu
  // device, cannot issue the next chunk while one runs).
  bool decomposes(const CollectiveDesc& c) const {
    return options_.async_tensor_parallel && options_.collective_mode == CollectiveMode::kFused &&
           model_.overheads().async && decomposes_with_matmul(c) && tp_chunks(c) > 1;
  }

  // Chunks of a collective matmul on c's group: one per member (TP degree).
  int64_t tp_chunks(const CollectiveDesc& c) const {
    int64_t n = 1;
    for (const AxisSegment& seg : placement_.group(c.group)) n *= seg.count;
    return n;
  }

  // Fused: adjacent issues of the same collective on the same group and stream, with no
  // compute or wait between them, share one launch and one latency (coalesced buffer).
  void issue_fused(const TraceEvent& e) {
    const CollectiveDesc& c = e.collective;
    if (bucket_open_ && bucket_.kind == c.kind && bucket_.group == c.group &&
        bucket_.stream == c.stream) {
      bucket_.bytes += c.bytes;
      bucket_works_.push_back(e.work);
      return;
    }
    close_bucket();
    bucket_open_ = true;
    bucket_ = c;
    bucket_works_ = {e.work};
    bucket_dep_ = last_compute_;  // inputs are ready when the compute before it is done
    bucket_host_ = last_host_;    // and the host has issued it
  }

  void close_bucket() {
    if (!bucket_open_) return;
    bucket_open_ = false;
    std::vector<int64_t> deps;
    if (bucket_dep_ >= 0) deps.push_back(bucket_dep_);
    if (bucket_host_ >= 0) deps.push_back(bucket_host_);
    int64_t id = -1;
    if (decomposes(bucket_)) {
      const std::vector<int64_t> steps = add_ring_steps(bucket_, deps, model_.overheads().launch_per_kernel_s);
      id = steps.back();
      if (bucket_.kind == CollectiveKind::kAllGather)
        for (int64_t w : bucket_works_) gather_steps_[w] = steps;
    } else {
      id = add_collective(bucket_, deps, model_.overheads().launch_per_kernel_s);
    }
    for (int64_t w : bucket_works_) work_task_[w] = id;
  }

  // Separate: the collective waits for everything before it, pays the fixed launch, runs
  // alone, and the compute after it waits for it whether or not the trace waits.
  void issue_separate(const TraceEvent& e) {
    std::vector<int64_t> deps;
    if (last_compute_ >= 0) deps.push_back(last_compute_);
    if (last_collective_ >= 0) deps.push_back(last_collective_);
    if (last_host_ >= 0) deps.push_back(last_host_);
    int64_t id = add_collective(e.collective, deps, sep_launch_);
    last_collective_ = id;
    work_task_[e.work] = id;
    next_compute_deps_.push_back(id);
  }

  // One collective task: alpha-beta cost on its group plus a launch (none for a group of 1).
  // Its bandwidth part shares the physical axes it spans with concurrent collectives.
  int64_t add_collective(const CollectiveDesc& c, const std::vector<int64_t>& deps,
                         double launch_s) {
    if (c.kind == CollectiveKind::kHostCopy) return add_host_copy(c, deps);
    const std::vector<AxisSegment> segments = placement_.group(c.group);
    CollectiveCost cost = collective_cost(placement_.topology, segments, c.kind, c.bytes);
    const double launch = cost.group_size > 1 ? launch_s : 0.0;
    TimelineTask t = collective_task(c, segments, cost, 1.0, launch, launch);
    t.deps = deps;
    ++collectives_;
    return timeline_.add(std::move(t));
  }

  // The task of collective c, or of its `share` (one ring step), on the physical axes its group
  // spans: `launch` is this task's launch, `whole_launch` the whole collective's, which with
  // its latency decides whether it counts as latency- or bandwidth-bound.
  TimelineTask collective_task(const CollectiveDesc& c, const std::vector<AxisSegment>& segments,
                               const CollectiveCost& cost, double share, double launch, double whole_launch) {
    TimelineTask t;
    t.stream = comm_stream(c.stream);
    t.duration_s = cost.total_s() * share + launch;
    t.shared_s = cost.bandwidth_s * share;
    for (const AxisSegment& seg : segments)
      if (seg.count > 1) t.links.push_back(seg.axis);
    t.overhead_s = launch;
    t.overhead_category = "collective launch";
    t.category = std::string(collective_name(c.kind)) + " " + c.group;
    t.basis = cost.latency_s + whole_launch > cost.bandwidth_s ? kLatencyBoundComm : kBandwidthBoundComm;
    return t;
  }

  // A collective async TP decomposes, as its tp - 1 ring steps on its stream, each a share of
  // the whole collective's time (the launch with the first). A reduce-scatter's step s sends
  // chunk s's partial sums: it waits for that chunk of the matmuls feeding it (scatter_chunks_,
  // when flush_ops found them) instead of all of the compute before it.
  std::vector<int64_t> add_ring_steps(const CollectiveDesc& c, const std::vector<int64_t>& deps, double launch_s) {
    const std::vector<AxisSegment> segments = placement_.group(c.group);
    const CollectiveCost cost = collective_cost(placement_.topology, segments, c.kind, c.bytes);
    const int64_t steps = tp_chunks(c) - 1;
    const double share = 1.0 / static_cast<double>(steps);
    const bool chunked = c.kind == CollectiveKind::kReduceScatter && !scatter_chunks_.empty();
    std::vector<int64_t> ids;
    for (int64_t s = 0; s < steps; ++s) {
      TimelineTask t = collective_task(c, segments, cost, share, s == 0 ? launch_s : 0.0, launch_s);
      if (chunked) {
        t.deps = {scatter_chunks_[static_cast<size_t>(s)]};
        for (int64_t d : deps)
          if (d != bucket_dep_) t.deps.push_back(d);  // the host's issue, not the compute before
      } else if (s == 0) {
        t.deps = deps;
      }
      ids.push_back(timeline_.add(std::move(t)));
    }
    scatter_chunks_.clear();
    ++collectives_;
    return ids;
  }

  // A copy between the chip and host memory (activation offload): bytes over the chip's host
  // link on its own copy stream (c.stream: one per direction, as the link is full duplex),
  // beside compute; the host itself (cpu) holds offloaded tensors where they are, for free.
  int64_t add_host_copy(const CollectiveDesc& c, const std::vector<int64_t>& deps) {
    const ChipSpec& chip = model_.chip();
    TITAN_CONFIG_CHECK(chip.is_host() || chip.host_link_bytes_per_s > 0, "activation offload on ", chip.name,
                       ": its chip file gives no [host] link_bytes_per_s (devices/chips/)");
    TimelineTask t;
    t.stream = comm_stream(c.stream);
    t.deps = deps;
    t.duration_s = chip.is_host() ? 0.0 : static_cast<double>(c.bytes) / chip.host_link_bytes_per_s;
    t.category = std::string(collective_name(c.kind)) + " " + c.group;
    t.basis = kBandwidthBoundComm;
    ++collectives_;
    return timeline_.add(std::move(t));
  }

  const Placement& placement_;
  ComputeModel model_;
  SimulationOptions options_;
  double sep_launch_ = 0;
  Timeline timeline_;
  int compute_ = 0, host_ = 0;
  std::unordered_map<std::string, int> streams_;
  std::unordered_map<int64_t, int64_t> work_task_;
  std::vector<const OpDesc*> pending_ops_;
  std::vector<Kernel> kernels_buf_;  // flush_ops' lowering, reused
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
  std::unordered_map<std::string, double> op_seconds_, chain_seconds_;
};

}  // namespace

const char* exposed_comm_basis_name(bool latency_bound) {
  return replay_basis_name(latency_bound ? kLatencyBoundComm : kBandwidthBoundComm);
}

StepReport simulate_step(const Trace& trace, const Placement& placement, const ChipSpec& chip,
                         const SimulationOptions& options) {
  Replay r(placement, chip, options);
  r.run(trace);
  return r.report();
}

}  // namespace titan::devices
