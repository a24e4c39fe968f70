// Pipelines as bytes (see recording_wire_format.h).
#include "trainer/simulate/recording_wire_format.h"

namespace titan::wire {

// As in recording_wire_trace.cpp: a field added to these structs must be carried here too.
static_assert(sizeof(RecordedPipeline) == 376 && sizeof(PipelineSegment) == 232 && sizeof(PipeSchedule) == 96,
              "a recorded pipeline's parts changed: carry the new fields in recording_wire_pipeline.cpp, then "
              "update these sizes");

namespace {

void put(Writer& w, const PipeSchedule& s) {
  w.str(s.name);
  w.pod(s.num_ranks), w.pod(s.num_stages), w.pod(s.num_microbatches);
  w.list(s.stage_rank, [&](int x) { w.pod(x); });
  w.list(s.ranks, [&](const std::vector<PipeAction>& a) {
    w.list(a, [&](const PipeAction& x) { w.pod(x); });
  });
}
void get(Reader& r, PipeSchedule* s) {
  s->name = r.str();
  s->num_ranks = r.pod<int>(), s->num_stages = r.pod<int>(), s->num_microbatches = r.pod<int>();
  s->stage_rank = r.list<int>([&](int& x) { x = r.pod<int>(); });
  s->ranks = r.list<std::vector<PipeAction>>([&](std::vector<PipeAction>& a) {
    a = r.list<PipeAction>([&](PipeAction& x) { x = r.pod<PipeAction>(); });
  });
}

}  // namespace

void put(Writer& w, const RecordedPipeline& p) {
  put(w, p.schedule);
  w.i64(p.runs);
  w.list(p.ranks, [&](const std::vector<PipelineSegment>& segs) {
    w.list(segs, [&](const PipelineSegment& s) {
      w.pod(s.is_action), w.pod(s.action), w.pod(s.run);
      put(w, s.trace);
      w.i64(s.p2p_bytes);
    });
  });
  w.list(p.calls, [&](const std::vector<SimCollectiveEvent>& c) { put(w, c); });
  w.i64s(p.local_params);
  // Each rank's storage table and resizes; its memory is walked again on arrival.
  w.list(p.storages, [&](const std::vector<devices::StorageRecord>& t) { put(w, t); });
  w.list(p.storage_resizes, [&](const std::vector<devices::StorageResize>& t) { put(w, t); });
  w.list(p.holds_output, [&](bool b) { w.pod(b); });
  w.i64(p.param_elem_bytes);
  w.pod(p.recorded_microbatches);
  w.list(p.program, [&](const std::vector<ReplayedSegment>& steps) {
    w.list(steps, [&](const ReplayedSegment& x) { w.i64(static_cast<int64_t>(x.segment)), w.pod(x.action), w.pod(x.run); });
  });
  w.list(p.copied_from, [&](int x) { w.pod(x); });
  w.list(p.copied_segment, [&](const std::vector<size_t>& segs) {
    w.list(segs, [&](size_t i) { w.i64(static_cast<int64_t>(i)); });
  });
}
void get(Reader& r, RecordedPipeline* p) {
  get(r, &p->schedule);
  p->runs = r.i64();
  p->ranks = r.list<std::vector<PipelineSegment>>([&](std::vector<PipelineSegment>& segs) {
    segs = r.list<PipelineSegment>([&](PipelineSegment& s) {
      s.is_action = r.pod<bool>(), s.action = r.pod<PipeAction>(), s.run = r.pod<int>();
      get(r, &s.trace);
      s.p2p_bytes = r.i64();
    });
  });
  p->calls = r.list<std::vector<SimCollectiveEvent>>([&](std::vector<SimCollectiveEvent>& c) { get(r, &c); });
  p->local_params = r.i64s();
  p->storages = r.list<std::vector<devices::StorageRecord>>([&](std::vector<devices::StorageRecord>& t) { get(r, &t); });
  p->storage_resizes =
      r.list<std::vector<devices::StorageResize>>([&](std::vector<devices::StorageResize>& t) { get(r, &t); });
  TITAN_CHECK(p->storages.size() == p->ranks.size() && p->storage_resizes.size() == p->ranks.size(),
              "recording message: storage tables for ", p->storages.size(), " of ", p->ranks.size(),
              " pipeline ranks");
  p->memory.resize(p->ranks.size());
  for (size_t q = 0; q < p->ranks.size(); ++q) p->memory[q] = rank_memory(*p, q);
  const std::vector<char> holds = r.list<char>([&](char& b) { b = r.pod<bool>(); });
  p->holds_output.assign(holds.begin(), holds.end());
  p->param_elem_bytes = r.i64();
  p->recorded_microbatches = r.pod<int>();
  p->program = r.list<std::vector<ReplayedSegment>>([&](std::vector<ReplayedSegment>& steps) {
    steps = r.list<ReplayedSegment>([&](ReplayedSegment& x) {
      const int64_t i = r.i64();
      TITAN_CHECK(i >= 0, "recording message: a replayed segment index ", i);
      x.segment = static_cast<size_t>(i), x.action = r.pod<PipeAction>(), x.run = r.pod<int>();
    });
  });
  TITAN_CHECK(p->program.size() == p->ranks.size(), "recording message: programs for ", p->program.size(), " of ",
              p->ranks.size(), " pipeline ranks");
  for (size_t q = 0; q < p->ranks.size(); ++q)
    for (const ReplayedSegment& x : p->program[q])
      TITAN_CHECK(x.segment < p->ranks[q].size(), "recording message: pipeline rank ", q, " replays segment ",
                  x.segment, " of ", p->ranks[q].size());
  p->copied_from = r.list<int>([&](int& x) { x = r.pod<int>(); });
  p->copied_segment = r.list<std::vector<size_t>>([&](std::vector<size_t>& segs) {
    segs = r.list<size_t>([&](size_t& i) {
      const int64_t v = r.i64();
      TITAN_CHECK(v >= 0, "recording message: a copied segment index ", v);
      i = static_cast<size_t>(v);
    });
  });
  if (p->copied_from.empty() && p->copied_segment.empty()) {  // a pipeline put together by hand: none copied
    p->copied_from.assign(p->ranks.size(), -1);
    p->copied_segment.resize(p->ranks.size());
  }
  TITAN_CHECK(p->copied_from.size() == p->ranks.size() && p->copied_segment.size() == p->ranks.size(),
              "recording message: reuse entries for ", p->copied_from.size(), " of ", p->ranks.size(), " pipeline ranks");
  for (size_t q = 0; q < p->ranks.size(); ++q) {
    const int from = p->copied_from[q];
    if (from < 0) continue;
    TITAN_CHECK(static_cast<size_t>(from) < q && p->copied_segment[q].size() == p->ranks[q].size(),
                "recording message: pipeline rank ", q, " copies rank ", from, " with ", p->copied_segment[q].size(),
                " of ", p->ranks[q].size(), " segments");
    for (size_t i : p->copied_segment[q])
      TITAN_CHECK(i < p->ranks[from].size(), "recording message: pipeline rank ", q, " copies segment ", i, " of ",
                  p->ranks[from].size());
  }
}

}  // namespace titan::wire
