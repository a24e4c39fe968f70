#include "trainer/simulate/simulate_pipeline.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>

#include "collectives/world.h"
#include "common/error.h"
#include "parallel/fsdp_observer.h"
#include "trainer/simulate/exposed_comm.h"
#include "trainer/simulate/pipeline_rank_reuse.h"
#include "trainer/simulate/trace_recorder.h"
#include "trainer/step/parallelize.h"
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

namespace {

// What a rank's memory at any moment depends on in a schedule: per stage it holds, how many
// micro-batches' full activations (forward done, no backward yet), deferred weight-gradient
// inputs (I done, W not) and received but unused activations and gradients it holds, and
// whether its gradients exist yet (after its first backward action). Per rank, the set of
// states it passes through: once a schedule's steady state is long enough to visit every
// state the full count visits, more micro-batches only repeat them, and the step's memory
// peak is the same. (The peak count alone is not: 1F1B with as many micro-batches as ranks
// reaches it only before any gradient exists.)
std::vector<std::set<std::vector<int>>> memory_states(const PipeSchedule& s) {
  std::vector<std::set<std::vector<int>>> out(s.ranks.size());
  constexpr size_t kHeld = 0, kDeferred = 1, kActIn = 2, kGradIn = 3, kPerStage = 4;
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    const std::vector<int> stages = s.stages_of(static_cast<int>(r));
    std::vector<int> state(1 + kPerStage * stages.size(), 0);  // gradients exist, then per stage
    for (const PipeAction& a : s.ranks[r]) {
      const auto at = std::find(stages.begin(), stages.end(), a.stage);
      if (at == stages.end()) continue;
      int* st = &state[1 + kPerStage * static_cast<size_t>(at - stages.begin())];
      auto use = [](int& n) { n = std::max(0, n - 1); };
      switch (a.op) {
        case PipeOp::kRecvF: ++st[kActIn]; break;
        case PipeOp::kRecvB: ++st[kGradIn]; break;
        case PipeOp::kForward: ++st[kHeld], use(st[kActIn]); break;
        case PipeOp::kBackward: --st[kHeld], use(st[kGradIn]), state[0] = 1; break;
        case PipeOp::kBackwardInput: --st[kHeld], ++st[kDeferred], use(st[kGradIn]), state[0] = 1; break;
        case PipeOp::kBackwardWeight: --st[kDeferred]; break;
        default: break;
      }
      out[r].insert(state);
    }
  }
  return out;
}

}  // namespace

int recorded_microbatch_count(const PipeSchedule& full) {
  const int m = full.num_microbatches;
  bool reduce_grad = false;
  for (const auto& acts : full.ranks)
    for (const PipeAction& a : acts) reduce_grad = reduce_grad || a.op == PipeOp::kReduceGrad;
  auto build = [&](int k) -> std::optional<PipeSchedule> {
    try {
      return make_pipeline_schedule(full.name, full.num_ranks, full.num_stages, k, reduce_grad);
    } catch (const Error&) {  // not a named schedule, or too few micro-batches for it
      return std::nullopt;
    }
  };
  const auto again = build(m);
  if (!again || again->ranks != full.ranks) return m;  // loaded from a file: replayed as recorded
  const auto states = memory_states(full);
  // A schedule of k micro-batches holds at most k activations of a stage at once: no count
  // below the full schedule's most held reaches its states, so the search starts there (a
  // deep pipeline's 1F1B holds as many as it has ranks; building and checking each shorter
  // schedule was a tenth of a PP 64 simulation).
  int most_held = 0;
  for (const auto& rank_states : states)
    for (const std::vector<int>& st : rank_states)
      for (size_t i = 1; i < st.size(); i += 4) most_held = std::max(most_held, st[i]);
  // Every schedule's warm-up holds at most two rounds of its stages; a count that has not
  // visited the full one's states by then never will (GPipe, whose peak is every micro-batch).
  for (int k = std::max(3, most_held); k < m && k <= 2 * full.num_stages + 4; ++k) {
    const auto s = build(k);
    if (s && memory_states(*s) == states) return k;
  }
  return m;
}

