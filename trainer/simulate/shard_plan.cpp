// Following a probe's sizes (see shard_plan.h).
#include "trainer/simulate/shard_plan.h"

#include <algorithm>

#include "common/id_map.h"
#include "trainer/simulate/shard_buckets.h"
#include "trainer/simulate/shard_sizes.h"

namespace titan {

namespace {

using devices::OpKind;
using devices::TraceEvent;

using ById = IdMap<int64_t>;  // storage id -> a count (numel, or 1 for "written")

// The sizes of one rank that follow the shard degree: shard storages found through the data
// flow from FSDP's seeds, every use on them classified, FSDP's collectives matched to the
// trace's issues.
bool plan_rank(const std::vector<const devices::Trace*>& traces, const std::vector<devices::StorageRecord>& storages,
               const std::vector<devices::StorageResize>& resizes, const devices::StepMemory& memory,
               const ShardNotes::Rank& notes, int64_t w, bool fused, int64_t cap, ShardRewrites::Rank* out,
               std::string* why) {
  out->numels = notes.numels;
  out->calls = notes.calls;
  ById numel_of;  // storage id -> parameter numel
  for (const auto& [id, numel] : notes.seeds) numel_of.emplace(id, numel);
  auto cls = [&](const devices::TensorUse& u, int64_t* numel, int64_t* elem) {
    const int64_t* n = numel_of.find(u.id);
    if (!n) return SizeClass::kNone;
    *numel = *n;
    return size_class(u.bytes, *n, w, elem);
  };
  ById written;  // storages some recorded op writes
  for (const devices::Trace* t : traces)
    for (const TraceEvent& ev : t->events())
      if (ev.type == TraceEvent::Type::kCompute)
        for (const auto& u : ev.op.writes) written.emplace(u.id, 1);
  // An op reading shard-sized data writes shard-sized results of the same parameter
  // (optimizer state, casts, norms' squares); repeated until nothing new, since a storage
  // first written in place (an optimizer state) is a shard storage for the whole step.
  for (bool changed = true; changed;) {
    changed = false;
    for (const devices::Trace* t : traces) {
      int64_t last = 0;  // the parameter of the last shard-sized use seen before this op
      for (const TraceEvent& ev : t->events()) {
        if (ev.type != TraceEvent::Type::kCompute) continue;
        const devices::OpDesc& op = ev.op;
        int64_t numel = 0, n = 0, e = 0;
        const bool propagates = op.kind != OpKind::kMatmul && op.kind != OpKind::kAttention;
        // The last classified read's parameter, for `last` below: classifying the reads again
        // there gives the same unless this op's writes named one of them.
        int64_t last_read = 0;
        bool writes_named = false;
        for (const auto& u : op.reads) {
          if (propagates && last != 0 && !numel_of.contains(u.id) && !written.contains(u.id) &&
              size_class(u.bytes, last, w, &e) != SizeClass::kNone) {
            // No recorded op wrote it: its producer was a composite op whose only leaves were
            // bookkeeping (pow's result_type), run just before on the last shard-sized data.
            numel_of.emplace(u.id, last);
            changed = true;
          }
          if (cls(u, &n, &e) == SizeClass::kNone) continue;
          if (numel != 0 && numel != n) return fail(why, op.name + " reads the shards of two parameters");
          numel = last_read = n;
        }
        if (propagates && numel != 0)
          for (const auto& u : op.writes) {
            if (size_class(u.bytes, numel, w, &e) == SizeClass::kNone) continue;
            auto [had, added] = numel_of.emplace(u.id, numel);
            if (added) changed = writes_named = true;
            else if (*had != numel)
              return fail(why, op.name + " writes a storage of another parameter's shard");
          }
        if (writes_named) {
          for (const auto& u : op.reads)
            if (cls(u, &n, &e) != SizeClass::kNone) last = n;
        } else if (last_read != 0) {
          last = last_read;
        }
        for (const auto& u : op.writes)
          if (cls(u, &n, &e) != SizeClass::kNone) last = n;
      }
    }
  }
  // The memory walk's ranges and the storage table: the same classes by storage.
  // The probe's memory walk has them (its ranges, from these traces and tables) unless it was
  // not walked; counts of ops, parts or table entries that differ would mean they came from
  // other traces.
  out->live = memory.own_ranges();
  int64_t ops = 0;
  for (const devices::Trace* t : traces) ops += static_cast<int64_t>(t->compute_ops());
  if (!out->live || out->live->ops != ops || out->live->part_begins.size() != traces.size() ||
      out->live->storages != storages.size() || out->live->resizes != resizes.size())
    out->live = std::make_shared<const devices::LiveRanges>(devices::live_ranges(traces, storages, resizes));
  auto sized = [&](int64_t id, int64_t bytes, uint32_t index, std::vector<ShardRewrites::Rank::Sized>* to) {
    const int64_t* n = numel_of.find(id);
    int64_t e = 0;
    if (!n) return;
    const SizeClass c = size_class(bytes, *n, w, &e);
    if (c != SizeClass::kNone) to->push_back({index, c == SizeClass::kPadded, *n, e});
  };
  for (uint32_t i = 0; i < out->live->ranges.size(); ++i)
    sized(out->live->ranges[i].id, out->live->ranges[i].bytes, i, &out->ranges);
  for (uint32_t i = 0; i < storages.size(); ++i) sized(static_cast<int64_t>(i) + 1, storages[i].bytes, i, &out->storages);
  for (uint32_t i = 0; i < resizes.size(); ++i) sized(resizes[i].id, resizes[i].bytes, i, &out->resizes);
  // Every use on a shard storage of a shard or padded size is rewritten; other sizes there
  // (views of the gathered buffer: the full parameter, embedding rows; norms' scalars) do
  // not follow the degree.
  for (uint32_t ti = 0; ti < traces.size(); ++ti) {
    const auto& events = traces[ti]->events();
    for (uint32_t ei = 0; ei < events.size(); ++ei) {
      const TraceEvent& ev = events[ei];
      if (ev.type != TraceEvent::Type::kCompute) continue;
      const devices::OpDesc& op = ev.op;
      // Sized by something other than its tensors (a fused kernel's scope arguments): whether
      // that follows the shard degree cannot be told.
      if (op.kind != OpKind::kMatmul && op.kind != OpKind::kAttention && op.reads.empty() && op.writes.empty() &&
          (op.bytes_read != 0 || op.bytes_written != 0 || op.flops != 0))
        return fail(why, op.name + " is sized by no tensor it reads or writes");
      bool sized = false;
      for (int pass = 0; pass < 2; ++pass) {
        const auto& uses = pass ? op.writes : op.reads;
        for (uint32_t k = 0; k < uses.size(); ++k) {
          int64_t numel = 0, elem = 0;
          const SizeClass c = cls(uses[k], &numel, &elem);
          if (c == SizeClass::kNone) continue;
          sized = true;
          out->uses.push_back({ti, ei, k, pass == 1, c == SizeClass::kPadded, numel, elem});
        }
      }
      if (!sized) continue;
      if (op.kind == OpKind::kMatmul || op.kind == OpKind::kAttention)
        return fail(why, op.name + " (a matmul or attention) runs on a shard");
      int64_t read = 0, written = 0;
      for (const auto& u : op.reads) read += u.bytes;
      for (const auto& u : op.writes) written += u.bytes;
      if (op.kind == OpKind::kView) {
        if (op.bytes_read != 0 || op.bytes_written != 0 || op.flops != 0)
          return fail(why, op.name + ": a view with traffic");
        continue;
      }
      // The recorder's element-wise figures: bytes of the tensors read and written, one FLOP
      // per element written (trace_recorder.cpp); an op costed otherwise cannot be rescaled.
      if (op.bytes_read != read || op.bytes_written != written ||
          op.flops != static_cast<double>(written) / static_cast<double>(std::max<int64_t>(1, op.dtype_bytes)))
        return fail(why, op.name + ": figures that do not follow from its tensors");
      out->pointwise.push_back({ti, ei});
    }
  }
  // FSDP's collectives against the trace: each call's buckets are the next issues on its
  // group (of its kind) after the issues before it (pipeline segments keep every issue).
  std::vector<std::pair<uint32_t, uint32_t>> at;  // the rank's n-th issue -> (trace, event)
  for (uint32_t ti = 0; ti < traces.size(); ++ti)
    for (uint32_t ei = 0; ei < traces[ti]->events().size(); ++ei)
      if (traces[ti]->events()[ei].type == TraceEvent::Type::kIssue) at.emplace_back(ti, ei);
  std::vector<bool> taken(at.size(), false);
  for (uint32_t c = 0; c < out->calls.size(); ++c) {
    const ShardCall& call = out->calls[c];
    out->buckets.push_back(call_buckets(call, w, fused, cap));
    const std::vector<int64_t> bytes = call_bytes(call, w);
    size_t pos = static_cast<size_t>(call.position);
    for (uint32_t b = 0; b < out->buckets.back().size(); ++b) {
      const int64_t sum = bucket_bytes(bytes, out->buckets.back()[b]);
      for (; pos < at.size(); ++pos) {
        const TraceEvent& ev = traces[at[pos].first]->events()[at[pos].second];
        if (!taken[pos] && ev.collective.group == call.group && ev.collective.kind == call.kind)
          break;
      }
      if (pos == at.size()) return fail(why, "an FSDP collective on " + call.group + " is missing from the trace");
      const TraceEvent& ev = traces[at[pos].first]->events()[at[pos].second];
      if (ev.collective.bytes != sum)
        return fail(why, std::string(devices::collective_name(ev.collective.kind)) + " on " + call.group + ": " +
                             std::to_string(ev.collective.bytes) + " bytes, FSDP's buckets make " +
                             std::to_string(sum));
      taken[pos] = true;
      out->collectives.push_back({at[pos].first, at[pos].second, c, b});
    }
  }
  return true;
}

}  // namespace

const ShardRewrites* shard_rewrites(const ProbeRecording& probe, std::string* why) {
  ShardPlan& plan = *probe.plan;
  std::call_once(plan.once, [&] {
    ShardRewrites& rw = plan.rewrites;
    rw.degree = plan.degree, rw.fused = plan.fused, rw.cap = plan.cap;
    rw.ranks.resize(plan.notes.ranks.size());
    for (size_t q = 0; q < rw.ranks.size(); ++q) {
      const auto traces = rank_traces(probe.step, q);
      const auto* p = probe.step.pipeline.get();
      const auto& storages = p ? p->storages[q] : probe.step.trace.storages();
      const auto& resizes = p ? p->storage_resizes[q] : probe.step.trace.storage_resizes();
      static const devices::StepMemory kNotWalked;
      const devices::StepMemory& memory =
          !p ? probe.step.memory : q < p->memory.size() ? p->memory[q] : kNotWalked;
      if (!plan_rank({traces.begin(), traces.end()}, storages, resizes, memory, plan.notes.ranks[q],
                     rw.degree, rw.fused, rw.cap, &rw.ranks[q], &plan.error)) {
        plan.error = "shard resizing cannot follow this step: " + plan.error;
        return;
      }
    }
  });
  if (!plan.error.empty()) {
    *why = plan.error;
    return nullptr;
  }
  return &plan.rewrites;
}

}  // namespace titan
