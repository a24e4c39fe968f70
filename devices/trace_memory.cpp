#include "devices/trace_memory.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>

#include "common/error.h"
#include "common/id_map.h"

namespace titan::devices {

namespace {

// The storage a copy_ widens into `dst` (bf16 -> fp32: it reads fewer bytes than it writes),
// 0 if the op is no such cast.
int64_t widened_source(const OpDesc& op, const TensorUse& dst) {
  static const InternedName copy_("aten::copy_");  // compared by address: one per name
  if (op.name != copy_) return 0;
  const TensorUse* src = nullptr;
  for (const TensorUse& r : op.reads) {
    if (r.id <= 0 || r.id == dst.id) continue;
    if (src) return 0;
    src = &r;
  }
  return src && src->bytes > 0 && src->bytes < dst.bytes ? src->id : 0;
}

}  // namespace

LiveRanges live_ranges(const std::vector<const Trace*>& parts, const std::vector<StorageRecord>& storages,
                       const std::vector<StorageResize>& resizes) {
  struct Seen {
    int64_t first = -1, last = -1, bytes = 0;
    const std::string* maker = nullptr;
    bool maker_writes = false;  // maker: the first op that wrote it with data, not a view or an allocation
    int64_t made_at = -1;       // the maker's op
    int64_t cast_of = 0;        // the maker is a widening copy_ of this storage (LiveRange::cast_of)
    int64_t rewrite_at = -1;    // the last op after the maker that wrote it again
    bool made_by_matmul = false;
    int64_t next_at = -1;       // the first op after the maker that touches it, views aside
    bool next_adds = false;     // that op is an add (a gradient accumulation)
  };
  std::vector<Seen> seen(storages.size() + 1);
  // Interned: compared by address per use (as text, about a fifth of this walk's instructions).
  static const InternedName add("aten::add"), add_("aten::add_");
  LiveRanges out;
  out.storages = storages.size();
  out.resizes = resizes.size();
  // The ops that touch each resized storage, in order (LiveRange::use_from / use_to); found
  // per tensor use through a vector by id (ids are 1, 2, ...; any other hashed).
  IdMap<std::vector<int64_t>> touches;
  for (const StorageResize& r : resizes) touches.emplace(r.id, {});
  // Each op's run of element-wise ops (-1: none), as the replay lowers them: a run ends at an
  // op of another kind and at every collective issue or wait (step_simulator.cpp).
  std::vector<int64_t> run;
  int64_t runs = 0;
  bool in_run = false;
  for (const Trace* t : parts) {
    out.part_begins.push_back(out.ops);
    in_run = false;
    for (const TraceEvent& e : t->events()) {
      if (e.type != TraceEvent::Type::kCompute) {
        in_run = false;
        continue;
      }
      const int64_t at = out.ops++;
      const bool fusable = e.op.kind == OpKind::kElementwise || e.op.kind == OpKind::kReduction ||
                           e.op.kind == OpKind::kView;
      if (fusable && !in_run) ++runs;
      in_run = fusable;
      run.push_back(fusable ? runs : -1);
      for (const auto* uses : {&e.op.reads, &e.op.writes})
        for (const TensorUse& u : *uses) {
          if (u.id <= 0) continue;
          const size_t i = static_cast<size_t>(u.id);
          if (i >= seen.size()) seen.resize(i + 1);  // not in the table: sized by its largest use
          Seen& s = seen[i];
          if (s.first < 0) s.first = at, s.maker = &e.op.name.str();
          // Named after the op that put data in it: a cast or copy, not the allocation inside
          // it (aten::empty_strided) or a view of it.
          if (uses == &e.op.writes && e.op.kind != OpKind::kView) {
            if (!s.maker_writes) {
              s.maker = &e.op.name.str(), s.maker_writes = true, s.made_at = at;
              s.made_by_matmul = e.op.kind == OpKind::kMatmul;
              s.cast_of = widened_source(e.op, u);
            } else if (at != s.made_at) {
              s.rewrite_at = at;
            }
          }
          if (s.made_at >= 0 && at > s.made_at && s.next_at < 0 && e.op.kind != OpKind::kView)
            s.next_at = at, s.next_adds = e.op.name == add_ || e.op.name == add;
          s.last = at;
          s.bytes = std::max(s.bytes, u.bytes);
          if (auto* t = touches.find(u.id); t && (t->empty() || t->back() != at)) t->push_back(at);
        }
    }
  }

  std::unordered_map<const std::string*, uint32_t> maker_index;  // by interned name: one address each
  auto maker = [&](const std::string* name) -> uint32_t {
    if (!name) return 0;
    auto [it, added] = maker_index.try_emplace(name, static_cast<uint32_t>(out.makers.size()));
    if (added) out.makers.push_back(*name);
    return it->second;
  };
  std::map<int64_t, std::vector<const StorageResize*>> resized;
  for (const StorageResize& r : resizes) resized[r.id].push_back(&r);
  for (size_t i = 1; i < seen.size(); ++i) {
    const int64_t id = static_cast<int64_t>(i);
    const StorageRecord rec = i <= storages.size() ? storages[i - 1] : StorageRecord{seen[i].bytes, false};
    if (auto it = resized.find(id); it != resized.end()) {
      // A buffer the plan resizes: empty before a first refill (freed since the last step),
      // at its recorded size from its first use before a first free (a collective's input
      // released when the collective completes); then each size until the next resize.
      auto& rs = it->second;
      std::stable_sort(rs.begin(), rs.end(), [](auto* a, auto* b) { return a->at_op < b->at_op; });
      const bool freed_first = rs.front()->bytes == 0;
      int64_t size = freed_first ? rec.bytes : 0, from = freed_first ? std::max<int64_t>(0, seen[i].first) : 0;
      const std::vector<int64_t>& used = *touches.find(id);  // every resized id has an entry
      auto piece = [&](int64_t to) {
        if (size <= 0 || to <= from) return;
        LiveRange r{LiveRange::Kind::kResized, 0, id, from, to, size};
        auto first = std::lower_bound(used.begin(), used.end(), from), last = std::lower_bound(first, used.end(), to);
        r.use_from = r.use_to = from;
        if (first != last) r.use_from = *first, r.use_to = *(last - 1) + 1;
        out.ranges.push_back(r);
      };
      for (const StorageResize* r : rs) {
        piece(r->at_op);
        size = r->bytes, from = r->at_op;
      }
      piece(out.ops);
    } else if (rec.outlives_step) {
      out.ranges.push_back({LiveRange::Kind::kState, 0, id, 0, out.ops, rec.bytes});
    } else if (seen[i].first >= 0) {
      const Seen& s = seen[i];
      const int64_t r = run[static_cast<size_t>(s.first)];
      LiveRange range{LiveRange::Kind::kTemporary, maker(s.maker), id, s.first, s.last + 1,
                      rec.bytes, r >= 0 && r == run[static_cast<size_t>(s.last)]};
      // A pure cast: never written again after the copy that made it.
      if (s.rewrite_at < 0) range.cast_of = s.cast_of;
      // A matmul's output (a weight gradient) left untouched until an add accumulates the
      // next contribution into it: a tied weight's gradient, held across the backward.
      if (s.made_by_matmul && s.next_adds && s.next_at > s.made_at + 1)
        range.idle_from = s.made_at + 1, range.idle_to = s.next_at;
      out.ranges.push_back(range);
    }
  }
  return out;
}

namespace {

// Calls each(range, bytes) for every range in order, with its bytes as overridden.
template <class Each>
void each_range(const LiveRanges& live, const std::vector<ByteOverride>& overrides, Each each) {
  size_t k = 0;
  for (size_t i = 0; i < live.ranges.size(); ++i) {
    const bool over = k < overrides.size() && overrides[k].index == i;
    each(live.ranges[i], over ? overrides[k++].bytes : live.ranges[i].bytes);
  }
  TITAN_CHECK(k == overrides.size(), "memory walk: byte override ", k, " (range ", overrides[k].index, " of ",
              live.ranges.size(), ") is out of order, repeated or past the last range");
}

// Under XLA's buffer rules (per_use): each storage a fused widening cast reads, with the op
// it must stay live until (one past the cast's last use). A cast of a state (a parameter) or
// of a buffer the plan resizes is left as it is.
std::unordered_map<int64_t, int64_t> cast_sources(const LiveRanges& live) {
  std::unordered_map<int64_t, int64_t> temporaries, until;
  for (const LiveRange& r : live.ranges)
    if (r.kind == LiveRange::Kind::kTemporary) temporaries[r.id] = r.to;
  for (const LiveRange& r : live.ranges)
    if (r.kind == LiveRange::Kind::kTemporary && r.cast_of && temporaries.count(r.cast_of)) {
      int64_t& to = until.try_emplace(r.cast_of, temporaries[r.cast_of]).first->second;
      to = std::max(to, r.to);
    }
  return until;
}

}  // namespace

TraceMemory walk_memory(const LiveRanges& live, bool fused, const std::vector<ByteOverride>& overrides, bool per_use) {
  const int64_t n = live.ops;
  // Live bytes as differences at op positions: +bytes where a range starts, -bytes where it ends.
  std::vector<int64_t> temp(static_cast<size_t>(n) + 1, 0), resized(static_cast<size_t>(n) + 1, 0);
  TraceMemory m;
  // per_use: the bytes of the resized buffers whose use starts at each op; the next of them
  // after an op is in flight (gathered ahead) while it runs.
  std::vector<int64_t> starts(per_use ? static_cast<size_t>(n) + 1 : 0, 0);
  const std::unordered_map<int64_t, int64_t> kept_for_casts = per_use ? cast_sources(live) : std::unordered_map<int64_t, int64_t>{};
  // Calls piece(from, to) for each stretch a range holds memory over in this walk.
  auto pieces = [&](const LiveRange& r, auto piece) {
    if (fused && r.inside_fusion) return;
    if (r.kind == LiveRange::Kind::kResized) {
      piece(per_use ? r.use_from : r.from, per_use ? r.use_to : r.to);
      return;
    }
    if (per_use && r.cast_of && kept_for_casts.count(r.cast_of)) return;  // fused into its consumers
    int64_t to = r.to;
    if (auto k = kept_for_casts.find(r.id); per_use && k != kept_for_casts.end()) to = std::max(to, k->second);
    if (per_use && r.idle_from < r.idle_to) {
      piece(r.from, r.idle_from);
      piece(r.idle_to, to);
      return;
    }
    piece(r.from, to);
  };
  each_range(live, overrides, [&](const LiveRange& r, int64_t bytes) {
    if (r.kind == LiveRange::Kind::kState) {
      m.state_bytes += bytes;
      return;
    }
    const bool by_use = per_use && r.kind == LiveRange::Kind::kResized;
    if (by_use && bytes > 0 && r.use_from < r.use_to) starts[static_cast<size_t>(std::clamp<int64_t>(r.use_from, 0, n))] += bytes;
    if (bytes <= 0) return;
    auto& d = r.kind == LiveRange::Kind::kResized ? resized : temp;
    pieces(r, [&](int64_t from, int64_t to) {
      from = std::clamp<int64_t>(from, 0, n), to = std::clamp<int64_t>(to, 0, n);
      if (from >= to) return;
      d[static_cast<size_t>(from)] += bytes;
      d[static_cast<size_t>(to)] -= bytes;
    });
  });
  std::vector<int64_t> ahead(starts.size(), 0);  // the next buffer's bytes after each op
  for (int64_t at = static_cast<int64_t>(starts.size()) - 2, next = 0; at >= 0; --at) {
    if (starts[static_cast<size_t>(at) + 1] > 0) next = starts[static_cast<size_t>(at) + 1];
    ahead[static_cast<size_t>(at)] = next;
  }
  int64_t t = 0, b = 0;
  m.parts.resize(live.part_begins.size());
  size_t part = 0;
  for (int64_t at = 0; at < n; ++at) {
    while (part + 1 < live.part_begins.size() && live.part_begins[part + 1] <= at) ++part;
    t += temp[static_cast<size_t>(at)], b += resized[static_cast<size_t>(at)];
    const int64_t bb = b + (per_use ? ahead[static_cast<size_t>(at)] : 0);
    if (t + bb > m.peak_bytes) m.peak_bytes = t + bb, m.peak_temporaries = t, m.peak_resized = bb, m.peak_op = at;
    TraceMemory::Part& p = m.parts[part];
    if (t + bb > p.temporaries + p.resized) p = {t, bb};
  }

  std::vector<int64_t> by_maker(live.makers.size(), 0);
  each_range(live, overrides, [&](const LiveRange& r, int64_t bytes) {
    if (r.kind != LiveRange::Kind::kTemporary) return;
    pieces(r, [&](int64_t from, int64_t to) {
      if (from <= m.peak_op && m.peak_op < to) by_maker[r.maker] += bytes;
    });
  });
  for (size_t i = 0; i < by_maker.size(); ++i)
    if (by_maker[i] > 0) m.peak_by_op.emplace_back(live.makers[i], by_maker[i]);
  std::stable_sort(m.peak_by_op.begin(), m.peak_by_op.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return m;
}

struct StepMemory::Walks {
  std::shared_ptr<const LiveRanges> live;
  std::vector<ByteOverride> overrides;
  std::once_flag once[4];
  TraceMemory walked[4];  // eager, fused; each with resized buffers per use
};

StepMemory::StepMemory(std::shared_ptr<const LiveRanges> live, std::vector<ByteOverride> overrides)
    : walks_(std::make_shared<Walks>()) {
  TITAN_CHECK(live, "memory walk: no live ranges");
  walks_->live = std::move(live);
  walks_->overrides = std::move(overrides);
}

std::shared_ptr<const LiveRanges> StepMemory::own_ranges() const {
  return walks_ && walks_->overrides.empty() ? walks_->live : nullptr;
}

const TraceMemory& StepMemory::of(bool fused_elementwise, bool per_use) const {
  static const TraceMemory kNone;
  if (!walks_) return kNone;
  Walks& w = *walks_;
  const int mode = (fused_elementwise ? 1 : 0) + (per_use ? 2 : 0);
  std::call_once(w.once[mode],
                 [&] { w.walked[mode] = walk_memory(*w.live, fused_elementwise, w.overrides, per_use); });
  return w.walked[mode];
}

}  // namespace titan::devices
