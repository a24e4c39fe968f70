#include "devices/step_simulator.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "common/error.h"
#include "devices/exposed_by_kind.h"
#include "devices/replay_memo.h"
#include "devices/step_replay.h"

namespace titan::devices {

double separate_launch_s(const ChipSpec& chip) {
  if (chip.is_host()) return chip.cpu_op_overhead_s > 0 ? chip.cpu_op_overhead_s : 5e-6;
  return chip.separate_collective_launch_s;  // [dispatch] of the chip file
}

double uncertain_share(const StepReport& r) {
  double s = 0;
  for (const CostItem& c : r.uncertain) s += c.seconds;
  return r.step_time_s > 0 ? std::min(1.0, s / r.step_time_s) : 0.0;
}

namespace detail {

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

void Replay::run(const Trace& trace) {
  // A host and a compute task per kernel, a task per collective: at most about two per event
  // (reserved, so that thousands of tasks are not moved as the timeline grows).
  timeline_.reserve(2 * trace.size());
  ops_id_ = trace.ops_id();
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
        const int64_t* task = work_task_.find(e.work);
        TITAN_CHECK(task, "wait on work ", e.work, " that was never issued");
        auto steps = gather_steps_.find(e.work);
        if (steps != gather_steps_.end()) pending_gather_ = steps->second;  // flush_ops overlaps it
        else if (*task >= 0) next_compute_deps_.push_back(*task);
        break;
      }
    }
  }
  flush_ops();
  close_bucket();
}

