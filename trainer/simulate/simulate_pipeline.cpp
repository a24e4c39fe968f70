#include "trainer/simulate/simulate_pipeline.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "collectives/world.h"
#include "common/error.h"
#include "trainer/simulate/exposed_comm.h"
#include "trainer/simulate/trace_recorder.h"
#include "trainer/step/trainer.h"

namespace titan {
namespace {

// Events [b, e) of a trace as a trace of their own; a wait on work issued before b is
// dropped (that collective is taken as done when the segment starts).
devices::Trace slice(const devices::Trace& t, size_t b, size_t e, int64_t* p2p_bytes) {
  devices::Trace out;
  std::unordered_map<int64_t, int64_t> work;
  for (size_t i = b; i < e; ++i) {
    const devices::TraceEvent& ev = t.events()[i];
    if (ev.type == devices::TraceEvent::Type::kCompute) {
      out.compute(ev.op);
    } else if (ev.type == devices::TraceEvent::Type::kIssue) {
      work[ev.work] = out.issue(ev.collective);
      if (ev.collective.group == "pp" && ev.collective.kind == devices::CollectiveKind::kSendRecv)
        *p2p_bytes += ev.collective.bytes;
    } else if (work.count(ev.work)) {
      out.wait(work[ev.work]);
    }
  }
  return out;
}

}  // namespace

devices::StepMemory rank_memory(const RecordedPipeline& p, size_t q) {
  std::vector<const devices::Trace*> parts;
  for (const PipelineSegment& seg : p.ranks[q]) parts.push_back(&seg.trace);
  return devices::trace_memory(parts, p.storages[q], p.storage_resizes[q]);
}

RecordedPipeline record_pipeline(const JobConfig& cfg, int64_t chips, const RecordOptions& recording) {
  const ParallelDims dims = parallel_dims(cfg, chips);
  const int64_t pp = dims.pp, per_stage = chips / pp;  // pp is the outermost mesh dim
  RecordedPipeline out;
  out.ranks.resize(pp);
  out.calls.resize(pp);
  out.local_params.assign(pp, 0);
  out.memory.resize(pp);
  out.storages.resize(pp);
  out.storage_resizes.resize(pp);
  out.holds_output.assign(pp, false);
  for (int64_t q = 0; q < pp; ++q) {
    set_sim_world(chips, q * per_stage);
    CommOptions co = comm_options(cfg);
    co.backend = "sim";
    auto world = init_distributed(co);
    Trainer trainer(cfg, world, /*on_meta=*/true);
    PipelineModel& pm = *trainer.pipeline();
    const PipeSchedule& s = pm.schedule();
    if (q == 0) {
      out.schedule = s;
      out.runs = trainer.microbatches() / pm.microbatches();
    }
    for (auto& p : trainer.model()->named_parameters()) {
      out.local_params[q] += p.value().numel();
      if (p.value().numel() > 0) out.param_elem_bytes = static_cast<int64_t>(p.value().element_size());
    }
    out.holds_output[q] = s.stage_rank[s.num_stages - 1] == q;
    std::vector<PipeAction> acts;
    std::vector<size_t> begins, ends;
    TraceRecorder recorder(recording);
    pm.observer = [&](const PipeAction& a, bool begin) {
      if (begin) {
        acts.push_back(a);
        begins.push_back(recorder.trace().size());
      } else {
        ends.push_back(recorder.trace().size());
      }
    };
    trainer.train_step();
    pm.observer = nullptr;
    const devices::Trace& t = recorder.finish();
    const size_t per_run = s.ranks[q].size();
    auto& segs = out.ranks[q];
    size_t pos = 0;
    auto plain = [&](size_t b, size_t e, int run) {
      if (e <= b) return;
      PipelineSegment seg;
      seg.run = run;
      seg.trace = slice(t, b, e, &seg.p2p_bytes);
      segs.push_back(std::move(seg));
    };
    for (size_t i = 0; i < acts.size(); ++i) {
      const int run = static_cast<int>(i / per_run);
      plain(pos, begins[i], run);
      PipelineSegment seg;
      seg.is_action = true;
      seg.action = acts[i];
      seg.run = run;
      seg.trace = slice(t, begins[i], ends[i], &seg.p2p_bytes);
      segs.push_back(std::move(seg));
      pos = ends[i];
    }
    plain(pos, t.size(), static_cast<int>(out.runs) - 1);
    out.storages[q] = t.storages();
    out.storage_resizes[q] = t.storage_resizes();
    out.memory[q] = rank_memory(out, q);
    out.calls[q] = recorder.calls();
    TITAN_CHECK(acts.size() == per_run * static_cast<size_t>(out.runs), "pipeline simulation: rank ", q, " ran ",
                acts.size(), " actions, expected ", per_run, " x ", out.runs);
  }
  return out;
}

PipelineSegmentCosts cost_pipeline_segments(const RecordedPipeline& rec, const devices::Placement& placement,
                                            const devices::ChipSpec& chip, const devices::SimulationOptions& options) {
  const bool fused = options.collective_mode == CollectiveMode::kFused;
  const double launch = fused ? 0.0 : (options.separate_launch_s >= 0 ? options.separate_launch_s
                                                                       : devices::separate_launch_s(chip));
  PipelineSegmentCosts c;
  c.duration_s.resize(rec.ranks.size());
  for (size_t r = 0; r < rec.ranks.size(); ++r) {
    for (const PipelineSegment& seg : rec.ranks[r]) {
      double d = 0;
      if (seg.is_action && seg.action.p2p()) {
        if (seg.action.op == PipeOp::kSendF || seg.action.op == PipeOp::kSendB) {
          const auto cost = devices::collective_cost(placement, "pp", devices::CollectiveKind::kSendRecv, seg.p2p_bytes);
          d = cost.total_s() + launch;
          if (r == 0) {
            c.rank0_sends += d;
            if (cost.latency_s + launch > cost.bandwidth_s) c.rank0_latency_bound_sends += d;
          }
        }
      } else {
        devices::SimulationOptions o = options;
        o.keep_events = options.keep_events || r == 0;  // the first rank's: exposed time by kind
        devices::StepReport sr = devices::simulate_step(seg.trace, placement, chip, o);
        d = sr.step_time_s;
        if (r == 0) {
          c.rank0_exposed.push_back(exposed_by_kind(sr));
          if (!options.keep_events) sr.events.clear();
          c.rank0.push_back(std::move(sr));
        }
      }
      c.duration_s[r].push_back(d);
    }
  }
  return c;
}

PipelineReplayReport compose_pipeline_step(const RecordedPipeline& rec, const PipelineSegmentCosts& costs,
                                           const devices::SimulationOptions& options) {
  const bool fused = options.collective_mode == CollectiveMode::kFused;
  const devices::P2PMode mode = !fused                ? devices::P2PMode::kBlocking
                               : options.p2p_posted ? devices::P2PMode::kPosted
                                                    : devices::P2PMode::kAsync;
  const PipeSchedule& s = rec.schedule;
  auto zero = [](const PipeAction&) { return 0.0; };
  const auto shape = pipeline_steps(s, mode, zero, zero);  // needs / makes / message ids of one run
  const int64_t ids_per_run = int64_t{4} * s.num_stages * s.num_microbatches;
  const int ranks = static_cast<int>(rec.ranks.size());
  TITAN_CHECK(costs.duration_s.size() == rec.ranks.size(), "pipeline simulation: costs for ", costs.duration_s.size(),
              " ranks, recorded ", rec.ranks.size());

  std::vector<std::vector<devices::PipeStep>> steps(ranks);
  for (int r = 0; r < ranks; ++r) {
    TITAN_CHECK(costs.duration_s[r].size() == rec.ranks[r].size(), "pipeline simulation: rank ", r, " has ",
                rec.ranks[r].size(), " segments, costed ", costs.duration_s[r].size());
    size_t k = 0;  // index into the rank's actions of the current run
    int run = 0;
    for (size_t i = 0; i < rec.ranks[r].size(); ++i) {
      const PipelineSegment& seg = rec.ranks[r][i];
      if (seg.is_action && seg.run != run) run = seg.run, k = 0;
      devices::PipeStep st;
      if (seg.is_action) {
        st = shape[r][k++];
        auto shift = [&](int64_t& id) { id += run * ids_per_run; };
        if (st.message >= 0) shift(st.message);
        for (auto& id : st.needs) shift(id);
        for (auto& id : st.makes) shift(id);
      }
      // A receive takes no time of its own: the send carries the transfer.
      if (!(seg.is_action && seg.action.p2p()) || st.kind == devices::PipeStep::Kind::kSend)
        st.duration_s = costs.duration_s[r][i];
      steps[r].push_back(std::move(st));
    }
  }
  const devices::PipelineReplayResult res = devices::replay_pipeline(steps, mode);
  TITAN_CHECK(!res.deadlock, "pipeline simulation: the recorded schedule deadlocked in the replay");

  PipelineReplayReport out;
  out.rank_busy_s = res.compute_busy_s;
  out.bubble_fraction = res.bubble_fraction;
  out.timing = res.timing;
  devices::StepReport& rep = out.report;
  std::map<std::string, double> cost_of, op_cost_of, uncertain;
  double own = 0;
  for (const auto& sr : costs.rank0) {
    if (rep.device.empty()) {
      rep.device = sr.device, rep.topology = sr.topology, rep.layout = sr.layout;
      rep.execution = sr.execution, rep.collective_mode = sr.collective_mode;
    }
    own += sr.step_time_s;
    rep.compute_s += sr.compute_s, rep.comm_s += sr.comm_s, rep.exposed_comm_s += sr.exposed_comm_s;
    rep.idle_s += sr.idle_s, rep.executed_flops += sr.executed_flops;
    rep.ops += sr.ops, rep.kernels += sr.kernels, rep.collectives += sr.collectives;
    for (const auto& c : sr.costs) cost_of[c.category] += c.seconds;
    for (const auto& c : sr.op_costs) op_cost_of[c.category] += c.seconds;
    for (const auto& c : sr.uncertain) uncertain[c.category] += c.seconds;
  }
  const double rank0_sends = costs.rank0_sends;
  for (const auto& e : costs.rank0_exposed) add_by_kind(out.exposed_by_kind, e);
  if (!fused && rank0_sends > 0) add_by_kind(out.exposed_by_kind, {{"send/recv", rank0_sends}});
  std::stable_sort(out.exposed_by_kind.begin(), out.exposed_by_kind.end(),
                   [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  rep.step_time_s = res.makespan_s;
  rep.comm_s += rank0_sends;
  if (rank0_sends > 0) cost_of["send/recv pp"] += rank0_sends;
  if (!fused) rep.exposed_comm_s += rank0_sends;
  const double waiting = std::max(0.0, res.rank_end_s.empty() ? 0.0 : res.makespan_s - own - (fused ? 0.0 : rank0_sends));
  if (waiting > 0) cost_of["pipeline bubble (waiting for other stages)"] += waiting;
  rep.idle_s += waiting;
  rep.exposed_comm_fraction = rep.step_time_s > 0 ? rep.exposed_comm_s / rep.step_time_s : 0;
  for (const auto& [name, sec] : cost_of) rep.costs.push_back({name, sec});
  std::sort(rep.costs.begin(), rep.costs.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  for (const auto& [name, sec] : op_cost_of) rep.op_costs.push_back({name, sec});
  std::sort(rep.op_costs.begin(), rep.op_costs.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  // The first pipeline rank's segments; its waits for other stages are the schedule's, not
  // an estimate of the device model.
  // Blocking sends (separate mode) stall the rank for their whole transfer: as exposed as a
  // blocking collective, and resting on the same fabric estimates.
  if (!fused && rank0_sends > 0) {
    const double lat = costs.rank0_latency_bound_sends;
    if (lat > 0) uncertain[devices::exposed_comm_basis_name(true)] += lat;
    if (rank0_sends > lat) uncertain[devices::exposed_comm_basis_name(false)] += rank0_sends - lat;
  }
  for (const auto& [name, sec] : uncertain) rep.uncertain.push_back({name, sec});
  std::sort(rep.uncertain.begin(), rep.uncertain.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  return out;
}

PipelineReplayReport replay_pipeline_step(const RecordedPipeline& rec, const devices::Placement& placement,
                                          const devices::ChipSpec& chip, const devices::SimulationOptions& options) {
  return compose_pipeline_step(rec, cost_pipeline_segments(rec, placement, chip, options), options);
}

}  // namespace titan
