// FSDP's shard notes as bytes (see recording_wire_format.h).
#include "trainer/simulate/recording_wire_format.h"

#include <algorithm>

namespace titan::wire {

// As in recording_wire_trace.cpp: a field added to these structs must be carried here too.
static_assert(sizeof(ShardCall) == 128 && sizeof(ShardNotes::Rank) == 112 && sizeof(ShardNotes) == 56,
              "FSDP's shard notes changed: carry the new fields in recording_wire_shard_notes.cpp, then update "
              "these sizes");

void put(Writer& w, const ShardNotes& n) {
  w.list(n.ranks, [&](const ShardNotes::Rank& q) {
    w.i64(q.degree);
    w.i64s(q.numels);
    // By storage id: the same bytes whatever the map's order.
    std::vector<std::pair<int64_t, int64_t>> seeds(q.seeds.begin(), q.seeds.end());
    std::sort(seeds.begin(), seeds.end());
    w.list(seeds, [&](const std::pair<int64_t, int64_t>& s) { w.i64(s.first), w.i64(s.second); });
    w.list(q.calls, [&](const ShardCall& c) {
      w.pod(c.kind);
      w.str(c.group);
      w.i64s(c.numels), w.i64s(c.elem);
      w.list(c.dtypes, [&](at::ScalarType t) { w.pod(t); });
      w.pod(c.padded);
      w.i64(c.position);
    });
  });
  w.str(n.conflict);
}
void get(Reader& r, ShardNotes* n) {
  n->ranks = r.list<ShardNotes::Rank>([&](ShardNotes::Rank& q) {
    q.degree = r.i64();
    q.numels = r.i64s();
    for (size_t i = 0, k = r.count(); i < k; ++i) {
      const int64_t id = r.i64();
      q.seeds[id] = r.i64();
    }
    q.calls = r.list<ShardCall>([&](ShardCall& c) {
      c.kind = r.pod<devices::CollectiveKind>();
      c.group = r.str();
      c.numels = r.i64s(), c.elem = r.i64s();
      c.dtypes = r.list<at::ScalarType>([&](at::ScalarType& t) { t = r.pod<at::ScalarType>(); });
      c.padded = r.pod<bool>();
      c.position = r.i64();
    });
  });
  n->conflict = r.str();
}

}  // namespace titan::wire