StepReport Replay::report() const {
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
  for (const auto& [name, sec] : op_seconds_) r.op_costs.push_back({*name, sec});
  for (const auto& [name, sec] : chain_seconds_) r.op_costs.push_back({"fused from " + *name, sec});
  std::sort(r.op_costs.begin(), r.op_costs.end(), [](const CostItem& a, const CostItem& b) {
    return a.seconds != b.seconds ? a.seconds > b.seconds : a.category < b.category;
  });
  if (options_.keep_events) r.events = timeline_.events();
  if (options_.exposed_by_kind) {
    ExposedByKind x;
    timeline_.for_each_event([&x](StreamKind kind, const std::string& category, double start_s, double end_s) {
      x.add(kind, category, start_s, end_s);
    });
    r.exposed_by_kind = x.result();
  }
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

const std::vector<AxisSegment>& Replay::group(const std::string& name) const {
  for (const auto& g : groups_)
    if (g.first == name) return g.second;
  std::vector<AxisSegment> segments = placement_.group(name);
  return groups_.emplace_back(name, std::move(segments)).second;
}

const InternedName& Replay::collective_category(const CollectiveDesc& c) {
  for (const CollectiveCategory& k : collective_categories_)
    if (k.kind == c.kind && k.group == c.group) return k.name;
  const std::string name = std::string(collective_name(c.kind)) + " " + c.group;
  return collective_categories_.emplace_back(CollectiveCategory{c.kind, c.group, name}).name;
}

int Replay::comm_stream(const std::string& name) {
  auto it = streams_.find(name);
  if (it != streams_.end()) return it->second;
  int id = timeline_.add_stream(name, true);
  streams_[name] = id;
  return id;
}

void Replay::flush_ops(const CollectiveDesc* next) {
  if (pending_ops_.empty()) return;
  close_bucket();  // compute between collectives ends a coalescing run
  if (lowering_) lowering_->lower(model_, ops_id_, pending_ops_, &kernels_buf_);
  else model_.lower(pending_ops_, &kernels_buf_);
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

void Replay::add_kernel(const Kernel& k) {
  add_host(k);
  add_compute(k, 1.0, true, static_cast<int>(k.basis));
  count_kernel(k);
}

TimelineTask& Replay::fresh_task() {
  task_.reset();
  return task_;
}

int64_t Replay::add_host(const Kernel& k) {
  TimelineTask& h = fresh_task();
  h.stream = host_;
  h.duration_s = k.host_s;
  if (!model_.overheads().async && last_compute_ >= 0) h.deps.push_back(last_compute_);
  return last_host_ = timeline_.add(h);
}

int64_t Replay::add_compute(const Kernel& k, double share, bool launch, int basis) {
  TimelineTask& t = fresh_task();
  t.stream = compute_;
  t.duration_s = (launch ? k.launch_s : 0.0) + k.exec_s * share;
  t.overhead_s = launch ? k.launch_s : 0.0;
  if (!time_only_) t.category = k.category;
  t.rate_under_comm = model_.rate_under_comm(k);
  t.basis = basis;
  t.overhead_basis = kLaunchGaps;
  t.slowdown_basis = kCommSlowdown;
  t.deps.assign(next_compute_deps_.begin(), next_compute_deps_.end());
  next_compute_deps_.clear();
  t.deps.push_back(last_host_);
  return last_compute_ = timeline_.add(t);
}

void Replay::count_kernel(const Kernel& k) {
  if (time_only_) return;
  if (k.lead) (k.chain ? chain_seconds_ : op_seconds_)[k.lead] += k.exec_s;
  flops_ += k.flops;
  ++kernels_;
}

void Replay::issue_fused(const TraceEvent& e) {
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

void Replay::close_bucket() {
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
  for (int64_t w : bucket_works_) work_task_.set(w, id);
}

void Replay::issue_separate(const TraceEvent& e) {
  std::vector<int64_t> deps;
  if (last_compute_ >= 0) deps.push_back(last_compute_);
  if (last_collective_ >= 0) deps.push_back(last_collective_);
  if (last_host_ >= 0) deps.push_back(last_host_);
  int64_t id = add_collective(e.collective, deps, sep_launch_);
  last_collective_ = id;
  work_task_.set(e.work, id);
  next_compute_deps_.push_back(id);
}

int64_t Replay::add_collective(const CollectiveDesc& c, const std::vector<int64_t>& deps,
                       double launch_s) {
  if (c.kind == CollectiveKind::kHostCopy) return add_host_copy(c, deps);
  const std::vector<AxisSegment>& segments = group(c.group);
  CollectiveCost cost = collective_cost(placement_.topology, segments, c.kind, c.bytes);
  const double launch = cost.group_size > 1 ? launch_s : 0.0;
  TimelineTask& t = collective_task(c, segments, cost, 1.0, launch, launch);
  t.deps.assign(deps.begin(), deps.end());
  ++collectives_;
  return timeline_.add(t);
}

TimelineTask& Replay::collective_task(const CollectiveDesc& c, const std::vector<AxisSegment>& segments,
                                      const CollectiveCost& cost, double share, double launch, double whole_launch) {
  TimelineTask& t = fresh_task();
  t.stream = comm_stream(c.stream);
  t.duration_s = cost.total_s() * share + launch;
  t.shared_s = cost.bandwidth_s * share;
  for (const AxisSegment& seg : segments)
    if (seg.count > 1) t.links.push_back(seg.axis);
  t.overhead_s = launch;
  if (!time_only_) {
    static const InternedName kLaunch("collective launch");
    t.overhead_category = kLaunch;
    t.category = collective_category(c);
  }
  t.basis = cost.latency_s + whole_launch > cost.bandwidth_s ? kLatencyBoundComm : kBandwidthBoundComm;
  return t;
}

}  // namespace detail

const char* exposed_comm_basis_name(bool latency_bound) {
  return detail::replay_basis_name(latency_bound ? detail::kLatencyBoundComm : detail::kBandwidthBoundComm);
}

namespace {

// The key of this replay in the caller's memo; none without a memo or when it is not kept.
std::optional<ReplayMemo::Key> remembered_as(const Trace& trace, const Placement& placement, const ChipSpec& chip,
                                             const SimulationOptions& options, bool time_only) {
  if (!options.memo) return std::nullopt;
  return options.memo->key(trace, placement, chip, options, time_only);
}

}  // namespace

StepReport simulate_step(const Trace& trace, const Placement& placement, const ChipSpec& chip,
                         const SimulationOptions& options) {
  const std::optional<ReplayMemo::Key> key = remembered_as(trace, placement, chip, options, /*time_only=*/false);
  if (const StepReport* kept = key ? options.memo->report(*key) : nullptr) {
    StepReport r = *kept;
    r.topology = placement.topology.describe();
    r.layout = placement.describe();
    return r;
  }
  detail::Replay r(placement, chip, options);
  r.run(trace);
  StepReport out = r.report();
  if (key) options.memo->keep(*key, out);
  return out;
}

double simulate_step_time(const Trace& trace, const Placement& placement, const ChipSpec& chip,
                          const SimulationOptions& options) {
  const std::optional<ReplayMemo::Key> key = remembered_as(trace, placement, chip, options, /*time_only=*/true);
  if (const double* kept = key ? options.memo->step_time(*key) : nullptr) return *kept;
  detail::Replay r(placement, chip, options, /*time_only=*/true);
  r.run(trace);
  const double t = r.step_time();
  if (key) options.memo->keep(*key, t);
  return t;
}

}  // namespace titan::devices