SegmentIndex index_segments(const std::vector<PipelineSegment>& segs) {
  SegmentIndex out;
  out.plain_before.resize(segs.size());
  std::vector<size_t> pending;
  for (size_t i = 0; i < segs.size(); ++i) {
    if (!segs[i].is_action) {
      pending.push_back(i);
      continue;
    }
    const PipeAction& a = segs[i].action;
    out.action_at[{segs[i].run, static_cast<int>(a.op), a.stage, a.microbatch}] = i;
    out.plain_before[i] = std::move(pending);
    pending.clear();
  }
  out.plain_after = std::move(pending);
  return out;
}

namespace {

// The recorded segment each action of `full` replays (record_pipeline): per rank, the recorded
// actions by (op, stage, micro-batch) within a run, and the plain segments before each.
std::vector<std::vector<ReplayedSegment>> extrapolated_program(const RecordedPipeline& rec, const PipeSchedule& full,
                                                                int recorded) {
  const int m = full.num_microbatches;
  auto stand_in = [&](int mb) { return mb < recorded - 1 ? mb : mb == m - 1 ? recorded - 1 : recorded - 2; };
  std::vector<std::vector<ReplayedSegment>> program(rec.ranks.size());
  for (size_t q = 0; q < rec.ranks.size(); ++q) {
    const auto& segs = rec.ranks[q];
    const SegmentIndex index = index_segments(segs);
    auto& out = program[q];
    for (int run = 0; run < rec.runs; ++run) {
      for (const PipeAction& a : full.ranks[q]) {
        const int mb = a.microbatch < 0 ? a.microbatch : stand_in(a.microbatch);
        const auto at = index.action_at.find({run, static_cast<int>(a.op), a.stage, mb});
        TITAN_CHECK(at != index.action_at.end(), "pipeline simulation: rank ", q, " recorded no ",
                    PipeAction{a.op, a.stage, mb}.to_string(), " in run ", run, " to stand in for ", a.to_string());
        for (size_t i : index.plain_before[at->second]) out.push_back({i, segs[i].action, run});
        out.push_back({at->second, a, run});
      }
      if (run == rec.runs - 1)
        for (size_t i : index.plain_after) out.push_back({i, segs[i].action, run});
    }
  }
  return program;
}

// What record_rank learns besides the segments: the stage split (every rank's), and where
// in its segments each storage resize was made (to move them with a reused rank's segments).
struct RankExtras {
  std::vector<StageLayers> stages;
  std::vector<ResizePlace> resizes;
};

// Pipeline rank q's step recorded on the meta device, cut at its schedule's actions.
RankExtras record_rank(const JobConfig& cfg, int64_t chips, int64_t q, const RecordOptions& recording,
                       RecordedPipeline& out) {
  const int64_t per_stage = chips / static_cast<int64_t>(out.ranks.size());  // pp is the outermost mesh dim
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
  RankExtras extras;
  for (int st = 0; st < s.num_stages; ++st) extras.stages.push_back(pm.stage(st));
  std::vector<PipeAction> acts;
  std::vector<size_t> begins, ends;
  std::vector<size_t> resizes_at_begin, resizes_at_end;  // storage resizes made before each action's begin / end
  TraceRecorder recorder(recording);
  pm.observer = [&](const PipeAction& a, bool begin) {
    const size_t resizes = recorder.trace().storage_resizes().size();
    if (begin) {
      acts.push_back(a);
      begins.push_back(recorder.trace().size());
      resizes_at_begin.push_back(resizes);
    } else {
      ends.push_back(recorder.trace().size());
      resizes_at_end.push_back(resizes);
    }
  };
  trainer.train_step();
  pm.observer = nullptr;
  const devices::Trace& t = recorder.finish();
  const size_t per_run = s.ranks[q].size();
  auto& segs = out.ranks[q];
  size_t pos = 0;
  const size_t none = SIZE_MAX;
  auto plain = [&](size_t b, size_t e, int run) {
    if (e <= b) return none;
    PipelineSegment seg;
    seg.run = run;
    seg.trace = slice(t, b, e, &seg.p2p_bytes);
    segs.push_back(std::move(seg));
    return segs.size() - 1;
  };
  std::vector<size_t> action_seg(acts.size()), gap_seg(acts.size() + 1, none);  // gap i: before action i
  for (size_t i = 0; i < acts.size(); ++i) {
    const int run = static_cast<int>(i / per_run);
    gap_seg[i] = plain(pos, begins[i], run);
    PipelineSegment seg;
    seg.is_action = true;
    seg.action = acts[i];
    seg.run = run;
    seg.trace = slice(t, begins[i], ends[i], &seg.p2p_bytes);
    segs.push_back(std::move(seg));
    action_seg[i] = segs.size() - 1;
    pos = ends[i];
  }
  gap_seg[acts.size()] = plain(pos, t.size(), static_cast<int>(out.runs) - 1);
  // Each resize's segment: the action it was made in, else the plain segment of its gap (an
  // empty gap's resize stays at the end of the action before, or the start of the first).
  std::vector<int64_t> op_begin(segs.size() + 1, 0);
  for (size_t i = 0; i < segs.size(); ++i)
    op_begin[i + 1] = op_begin[i] + static_cast<int64_t>(segs[i].trace.compute_ops());
  const auto& resizes = t.storage_resizes();
  for (size_t j = 0; j < resizes.size() && !acts.empty(); ++j) {
    const size_t i = std::upper_bound(resizes_at_begin.begin(), resizes_at_begin.end(), j) - resizes_at_begin.begin();
    size_t seg = gap_seg[i];
    if (i > 0 && j < resizes_at_end[i - 1]) seg = action_seg[i - 1];
    else if (seg == none) seg = i > 0 ? action_seg[i - 1] : action_seg[0];
    const int64_t op = std::clamp(resizes[j].at_op - op_begin[seg], int64_t{0}, op_begin[seg + 1] - op_begin[seg]);
    extras.resizes.push_back({seg, op});
  }
  out.storages[q] = t.storages();
  out.storage_resizes[q] = t.storage_resizes();
  out.memory[q] = rank_memory(out, q);
  out.calls[q] = recorder.calls();
  TITAN_CHECK(acts.size() == per_run * static_cast<size_t>(out.runs), "pipeline simulation: rank ", q, " ran ",
              acts.size(), " actions, expected ", per_run, " x ", out.runs);
  return extras;
}

// The full schedule's micro-batch count scaled to k, the schedule runs per step kept.
JobConfig with_microbatches(const JobConfig& cfg, int m, int k) {
  JobConfig c = cfg;
  c.training.local_batch_size = cfg.training.local_batch_size / m * k;
  if (cfg.training.global_batch_size > 0) c.training.global_batch_size = cfg.training.global_batch_size / m * k;
  return c;
}

}  // namespace

