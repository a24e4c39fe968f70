// Layer extrapolation (see layer_extrapolation.h).
#include "trainer/simulate/layer_extrapolation.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <sstream>

#include "parallel/pipeline_schedule.h"
#include "trainer/config/config_enums.h"
#include "parallel/pipeline_stages.h"
#include "trainer/config/resolve_model.h"
#include "trainer/step/trainer.h"

namespace titan {
namespace {

// The first sample holds this many layer steps: one block per stage (and period).
constexpr int64_t kFirstSampleSteps = 1;
// A figure whose second difference over the samples exceeds this share of its size is not
// affine in depth (rounding of the replay's sums stays near 1e-15).
constexpr double kAffineTolerance = 1e-9;

// Checks and extends one figure at a time; the first failure is kept as the reason.
class Fit {
 public:
  explicit Fit(int64_t ahead) : ahead_(ahead) {}

  // floor: the size below which differences are rounding (a time next to the step time).
  double real(const std::string& name, double a, double b, double c, double floor = 0) {
    const double d1 = b - a, d2 = c - b;
    const double scale = std::max({std::abs(a), std::abs(b), std::abs(c), floor});
    if (std::abs(d2 - d1) > kAffineTolerance * scale) {
      std::ostringstream v;
      v.precision(12);
      v << a << ", " << b << ", " << c;
      fail(name, v.str());
    }
    return c + static_cast<double>(ahead_) * d2;
  }
  int64_t count(const std::string& name, int64_t a, int64_t b, int64_t c) {
    if (c - b != b - a) fail(name, std::to_string(a) + ", " + std::to_string(b) + ", " + std::to_string(c));
    return c + ahead_ * (c - b);
  }
  void same(const std::string& name, bool equal) {
    if (!equal) fail(name, "differs between the samples");
  }
  bool ok() const { return why_.empty(); }
  int64_t ahead() const { return ahead_; }
  const std::string& why() const { return why_; }

