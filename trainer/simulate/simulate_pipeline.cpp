// Pipeline-parallel recording (see simulate_pipeline.h): every pipeline rank's step recorded
// on the meta device and cut at its schedule's actions.
#include "trainer/simulate/simulate_pipeline.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

#include "common/error.h"
#include "parallel/context_parallel.h"
#include "parallel/fsdp_observer.h"
#include "trainer/config/resolve_model.h"
#include "trainer/simulate/microbatch_extrapolation.h"
#include "trainer/simulate/pipeline_rank_reuse.h"
#include "trainer/simulate/simulate.h"
#include "trainer/simulate/trace_recorder.h"
#include "trainer/step/parallelize.h"
#include "trainer/step/trainer.h"

namespace titan {
namespace {

// Events [b, e) of a trace as a trace of their own, their ops moved out of `events` (each
// event is in one segment); a wait on work issued before b is dropped (that collective is
// taken as done when the segment starts).
devices::Trace slice(std::vector<devices::TraceEvent>& events, size_t b, size_t e, int64_t* p2p_bytes) {
  devices::Trace out;
  out.reserve(e - b);
  std::unordered_map<int64_t, int64_t> work;
  for (size_t i = b; i < e; ++i) {
    devices::TraceEvent& ev = events[i];
    if (ev.type == devices::TraceEvent::Type::kCompute) {
      out.compute(std::move(ev.op));  // compute() sets the op's index and data flow afresh
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

// What record_rank learns besides the segments: the stage split (every rank's), and where
// in its segments each storage resize was made (to move them with a reused rank's segments).
struct RankExtras {
  std::vector<StageLayers> stages;
  std::vector<ResizePlace> resizes;
};

// Pipeline rank q's step recorded on the meta device, cut at its schedule's actions.
RankExtras record_rank(const JobConfig& cfg, int64_t chips, int64_t q, const RecordOptions& recording,
                       bool walk_memory, RecordedPipeline& out) {
  const int64_t per_stage = chips / static_cast<int64_t>(out.ranks.size());  // pp is the outermost mesh dim
  Trainer trainer(cfg, sim_world(cfg, chips, q * per_stage), /*on_meta=*/true);
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
  std::vector<devices::TraceEvent> events = recorder.take_events();
  const size_t per_run = s.ranks[q].size();
  auto& segs = out.ranks[q];
  size_t pos = 0;
  const size_t none = SIZE_MAX;
  auto plain = [&](size_t b, size_t e, int run) {
    if (e <= b) return none;
    PipelineSegment seg;
    seg.run = run;
    seg.trace = slice(events, b, e, &seg.p2p_bytes);
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
    seg.trace = slice(events, begins[i], ends[i], &seg.p2p_bytes);
    segs.push_back(std::move(seg));
    action_seg[i] = segs.size() - 1;
    pos = ends[i];
  }
  gap_seg[acts.size()] = plain(pos, events.size(), static_cast<int>(out.runs) - 1);
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
  if (walk_memory) out.memory[q] = rank_memory(out, q);
  out.calls[q] = recorder.calls();
  TITAN_CHECK(acts.size() == per_run * static_cast<size_t>(out.runs), "pipeline simulation: rank ", q, " ran ",
              acts.size(), " actions, expected ", per_run, " x ", out.runs);
  return extras;
}

}  // namespace

RecordedPipeline record_pipeline(const JobConfig& cfg, int64_t chips, const RecordOptions& recording,
                                 bool walk_memory) {
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
    // The full schedule, to choose how many micro-batches to record: planned as the trainer
    // plans it, after the checks it makes first (so that a config they refuse is refused with
    // the same error), without building a trainer (a model and its plans: 2% of a study's
    // recording time).
    const ParallelDims d = parallel_dims(cfg, chips);
    check_context_parallel(cfg.training.seq_len, d.cp);
    const ModelArgs args = resolve_model_args(cfg, vocab_without_data(cfg));
    full = plan_pipeline(cfg, args, d.pp, /*fsdp=*/d.fsdp_enabled() || d.dp_replicate > 1).schedule;
    k = recorded_microbatch_count(full);
  }
  const bool extrapolate = k > 0 && k < full.num_microbatches;
  const JobConfig recorded = extrapolate ? with_microbatches(cfg, full.num_microbatches, k) : cfg;
  // A config the trainer refuses after its plan is refused as the trainer refuses cfg itself,
  // not as the fewer micro-batches recorded.
  auto refused_as_configured = [&](const std::exception_ptr& e) {
    if (extrapolate) {
      FsdpObserver* observer = fsdp_observer();
      set_fsdp_observer(nullptr);  // shard_probe.cpp notes one plan per recorded rank
      try {
        Trainer trainer(cfg, sim_world(cfg, chips, 0), /*on_meta=*/true);
      } catch (...) {
        set_fsdp_observer(observer);
        throw;
      }
      set_fsdp_observer(observer);
    }
    std::rethrow_exception(e);
  };
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
      RankExtras e = record_rank(recorded, chips, q, recording, walk_memory, out);
      recorded_for.emplace(key, std::make_pair(r, std::move(e.resizes)));
      continue;
    }
    RankExtras e;
    try {
      e = record_rank(recorded, chips, q, recording, walk_memory, out);
    } catch (...) {
      if (q != 0) throw;
      refused_as_configured(std::current_exception());
    }
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

}  // namespace titan