RecordedPipeline record_pipeline(const JobConfig& cfg, int64_t chips, const RecordOptions& recording) {
  const int64_t pp = parallel_dims(cfg, chips).pp;
  RecordedPipeline out;
  out.ranks.resize(pp);
  out.calls.resize(pp);
  out.local_params.assign(pp, 0);
  out.memory.resize(pp);
  out.storages.resize(pp);
  out.storage_resizes.resize(pp);
  out.holds_output.assign(pp, false);
  out.copied_from.assign(pp, -1);
  out.copied_segment.resize(pp);
  PipeSchedule full;
  int k = 0;
  if (cfg.simulation.microbatch_extrapolation) {
    // Only the full schedule of rank 0's trainer, to choose how many micro-batches to record:
    // built without an FSDP observer (shard_probe.cpp notes one plan per recorded rank).
    FsdpObserver* observer = fsdp_observer();
    set_fsdp_observer(nullptr);
    try {
      set_sim_world(chips, 0);
      CommOptions co = comm_options(cfg);
      co.backend = "sim";
      Trainer trainer(cfg, init_distributed(co), /*on_meta=*/true);
      full = trainer.pipeline()->schedule();
    } catch (...) {
      set_fsdp_observer(observer);
      throw;
    }
    set_fsdp_observer(observer);
    k = recorded_microbatch_count(full);
  }
  const bool extrapolate = k > 0 && k < full.num_microbatches;
  const JobConfig recorded = extrapolate ? with_microbatches(cfg, full.num_microbatches, k) : cfg;
  // Ranks whose key (pipeline_rank_reuse.h) an earlier rank had are built from its segments.
  // Not while an FSDP observer notes one plan per recorded rank (shard_probe.cpp).
  // Nor when FSDP frees a stage after each forward (fsdp_reshard_after_forward = "always"): the
  // next action gathers it again, whichever it is, so an action's trace depends on the rank's
  // order (a forward after a forward gathers, one after a backward does not).
  const ParallelDims dims = parallel_dims(cfg, chips);
  const bool order_dependent =
      dims.fsdp_enabled() && fsdp_reshard_policy(cfg, /*pipeline=*/true) == FsdpOptions::Reshard::kAlways;
  const bool reuse = cfg.simulation.pipeline_rank_reuse && fsdp_observer() == nullptr && !order_dependent;
  std::map<std::vector<int64_t>, std::pair<int, std::vector<ResizePlace>>> recorded_for;  // key -> rank, its resizes
  std::vector<StageLayers> stages;
  for (int64_t q = 0; q < pp; ++q) {
    const int r = static_cast<int>(q);
    if (reuse && q > 0) {
      const auto key = pipeline_rank_key(out.schedule, stages, cfg, r);
      const auto at = recorded_for.find(key);
      if (at != recorded_for.end() && copy_pipeline_rank(out, at->second.second, at->second.first, r)) continue;
      RankExtras e = record_rank(recorded, chips, q, recording, out);
      recorded_for.emplace(key, std::make_pair(r, std::move(e.resizes)));
      continue;
    }
    RankExtras e = record_rank(recorded, chips, q, recording, out);
    if (q == 0) {
      stages = std::move(e.stages);
      recorded_for.emplace(pipeline_rank_key(out.schedule, stages, cfg, 0), std::make_pair(0, std::move(e.resizes)));
    }
  }
  out.recorded_microbatches = out.schedule.num_microbatches;
  if (extrapolate) {
    out.program = extrapolated_program(out, full, k);
    out.schedule = std::move(full);
  } else {
    out.program.resize(pp);
    for (int64_t q = 0; q < pp; ++q)
      for (size_t i = 0; i < out.ranks[q].size(); ++i)
        out.program[q].push_back({i, out.ranks[q][i].action, out.ranks[q][i].run});
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
    // A rank built from an earlier one's segments (pipeline rank reuse): the same traces cost
    // the same. The first rank is always recorded itself (its reports are kept below).
    const int from = r < rec.copied_from.size() ? rec.copied_from[r] : -1;
    if (r > 0 && from >= 0 && static_cast<size_t>(from) < r && rec.copied_segment[r].size() == rec.ranks[r].size()) {
      for (size_t i : rec.copied_segment[r]) c.duration_s[r].push_back(c.duration_s[from].at(i));
      continue;
    }
    for (const PipelineSegment& seg : rec.ranks[r]) {
      double d = 0;
      if (r == 0) c.rank0_latency_bound.push_back(false);
      if (seg.is_action && seg.action.p2p()) {
        if (seg.action.op == PipeOp::kSendF || seg.action.op == PipeOp::kSendB) {
          const auto cost = devices::collective_cost(placement, "pp", devices::CollectiveKind::kSendRecv, seg.p2p_bytes);
          d = cost.total_s() + launch;
          if (r == 0) c.rank0_latency_bound.back() = cost.latency_s + launch > cost.bandwidth_s;
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

  TITAN_CHECK(rec.program.size() == rec.ranks.size(), "pipeline simulation: a program for ", rec.program.size(),
              " ranks, recorded ", rec.ranks.size());
  std::vector<std::vector<devices::PipeStep>> steps(ranks);
  for (int r = 0; r < ranks; ++r) {
    TITAN_CHECK(costs.duration_s[r].size() == rec.ranks[r].size(), "pipeline simulation: rank ", r, " has ",
                rec.ranks[r].size(), " segments, costed ", costs.duration_s[r].size());
    size_t k = 0;  // index into the rank's actions of the current run
    int run = 0;
    for (const ReplayedSegment& p : rec.program[r]) {
      TITAN_CHECK(p.segment < rec.ranks[r].size(), "pipeline simulation: rank ", r, " replays segment ", p.segment,
                  " of ", rec.ranks[r].size());
      const PipelineSegment& seg = rec.ranks[r][p.segment];
      if (seg.is_action && p.run != run) run = p.run, k = 0;
      devices::PipeStep st;
      if (seg.is_action) {
        TITAN_CHECK(k < shape[r].size() && seg.action.op == p.action.op, "pipeline simulation: rank ", r,
                    " replays ", seg.action.to_string(), " as ", p.action.to_string());
        st = shape[r][k++];
        auto shift = [&](int64_t& id) { id += run * ids_per_run; };
        if (st.message >= 0) shift(st.message);
        for (auto& id : st.needs) shift(id);
        for (auto& id : st.makes) shift(id);
      }
      // A receive takes no time of its own: the send carries the transfer.
      if (!(seg.is_action && seg.action.p2p()) || st.kind == devices::PipeStep::Kind::kSend)
        st.duration_s = costs.duration_s[r][p.segment];
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
  double own = 0, rank0_sends = 0, rank0_latency_bound_sends = 0;
  // The first rank's reports, one per non-p2p recorded segment, summed over its program
  // (a recorded segment standing in for several micro-batches counts once for each).
  std::vector<int> report_of(rec.ranks.empty() ? 0 : rec.ranks[0].size(), -1);
  for (size_t i = 0, n = 0; i < report_of.size(); ++i)
    if (!(rec.ranks[0][i].is_action && rec.ranks[0][i].action.p2p())) report_of[i] = static_cast<int>(n++);
  TITAN_CHECK(rec.ranks.empty() || costs.rank0.size() == costs.rank0_exposed.size(),
              "pipeline simulation: the first rank's segment reports and exposures differ in number");
  for (const ReplayedSegment& p : rec.program.empty() ? std::vector<ReplayedSegment>{} : rec.program[0]) {
    const PipelineSegment& seg = rec.ranks[0][p.segment];
    if (report_of[p.segment] < 0) {
      if (seg.action.op == PipeOp::kSendF || seg.action.op == PipeOp::kSendB) {
        rank0_sends += costs.duration_s[0][p.segment];
        if (costs.rank0_latency_bound[p.segment]) rank0_latency_bound_sends += costs.duration_s[0][p.segment];
      }
      continue;
    }
    TITAN_CHECK(static_cast<size_t>(report_of[p.segment]) < costs.rank0.size(), "pipeline simulation: ",
                costs.rank0.size(), " reports for the first rank's segments");
    const devices::StepReport& sr = costs.rank0[report_of[p.segment]];
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
    add_by_kind(out.exposed_by_kind, costs.rank0_exposed[report_of[p.segment]]);
  }
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
    const double lat = rank0_latency_bound_sends;
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