 private:
  void fail(const std::string& name, const std::string& values) {
    if (why_.empty()) why_ = name + " is not affine in depth (" + values + ")";
  }
  int64_t ahead_;
  std::string why_;
};

}  // namespace

namespace {

// Samples that together hold as many layers as the config record no faster than it. One step
// deeper, two of the three are recorded already: the move gains while its one new recording
// holds at most half the config's layers (recording cost grows with depth).
LayerSamples gains(LayerSamples s, bool deeper) {
  const bool gain = deeper ? 2 * s.layers[2] <= s.target_layers
                           : s.layers[0] + s.layers[1] + s.layers[2] < s.target_layers;
  if (s.ok && !gain) {
    s.ok = false;
    s.why = "too shallow to gain from samples (" + std::to_string(s.target_layers) + " layers, samples " +
            std::to_string(s.layers[0]) + ", " + std::to_string(s.layers[1]) + ", " + std::to_string(s.layers[2]) +
            ")";
  }
  return s;
}

}  // namespace

JobConfig with_layers(const JobConfig& cfg, int64_t n_layers) {
  JobConfig c = cfg;
  c.model.n_layers = n_layers;
  return c;
}

LayerSamples layer_samples(const JobConfig& cfg) {
  LayerSamples s;
  const ModelArgs args = resolve_model_args(cfg, vocab_without_data(cfg));
  s.target_layers = args.n_layers;
  const ParallelDims dims = parallel_dims(cfg, cfg.simulation.num_chips);
  int64_t stages = 1;
  if (dims.pp > 1) {
    const auto& p = cfg.parallelism;
    if (p.pipeline_parallel_layers_per_stage > 0 || !p.pipeline_parallel_schedule_csv.empty()) {
      s.why = "pipeline stages set by layers_per_stage or a schedule file (the stage count follows the depth)";
      return s;
    }
    PipelineSplitOptions o;
    o.degree = dims.pp;
    o.first_stage_less_layers = p.pipeline_parallel_first_stage_less_layers;
    o.last_stage_less_layers = p.pipeline_parallel_last_stage_less_layers;
    o.single_stage_schedule = single_stage_schedule(to_string(p.pipeline_parallel_schedule));
    stages = pipeline_num_stages(s.target_layers, o);
  }
  const int64_t period =
      cfg.activation_checkpoint.mode == AcMode::kSelective && !cfg.activation_checkpoint.op_level()
          ? std::max<int64_t>(1, cfg.activation_checkpoint.every())
          : 1;
  // A sample must add whole MoE periods too, or samples hold uneven mixes of dense and MoE layers.
  const int64_t moe_period = args.is_moe() && args.moe_sparse_step > 1 ? args.moe_sparse_step : 1;
  s.step = stages * std::lcm(period, moe_period);
  const int64_t rest = s.target_layers % s.step;
  // Under fused collectives FSDP gathers the next block's weights while a block computes and
  // reduces its gradients while the block before runs backward: a single-stage step of one
  // block overlaps neither, so its first sample starts at two blocks (every such sample of
  // launch/bench-study's fused layouts, 176 points, failed the affine check at one block and
  // passed from two). Pipeline stages of one block pass it in most points, so they start there.
  const int64_t first =
      stages == 1 && cfg.comm.collective_mode == CollectiveMode::kFused && rest + s.step * kFirstSampleSteps < 2
          ? kFirstSampleSteps + 1
          : kFirstSampleSteps;
  for (int j = 0; j < 3; ++j) s.layers[j] = rest + s.step * (first + j);
  s.ok = true;
  return gains(s, false);
}

LayerSamples deeper_samples(const LayerSamples& s) {
  LayerSamples d = s;
  for (auto& n : d.layers) n += s.step;
  return gains(d, true);
}

namespace {

// Items by category (costs, unmeasured bases, exposed time by kind): the same categories in
// every sample, each extended, largest first.
std::vector<devices::CostItem> extrapolate_items(Fit& fit, const std::string& what,
                                                 const std::vector<devices::CostItem>& ia,
                                                 const std::vector<devices::CostItem>& ib,
                                                 const std::vector<devices::CostItem>& ic, double floor) {
  auto by_name = [](const std::vector<devices::CostItem>& items) {
    std::map<std::string, double> out;
    for (const auto& it : items) out[it.category] += it.seconds;
    return out;
  };
  const auto ca = by_name(ia), cb = by_name(ib), cc = by_name(ic);
  fit.same(what + " categories", ca.size() == cc.size() && cb.size() == cc.size());
  std::vector<devices::CostItem> list;
  for (const auto& [name, sec] : cc) {
    const std::string label = what + " " + name;
    const bool everywhere = ca.count(name) && cb.count(name);
    fit.same(label, everywhere);
    if (everywhere) list.push_back({name, fit.real(label, ca.at(name), cb.at(name), sec, floor)});
  }
  std::stable_sort(list.begin(), list.end(), [](const auto& p, const auto& q) { return p.seconds > q.seconds; });
  return list;
}

// Report-only items (time by op name) extended by the last two samples' difference, without
// a say in whether the fit holds: an op absent from the shallower sample keeps its value.
std::vector<devices::CostItem> extend_report_items(int64_t ahead, const std::vector<devices::CostItem>& ib,
                                                   const std::vector<devices::CostItem>& ic) {
  std::map<std::string, double> b;
  for (const auto& it : ib) b[it.category] += it.seconds;
  std::vector<devices::CostItem> list;
  for (const auto& it : ic) {
    const auto at = b.find(it.category);
    const double d = at == b.end() ? 0.0 : it.seconds - at->second;
    list.push_back({it.category, std::max(0.0, it.seconds + static_cast<double>(ahead) * d)});
  }
  std::stable_sort(list.begin(), list.end(), [](const auto& p, const auto& q) { return p.seconds > q.seconds; });
  return list;
}

// One replay's report extended: times, counts, streams and costs by category.
devices::StepReport extrapolate_report(Fit& fit, const devices::StepReport& ra, const devices::StepReport& rb,
                                       const devices::StepReport& rc) {
  devices::StepReport r = rc;  // names and strings: the same in every sample
  // Times are compared next to the step time: a part of 1e-17 s is rounding noise.
  const double step = std::abs(rc.step_time_s);
  auto real = [&](const char* name, double devices::StepReport::*m, double floor) {
    r.*m = fit.real(name, ra.*m, rb.*m, rc.*m, floor);
  };
  real("step time", &devices::StepReport::step_time_s, step);
  real("compute busy", &devices::StepReport::compute_s, step);
  real("communication busy", &devices::StepReport::comm_s, step);
  real("exposed communication", &devices::StepReport::exposed_comm_s, step);
  real("idle", &devices::StepReport::idle_s, step);
  real("executed FLOPs", &devices::StepReport::executed_flops, 0);
  r.exposed_comm_fraction = r.step_time_s > 0 ? r.exposed_comm_s / r.step_time_s : 0;
  r.ops = fit.count("ops", ra.ops, rb.ops, rc.ops);
  r.kernels = fit.count("kernels", ra.kernels, rb.kernels, rc.kernels);
  r.collectives = fit.count("collectives", ra.collectives, rb.collectives, rc.collectives);
  fit.same("streams", ra.streams.size() == rc.streams.size() && rb.streams.size() == rc.streams.size());
  for (size_t i = 0; fit.ok() && i < rc.streams.size(); ++i) {
    const std::string& n = rc.streams[i].name;
    fit.same("stream " + n, ra.streams[i].name == n && rb.streams[i].name == n);
    r.streams[i].busy_s =
        fit.real("stream " + n, ra.streams[i].busy_s, rb.streams[i].busy_s, rc.streams[i].busy_s, step);
  }
  r.costs = extrapolate_items(fit, "cost", ra.costs, rb.costs, rc.costs, step);
  r.uncertain = extrapolate_items(fit, "unmeasured basis", ra.uncertain, rb.uncertain, rc.uncertain, step);
  r.op_costs = extend_report_items(fit.ahead(), rb.op_costs, rc.op_costs);
  return r;
}

// A step's memory extended: its state, and its peak as the largest of its parts' peaks, each
// extended on its own (a pipeline rank's peak moves between segments with depth). The ops
// filling the peak are only a report: those whose bytes are affine in depth are extended,
// the others left out.
devices::TraceMemory extrapolate_memory(Fit& fit, const std::string& what, const devices::TraceMemory& a,
                                        const devices::TraceMemory& b, const devices::TraceMemory& c) {
  devices::TraceMemory m;
  m.state_bytes = fit.count(what + " state", a.state_bytes, b.state_bytes, c.state_bytes);
  fit.same(what + " parts", a.parts.size() == c.parts.size() && b.parts.size() == c.parts.size());
  if (!fit.ok()) return m;
  m.parts.resize(c.parts.size());
  for (size_t i = 0; i < c.parts.size(); ++i) {
    const std::string part = what + " part " + std::to_string(i);
    m.parts[i].temporaries =
        fit.count(part + " peak", a.parts[i].temporaries, b.parts[i].temporaries, c.parts[i].temporaries);
    m.parts[i].resized = fit.count(part + " peak buffers", a.parts[i].resized, b.parts[i].resized, c.parts[i].resized);
    if (m.parts[i].temporaries + m.parts[i].resized > m.peak_bytes) {
      m.peak_bytes = m.parts[i].temporaries + m.parts[i].resized;
      m.peak_temporaries = m.parts[i].temporaries;
      m.peak_resized = m.parts[i].resized;
    }
  }
  auto by_name = [](const devices::TraceMemory& x) {
    return std::map<std::string, int64_t>(x.peak_by_op.begin(), x.peak_by_op.end());
  };
  const auto na = by_name(a), nb = by_name(b);
  for (const auto& [name, bytes] : c.peak_by_op) {
    auto ia = na.find(name), ib = nb.find(name);
    if (ia == na.end() || ib == nb.end() || bytes - ib->second != ib->second - ia->second) continue;
    Fit one(fit.ahead());
    m.peak_by_op.emplace_back(name, one.count(name, ia->second, ib->second, bytes));
  }
  std::stable_sort(m.peak_by_op.begin(), m.peak_by_op.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  return m;
}

bool same_segments(const RecordedPipeline& a, const RecordedPipeline& b) {
  if (a.ranks.size() != b.ranks.size() || a.runs != b.runs || a.program != b.program) return false;
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    if (a.ranks[r].size() != b.ranks[r].size()) return false;
    for (size_t i = 0; i < a.ranks[r].size(); ++i) {
      const PipelineSegment &x = a.ranks[r][i], &y = b.ranks[r][i];
      if (x.is_action != y.is_action || x.run != y.run || x.p2p_bytes != y.p2p_bytes ||
          (x.is_action && (x.action.op != y.action.op || x.action.stage != y.action.stage ||
                           x.action.microbatch != y.action.microbatch)))
        return false;
    }
  }
  return true;
}

// Under PP: every segment's cost extended, then the schedule composed again on them.
void extrapolate_pipeline(Fit& fit, const std::array<ReplayFigures, 3>& f, ReplayFigures& out) {
  const ReplayFigures &a = f[0], &b = f[1], &c = f[2];
  fit.same("pipeline segments", a.pipeline_structure && b.pipeline_structure && c.pipeline_structure &&
                                    same_segments(*a.pipeline_structure, *c.pipeline_structure) &&
                                    same_segments(*b.pipeline_structure, *c.pipeline_structure));
  if (!fit.ok()) return;
  const PipelineSegmentCosts &ca = a.segment_costs, &cb = b.segment_costs, &cc = c.segment_costs;
  fit.same("pipeline segment reports", ca.rank0.size() == cc.rank0.size() && cb.rank0.size() == cc.rank0.size());
  if (!fit.ok()) return;
  PipelineSegmentCosts e = cc;
  const double step = std::abs(c.report.step_time_s);
  for (size_t r = 0; r < cc.duration_s.size(); ++r)
    for (size_t i = 0; i < cc.duration_s[r].size(); ++i)
      e.duration_s[r][i] = fit.real("pipeline rank " + std::to_string(r) + " segment " + std::to_string(i),
                                    ca.duration_s[r][i], cb.duration_s[r][i], cc.duration_s[r][i], step);
  fit.same("pipeline segment exposure", ca.rank0_exposed.size() == cc.rank0.size() &&
                                            cb.rank0_exposed.size() == cc.rank0.size() &&
                                            cc.rank0_exposed.size() == cc.rank0.size());
  if (!fit.ok()) return;
  for (size_t i = 0; i < cc.rank0.size(); ++i) {
    e.rank0[i] = extrapolate_report(fit, ca.rank0[i], cb.rank0[i], cc.rank0[i]);
    e.rank0_exposed[i] = extrapolate_items(fit, "exposed", ca.rank0_exposed[i], cb.rank0_exposed[i],
                                           cc.rank0_exposed[i], step);
  }
  if (!fit.ok()) return;
  PipelineReplayReport pr = compose_pipeline_step(*c.pipeline_structure, e, c.options);
  out.report = std::move(pr.report);
  out.rank_busy_s = std::move(pr.rank_busy_s);
  out.bubble_fraction = pr.bubble_fraction;
  out.exposed_by_kind = std::move(pr.exposed_by_kind);
  out.segment_costs = std::move(e);
  for (size_t q = 0; q < c.rank_local_params.size(); ++q) {
    const std::string rank = "pipeline rank " + std::to_string(q);
    out.rank_local_params[q] =
        fit.count(rank + " parameters", a.rank_local_params[q], b.rank_local_params[q], c.rank_local_params[q]);
    out.rank_memory[q] = extrapolate_memory(fit, rank + " memory", a.rank_memory[q], b.rank_memory[q], c.rank_memory[q]);
  }
}

}  // namespace

Extrapolation extrapolate_layers(const LayerSamples& s, const std::array<ReplayFigures, 3>& f) {
  Extrapolation x;
  Fit fit((s.target_layers - s.layers[2]) / s.step);
  const ReplayFigures &a = f[0], &b = f[1], &c = f[2];
  ReplayFigures out = c;  // dims, schedule, strings: the same in every sample
  out.local_params = fit.count("parameters stored", a.local_params, b.local_params, c.local_params);
  fit.same("batch", a.global_batch == c.global_batch && b.global_batch == c.global_batch &&
                        a.microbatches == c.microbatches && b.microbatches == c.microbatches);
  fit.same("pipeline", a.pipeline == c.pipeline && b.pipeline == c.pipeline &&
                           a.pipeline_stages == c.pipeline_stages && b.pipeline_stages == c.pipeline_stages &&
                           a.rank_holds_output == c.rank_holds_output && b.rank_holds_output == c.rank_holds_output);
  if (fit.ok()) {
    if (c.pipeline) extrapolate_pipeline(fit, f, out);
    else {
      out.report = extrapolate_report(fit, a.report, b.report, c.report);
      out.memory = extrapolate_memory(fit, "memory", a.memory, b.memory, c.memory);
      out.exposed_by_kind = extrapolate_items(fit, "exposed", a.exposed_by_kind, b.exposed_by_kind,
                                              c.exposed_by_kind, std::abs(c.report.step_time_s));
    }
  }
  x.ok = fit.ok();
  x.why = fit.why();
  x.figures = std::move(out);
  return x;
}

}  // namespace titan
