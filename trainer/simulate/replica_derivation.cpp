// Replica derivation (see replica_derivation.h).
#include "trainer/simulate/replica_derivation.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "trainer/simulate/shard_notes.h"
#include "trainer/simulate/shard_plan.h"
#include "trainer/step/trainer.h"

namespace titan {
namespace {

const char* const kReplicaGroup = "dp_replicate";
using Type = devices::TraceEvent::Type;

// A replica all-reduce whose reduce-scatter wait moves: at dp_replicate 2 the unit's
// reduce-scatter is waited and its inputs released (FsdpUnit::start_replicate_reduce) as the
// next unit's reduce-scatter is issued; at dp_replicate 1 both happen in complete_reduce, where
// the dp_replicate 2 step waits the all-reduce instead. Compute-op positions are the rank's.
struct MovedRelease {
  int64_t from_op = 0;  // compute ops before the all-reduce's issue (the releases precede it)
  int64_t to_op = 0;    // compute ops before the all-reduce's wait
  int64_t order = 0;    // the wait's place among the rank's events, to order releases moved to one gap
  const ShardCall* call = nullptr;
};

// t (one trace of a rank: the step's or a pipeline segment's) without its collectives on the
// replica group, rebuilt through the Trace API (handles numbered as a recording without them
// numbers them; the data flow derived again). An all-reduce issued and waited with nothing
// between is removed where it stands (separate collectives, or HSDP's last unit in fused
// mode); one waited later has the reduce-scatter waits just before its issue moved to its
// wait, which they replace (`moved` gets the releases to move with them). Throws where the
// events do not have that shape. issues / ops / events: the rank's before t.
devices::Trace without_replica_collectives(const devices::Trace& t, const std::vector<const ShardCall*>& replica_calls,
                                           int64_t issues, int64_t ops, int64_t events,
                                           std::vector<MovedRelease>* moved) {
  const std::vector<devices::TraceEvent>& ev = t.events();
  const size_t n = ev.size();
  std::map<int64_t, size_t> issue_at;  // handle -> its issue event
  std::vector<int64_t> ops_before(n);
  struct Call {
    std::vector<size_t> issues, waits;
  };
  std::map<size_t, Call> calls;         // by index in replica_calls
  std::map<size_t, size_t> call_of;     // a replica issue event -> its call
  for (size_t i = 0; i < n; ++i) {
    ops_before[i] = ops;
    if (ev[i].type == Type::kCompute) {
      ++ops;
    } else if (ev[i].type == Type::kIssue) {
      issue_at[ev[i].work] = i;
      if (ev[i].collective.group == kReplicaGroup) {
        // The FSDP call it belongs to: the last one noted at or before this issue.
        size_t c = replica_calls.size();
        while (c > 0 && replica_calls[c - 1]->position > issues) --c;
        TITAN_CHECK(c > 0, "replica derivation: an issue on ", kReplicaGroup, " that FSDP did not note");
        calls[c - 1].issues.push_back(i);
        call_of[i] = c - 1;
      }
      ++issues;
    }
  }
  auto issue_of = [&](size_t wait) -> const devices::TraceEvent* {
    auto it = issue_at.find(ev[wait].work);
    return it == issue_at.end() ? nullptr : &ev[it->second];
  };
  std::vector<int> waits_on(n, 0);  // per issue event: the waits on it
  for (size_t i = 0; i < n; ++i) {
    if (ev[i].type != Type::kWait) continue;
    auto it = issue_at.find(ev[i].work);
    if (it == issue_at.end()) continue;
    ++waits_on[it->second];
    if (auto c = call_of.find(it->second); c != call_of.end()) calls[c->second].waits.push_back(i);
  }
  std::vector<char> drop(n, 0);
  std::map<size_t, std::vector<size_t>> instead;  // a moved all-reduce's first wait -> the waits moved there
  for (auto& [c, call] : calls) {
    TITAN_CHECK(call.waits.size() == call.issues.size(), "replica derivation: an all-reduce on ", kReplicaGroup,
                " waited ", call.waits.size(), " times over ", call.issues.size(), " issues in one trace");
    for (size_t i : call.issues) drop[i] = 1;
    for (size_t i : call.waits) drop[i] = 1;
    const size_t first = call.issues.front(), last = call.waits.back();
    bool in_place = true;
    for (size_t i = first; i <= last; ++i) in_place = in_place && drop[i];
    if (in_place) continue;
    // Issued as another unit's reduce-scatter went out, waited in complete_reduce: its issues
    // one run, its waits one run, and just before the issues the waits of this unit's
    // reduce-scatter, each its only wait.
    TITAN_CHECK(call.issues.back() - first + 1 == call.issues.size() &&
                    last - call.waits.front() + 1 == call.waits.size() && call.issues.back() < call.waits.front(),
                "replica derivation: an all-reduce's issues or waits are not together");
    size_t b = first;
    while (b > 0 && ev[b - 1].type == Type::kWait) --b;
    TITAN_CHECK(b < first && b > 0 && ev[b - 1].type == Type::kIssue,
                "replica derivation: no reduce-scatter wait before a replica all-reduce");
    std::vector<size_t> moved_waits;
    for (size_t i = b; i < first; ++i) {
      const devices::TraceEvent* is = issue_of(i);
      TITAN_CHECK(is && is->collective.group != kReplicaGroup &&
                      is->collective.kind == devices::CollectiveKind::kReduceScatter &&
                      waits_on[issue_at.at(ev[i].work)] == 1 && !drop[i],
                  "replica derivation: a wait before a replica all-reduce that is not its reduce-scatter's");
      drop[i] = 1;
      moved_waits.push_back(i);
    }
    TITAN_CHECK(ops_before[first] < ops_before[call.waits.front()],
                "replica derivation: a replica all-reduce waited with no compute op since its issue");
    instead[call.waits.front()] = std::move(moved_waits);
    moved->push_back({ops_before[first], ops_before[call.waits.front()],
                      events + static_cast<int64_t>(call.waits.front()), replica_calls[c]});
  }
  devices::Trace out;
  out.reserve(n);  // at most every event is kept: no event moved as the trace grows
  std::map<int64_t, int64_t> work;  // a kept issue's handle -> its handle in out
  auto keep = [&](const devices::TraceEvent& e) {
    if (e.type == Type::kCompute) {
      out.compute(e.op);
    } else if (e.type == Type::kIssue) {
      work[e.work] = out.issue(e.collective);
    } else if (auto it = work.find(e.work); it != work.end()) {
      out.wait(it->second);
    }
  };
  for (size_t i = 0; i < n; ++i) {
    if (auto it = instead.find(i); it != instead.end())
      for (size_t w : it->second) keep(ev[w]);
    if (!drop[i]) keep(ev[i]);
  }
  out.storages() = t.storages();
  out.storage_resizes() = t.storage_resizes();
  return out;
}

// The rank's storage resizes with each moved all-reduce's input releases moved to its wait.
// At dp_replicate 2 they are released twice in a row (by FSDP's note that the next
// reduce-scatter is issued, then before the all-reduce), at the all-reduce's issue: the second
// run of those releases (one per parameter the call carries, in its order, each a storage
// FSDP sized by that parameter) is the one that moves. Throws where that run is not found
// exactly once, or where the wait's gap holds other resizes (their order against it unknown).
std::vector<devices::StorageResize> with_releases_moved(const std::vector<devices::StorageResize>& rs,
                                                        std::vector<MovedRelease> moved,
                                                        const ShardNotes::Rank& notes) {
  if (moved.empty()) return rs;
  for (size_t j = 1; j < rs.size(); ++j)
    TITAN_CHECK(rs[j - 1].at_op <= rs[j].at_op, "replica derivation: storage resizes out of op order");
  std::vector<char> removed(rs.size(), 0);
  std::vector<std::vector<size_t>> runs(moved.size());
  auto same = [](const devices::StorageResize& a, const devices::StorageResize& b) {
    return a.at_op == b.at_op && a.id == b.id && a.bytes == b.bytes;
  };
  for (size_t m = 0; m < moved.size(); ++m) {
    const std::vector<int64_t>& numels = moved[m].call->numels;
    const size_t k = numels.size();
    TITAN_CHECK(k > 0, "replica derivation: an all-reduce over no parameter");
    size_t found = 0, at = 0;
    for (size_t p = k; p + k <= rs.size(); ++p) {
      bool ok = true;
      for (size_t i = 0; ok && i < k; ++i) {
        const devices::StorageResize& r = rs[p + i];
        auto seed = notes.seeds.find(r.id);
        ok = r.at_op == moved[m].from_op && r.bytes == 0 && !removed[p + i] && seed != notes.seeds.end() &&
             seed->second == numels[i] && same(rs[p - k + i], r);
      }
      if (ok) ++found, at = p;
    }
    TITAN_CHECK(found == 1, "replica derivation: ", found, " runs of a reduce-scatter's released inputs where one was expected");
    for (size_t i = 0; i < k; ++i) removed[at + i] = 1, runs[m].push_back(at + i);
  }
  for (const devices::StorageResize& r : rs)
    for (const MovedRelease& m : moved)
      TITAN_CHECK(r.at_op != m.to_op, "replica derivation: other storage resizes where a moved wait goes");
  std::vector<size_t> by_wait(moved.size());
  for (size_t m = 0; m < moved.size(); ++m) by_wait[m] = m;
  std::sort(by_wait.begin(), by_wait.end(), [&](size_t a, size_t b) { return moved[a].order < moved[b].order; });
  std::vector<devices::StorageResize> out;
  out.reserve(rs.size());
  size_t next = 0;  // in by_wait
  auto insert_upto = [&](int64_t op) {
    for (; next < by_wait.size() && moved[by_wait[next]].to_op <= op; ++next)
      for (size_t j : runs[by_wait[next]]) out.push_back({moved[by_wait[next]].to_op, rs[j].id, rs[j].bytes});
  };
  for (size_t j = 0; j < rs.size(); ++j) {
    insert_upto(rs[j].at_op);
    if (!removed[j]) out.push_back(rs[j]);
  }
  insert_upto(INT64_MAX);
  return out;
}

// One rank's traces (the step's, or a pipeline rank's segments) derived into `out`, and its
// resizes (`resizes`: the rank's as recorded at dp_replicate 2, replaced).
void derive_rank(const std::vector<const devices::Trace*>& traces, const std::vector<devices::Trace*>& out,
                 std::vector<devices::StorageResize>* resizes, const ShardNotes::Rank& notes) {
  std::vector<const ShardCall*> replica_calls;  // in position order, as noted
  for (const ShardCall& c : notes.calls)
    if (c.group == kReplicaGroup) replica_calls.push_back(&c);
  std::vector<MovedRelease> moved;
  int64_t issues = 0, ops = 0, events = 0;
  for (size_t i = 0; i < traces.size(); ++i) {
    const devices::Trace& t = *traces[i];
    *out[i] = without_replica_collectives(t, replica_calls, issues, ops, events, &moved);
    for (const devices::TraceEvent& e : t.events()) issues += e.type == Type::kIssue ? 1 : 0;
    ops += static_cast<int64_t>(t.compute_ops()), events += static_cast<int64_t>(t.size());
  }
  *resizes = with_releases_moved(*resizes, std::move(moved), notes);
}

// FSDP's notes without its calls on the replica group; each other call's position (the
// issues before it on its rank) less the replica issues among them.
ShardNotes without_replica_calls(const ShardNotes& notes, const RecordedStep& replicated) {
  ShardNotes out = notes;
  for (size_t q = 0; q < out.ranks.size(); ++q) {
    std::vector<int64_t> replica_before = {0};  // replica issues among the first n issues
    for (const devices::Trace* t : rank_traces(replicated, q))
      for (const devices::TraceEvent& e : t->events())
        if (e.type == devices::TraceEvent::Type::kIssue)
          replica_before.push_back(replica_before.back() + (e.collective.group == kReplicaGroup ? 1 : 0));
    std::vector<ShardCall> kept;
    for (ShardCall& c : out.ranks[q].calls) {
      if (c.group == kReplicaGroup) continue;
      TITAN_CHECK(c.position >= 0 && static_cast<size_t>(c.position) < replica_before.size(),
                  "replica derivation: an FSDP call after the last issue");
      c.position -= replica_before[static_cast<size_t>(c.position)];
      kept.push_back(std::move(c));
    }
    out.ranks[q].calls = std::move(kept);
  }
  return out;
}

}  // namespace

bool replica_derivable(const JobConfig& cfg) {
  const ParallelDims d = parallel_dims(cfg, cfg.simulation.num_chips);
  return d.dp_replicate == 1 && shard_resizable(cfg);
}

JobConfig with_two_replicas(const JobConfig& cfg) {
  const ParallelDims d = parallel_dims(cfg, cfg.simulation.num_chips);
  JobConfig c = cfg;
  auto& p = c.parallelism;
  p.data_parallel_replicate_degree = 2;
  p.data_parallel_shard_degree = d.dp_shard;
  p.tensor_parallel_degree = d.tp;
  p.pipeline_parallel_degree = d.pp;
  p.context_parallel_degree = d.cp;
  c.simulation.num_chips = 2 * d.dp_shard * d.tp * d.pp * d.cp;
  return c;
}

ProbeRecording probe_without_replicas(const ProbeRecording& replicated, const JobConfig& cfg) {
  const RecordedStep& r = replicated.step;
  TITAN_CHECK(r.dims.dp_replicate == 2, "replica derivation: the step is at dp_replicate ", r.dims.dp_replicate);
  RecordedStep s;
  s.chip = r.chip;
  s.placement = r.placement;
  s.dims = r.dims;
  s.dims.dp_replicate = 1;
  s.dims.world_size = r.dims.world_size / 2;
  s.op_counts = r.op_counts;  // the same ops
  s.local_params = r.local_params;
  s.param_elem_bytes = r.param_elem_bytes;
  s.microbatches = r.microbatches;
  TITAN_CHECK(r.global_batch % 2 == 0, "replica derivation: odd global batch ", r.global_batch);
  s.global_batch = r.global_batch / 2;  // dp_replicate x dp_shard x rows (x schedule runs)
  // Communicator calls: a probe's are cleared (shard_resize.h), so there are none to carry.
  TITAN_CHECK(r.calls.empty(), "replica derivation: a step with Communicator calls");
  const ShardNotes& notes = probe_notes(replicated);
  if (!r.pipeline) {
    TITAN_CHECK(notes.ranks.size() == 1, "replica derivation: FSDP notes of ", notes.ranks.size(), " ranks");
    derive_rank({&r.trace}, {&s.trace}, &s.trace.storage_resizes(), notes.ranks[0]);
    s.memory = devices::trace_memory(s.trace);
  } else {
    auto p = std::make_shared<RecordedPipeline>(*r.pipeline);
    TITAN_CHECK(notes.ranks.size() == p->ranks.size(), "replica derivation: FSDP notes of ", notes.ranks.size(),
                " ranks for ", p->ranks.size(), " pipeline ranks");
    for (size_t q = 0; q < p->ranks.size(); ++q) {
      TITAN_CHECK(p->calls[q].empty(), "replica derivation: a pipeline rank with Communicator calls");
      std::vector<const devices::Trace*> recorded;
      std::vector<devices::Trace*> segments;
      for (size_t k = 0; k < p->ranks[q].size(); ++k) {
        recorded.push_back(&r.pipeline->ranks[q][k].trace);
        segments.push_back(&p->ranks[q][k].trace);
      }
      derive_rank(recorded, segments, &p->storage_resizes[q], notes.ranks[q]);
      p->memory[q] = rank_memory(*p, q);
    }
    s.pipeline = std::move(p);
  }
  return make_probe(std::move(s), replicated.degree, without_replica_calls(notes, r), cfg);
}

}  // namespace titan
