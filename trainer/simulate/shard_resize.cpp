// Shard resizing (see shard_resize.h): a probe's recording rewritten for another dp_shard
// degree, into a fresh copy or, when it held this probe at the same bucket split, in place.
// The probe is chosen and recorded in shard_probe.cpp, its sizes followed in shard_plan.cpp,
// issues and waits rebuilt for another bucket split in shard_rebucket.cpp.
#include "trainer/simulate/shard_resize.h"

#include <algorithm>

#include "devices/trace_memory.h"
#include "trainer/simulate/shard_buckets.h"
#include "trainer/simulate/shard_plan.h"
#include "trainer/simulate/shard_rebucket.h"
#include "trainer/simulate/shard_sizes.h"
#include "trainer/step/trainer.h"

namespace titan {

using devices::TraceEvent;

namespace {

using CallSplits = Split::value_type;  // one rank's: per call, its buckets

// Whether each call's split at the new degree differs from the probe's, compared once per call
// (separate mode issues a collective per tensor: compared per collective, it was quadratic).
std::vector<char> resplit_calls(const ShardRewrites::Rank& r, const CallSplits& buckets) {
  std::vector<char> resplit(r.calls.size());
  for (size_t k = 0; k < r.calls.size(); ++k) resplit[k] = buckets[k] != r.buckets[k];
  return resplit;
}

// The traces of rank q that rebucketing moved (where) or moves at this split (buckets), as
// the probe recorded them again; where then says nothing moved.
void restore_moved(const ProbeRecording& probe, size_t q, const ShardRewrites::Rank& r, const CallSplits& buckets,
                   const std::vector<std::vector<TraceEvent>*>& events, ResizedLayout::Rank* where) {
  std::vector<bool> again(events.size(), false);
  for (uint32_t ti = 0; ti < where->moved.size() && ti < events.size(); ++ti) again[ti] = !where->moved[ti].empty();
  const std::vector<char> resplit = resplit_calls(r, buckets);
  for (const auto& c : r.collectives)
    if (resplit[c.call]) again[c.trace] = true;
  const auto recorded = rank_traces(probe.step, q);
  for (size_t ti = 0; ti < events.size(); ++ti)
    if (again[ti]) *events[ti] = recorded[ti]->events();
  *where = ResizedLayout::Rank{};
}

}  // namespace

bool resize_for_shard_degree(const ProbeRecording& probe, const JobConfig& cfg, RecordedStep* out,
                             std::string* why, ResizeState* state) {
  const ShardRewrites* rewrites = shard_rewrites(probe, why);
  if (!rewrites) return false;
  const ShardRewrites& rw = *rewrites;
  const ParallelDims d = parallel_dims(cfg, cfg.simulation.num_chips);
  const ParallelDims& pd = probe.step.dims;
  if (pd.dp_replicate != d.dp_replicate || pd.tp != d.tp || pd.pp != d.pp || pd.cp != d.cp)
    return fail(
        why, "the probe's other degrees differ (" + pd.to_string() + " vs " + d.to_string() + ")");
  if (rw.fused != (cfg.comm.collective_mode == CollectiveMode::kFused) || rw.cap != cap_bytes(cfg))
    return fail(why, "the probe's collective mode or bucket cap differ");
  const int64_t w = d.dp_shard, w0 = rw.degree;
  if (w < 2) return fail(why, "no shard degree to resize to");
  // Each call's buckets at w; a call whose split changes gets its issues and waits rebuilt.
  Split buckets(rw.ranks.size());
  for (size_t q = 0; q < rw.ranks.size(); ++q)
    for (const ShardCall& c : rw.ranks[q].calls)
      buckets[q].push_back(call_buckets(c, w, rw.fused, rw.cap));
  // Whether *out holds this probe's events as split at w, with another degree's sizes: every
  // size below is then written as an absolute value, and the two relative ones start from the
  // probe's.
  const bool holds_probe = state && state->plan == probe.plan && state->layout &&
                           !out->pipeline == !probe.step.pipeline &&
                           (!out->pipeline || out->pipeline.use_count() == 1);
  const bool in_place = holds_probe && state->layout->split == buckets;
  // The same probe at another split: only the traces rebucketing moved, or moves now, are
  // copied from the probe again (a pipeline rank's other segments stay); then as in place.
  const bool restore = holds_probe && !in_place;
  std::shared_ptr<ResizedLayout> layout;
  if (state) {
    layout = in_place || restore ? state->layout : std::make_shared<ResizedLayout>();
    state->plan.reset(), state->layout.reset();  // until this resize is done
    state->last_in_place = in_place;
  }
  if (!in_place && !restore && layout) {
    layout->split = buckets;
    layout->ranks.assign(rw.ranks.size(), {});
  }
  if (restore) layout->split = buckets;
  ResizedLayout::Rank scratch;  // where rebucket's events went, when no state keeps it

  // Assigned, not constructed: a step resized before (study/recording_cache.cpp reuses them)
  // keeps its buffers, so a resize allocates little. Its pipeline is reused only if nothing
  // else holds it (replays keep the structure they replayed).
  if (in_place || restore) {
    out->local_params = probe.step.local_params;
    out->global_batch = probe.step.global_batch;
    if (out->pipeline) out->pipeline->local_params = probe.step.pipeline->local_params;
  } else {
    std::shared_ptr<RecordedPipeline> pipeline = std::move(out->pipeline);
    *out = probe.step;
    if (probe.step.pipeline) {
      if (!pipeline || pipeline.use_count() != 1) pipeline = std::make_shared<RecordedPipeline>();
      *pipeline = *probe.step.pipeline;
      out->pipeline = std::move(pipeline);
    }
  }
  auto resized = [&](int64_t numel, bool padded, int64_t elem) { return shard_bytes(numel, padded, elem, w); };
  for (size_t q = 0; q < rw.ranks.size(); ++q) {
    const ShardRewrites::Rank& r = rw.ranks[q];
    // Trace offers its events read-only; this copy is ours and only sizes change (the data
    // flow between ops stays), so they are written in place.
    std::vector<std::vector<TraceEvent>*> events;
    const std::vector<devices::Trace*> traces = rank_traces(*out, q);
    for (devices::Trace* t : traces) events.push_back(const_cast<std::vector<TraceEvent>*>(&t->events()));
    ResizedLayout::Rank& where = layout ? layout->ranks[q] : scratch;
    if (restore) restore_moved(probe, q, r, buckets[q], events, &where);
    // A probe event where it is now: rebucket moved the events of the traces it rebuilt. A
    // trace whose sizes follow the degree is no longer the probe's, so its name goes; the
    // others keep the probe's (every trace rebucketing moves holds a collective of r's). Its
    // ops are renamed as resized (Trace::ops_id), and those whose sizes are written marked.
    auto at = [&](uint32_t ti, uint32_t ei) -> TraceEvent& {
      traces[ti]->set_content_id(0);
      traces[ti]->mark_ops_resized();
      const bool moved = in_place && ti < where.moved.size() && !where.moved[ti].empty();
      return (*events[ti])[moved ? where.moved[ti][ei] : ei];
    };
    for (const auto& u : r.uses) {
      devices::OpDesc& op = at(u.trace, u.event).op;
      (u.write ? op.writes : op.reads)[u.slot].bytes = resized(u.numel, u.padded, u.elem);
      op.resized = true;
    }
    for (const auto& p : r.pointwise) {
      devices::OpDesc& op = at(p.trace, p.event).op;
      op.resized = true;
      op.bytes_read = op.bytes_written = 0;
      for (const auto& u : op.reads) op.bytes_read += u.bytes;
      for (const auto& u : op.writes) op.bytes_written += u.bytes;
      op.flops = static_cast<double>(op.bytes_written) /
                 static_cast<double>(std::max<int64_t>(1, op.dtype_bytes));
    }
    // Each call's tensor sizes at w, worked out once: separate mode issues a collective per
    // tensor, and each asked for the whole call's sizes (quadratic in the call's tensors).
    std::vector<std::vector<int64_t>> sizes_at_w(r.calls.size());
    auto call_sizes = [&](size_t call) -> const std::vector<int64_t>& {
      if (sizes_at_w[call].empty()) sizes_at_w[call] = call_bytes(r.calls[call], w);
      return sizes_at_w[call];
    };
    const std::vector<char> resplit = resplit_calls(r, buckets[q]);
    bool split_changes = false;
    for (const auto& c : r.collectives) {
      if (resplit[c.call]) {
        split_changes = true;
        traces[c.trace]->set_content_id(0);  // rebuilt below
        continue;
      }
      at(c.trace, c.event).collective.bytes = bucket_bytes(call_sizes(c.call), r.buckets[c.call][c.bucket]);
    }
    if (split_changes && in_place) {
      for (const auto& n : where.issued) {  // the issues rebucket made, at this degree's sizes
        (*events[n.trace])[n.event].collective.bytes =
            bucket_bytes(call_sizes(n.call), buckets[q][n.call][n.bucket]);
      }
    } else if (split_changes && !rebucket(r, buckets[q], w, events, &where, why)) {
      return false;
    }
    // The memory: the probe's ranges at this degree's sizes, walked when a replay asks for
    // it; the storage table follows for whoever walks the trace itself.
    std::vector<devices::ByteOverride> sized;
    sized.reserve(r.ranges.size());
    for (const auto& z : r.ranges) sized.push_back({z.index, resized(z.numel, z.padded, z.elem)});
    auto& table = out->pipeline ? out->pipeline->storages[q] : out->trace.storages();
    auto& resizes =
        out->pipeline ? out->pipeline->storage_resizes[q] : out->trace.storage_resizes();
    for (const auto& z : r.storages) table[z.index].bytes = resized(z.numel, z.padded, z.elem);
    for (const auto& z : r.resizes) resizes[z.index].bytes = resized(z.numel, z.padded, z.elem);
    (out->pipeline ? out->pipeline->memory[q] : out->memory) = devices::StepMemory(r.live, std::move(sized));
    int64_t params = 0;
    for (int64_t n : r.numels) params += shard_len(n, w) - shard_len(n, w0);
    if (out->pipeline)
      out->pipeline->local_params[q] += params;
    else
      out->local_params += params;
  }
  if (out->pipeline)
    out->local_params =
        *std::max_element(out->pipeline->local_params.begin(), out->pipeline->local_params.end());
  // The data-parallel degree scales the global batch (the per-rank batch is the probe's).
  if (out->global_batch % w0 != 0)
    return fail(why, "the probe's global batch does not split by its degree");
  out->global_batch = out->global_batch / w0 * w;
  out->dims = d;
  if (state) {
    state->plan = probe.plan;
    state->layout = std::move(layout);
  }
  return true;
}

}  // namespace titan
