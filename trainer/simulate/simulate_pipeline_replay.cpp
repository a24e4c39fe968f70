// Pipeline-parallel replay (see simulate_pipeline.h): every recorded segment costed on the
// device model, then the schedule composed on those costs over the placed topology.
#include <algorithm>
#include <map>

#include "common/error.h"
#include "trainer/simulate/exposed_comm.h"
#include "trainer/simulate/simulate_pipeline.h"

namespace titan {

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
      } else if (r > 0) {
        d = devices::simulate_step_time(seg.trace, placement, chip, options);  // only its time counts
      } else {  // rank 0's report stands for the step: its timeline gives exposed time by kind
        devices::SimulationOptions o = options;
        o.exposed_by_kind = true;
        devices::StepReport sr = devices::simulate_step(seg.trace, placement, chip, o);
        d = sr.step_time_s;
        c.rank0_exposed.push_back(std::move(sr.exposed_by_kind));
        c.rank0.push_back(std::move(sr));
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
