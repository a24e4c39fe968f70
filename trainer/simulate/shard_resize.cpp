// Shard resizing (see shard_resize.h).
#include "trainer/simulate/shard_resize.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "collectives/fusion.h"
#include "common/error.h"
#include "devices/trace_memory.h"
#include "parallel/fsdp_observer.h"
#include "trainer/simulate/shard_notes.h"
#include "trainer/simulate/trace_recorder.h"
#include "trainer/step/trainer.h"

namespace titan {

namespace {

// Element sizes a tensor of the step can have (bool/int8 .. double/int64).
constexpr int64_t kElem[] = {1, 2, 4, 8};

int64_t shard_len(int64_t numel, int64_t w) { return (numel + w - 1) / w; }

using Call = ShardCall;

bool distinguishable(int64_t numel, int64_t w, std::string* why);

// A probe degree at which some shard size equals another size of the step: thrown from the
// FSDP plan's construction, before anything is recorded, so the next degree is tried at once.
struct ProbeRejected : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class NoteTaker : public FsdpObserver {
 public:
  NoteTaker(ShardNotes* notes, int64_t probe_degree) : n_(notes), w_(probe_degree) { set_fsdp_observer(this); }
  ~NoteTaker() override { set_fsdp_observer(nullptr); }
  NoteTaker(const NoteTaker&) = delete;
  NoteTaker& operator=(const NoteTaker&) = delete;

  void plan(int64_t degree, const std::vector<int64_t>& numels) override {
    std::string why;
    if (degree != w_) throw ProbeRejected("an FSDP plan over " + std::to_string(degree) + " ranks at probe degree " +
                                          std::to_string(w_));
    for (int64_t n : numels)
      if (!distinguishable(n, degree, &why)) throw ProbeRejected(why);
    n_->ranks.emplace_back();
    n_->ranks.back().degree = degree;
    n_->ranks.back().numels = numels;
  }
  void shard_sized(const torch::Tensor& t, int64_t numel) override {
    const int64_t id = recorded_storage_id(t);
    if (id == 0) return;  // not in the recording: nothing of it to resize
    if (n_->ranks.empty()) return fail("a shard-sized tensor before any FSDP plan");
    auto [it, added] = n_->ranks.back().seeds.emplace(id, numel);
    if (!added && it->second != numel) fail("one storage sized by two parameters");
  }
  void collective(const std::string& op, const std::string& group, const std::vector<int64_t>& numels,
                  const std::vector<at::ScalarType>& dtypes, bool padded) override {
    if (n_->ranks.empty()) return fail("an FSDP collective before any FSDP plan");
    Call c;
    c.kind = devices::parse_collective(op);
    c.group = placement_group(group);
    c.numels = numels;
    c.dtypes = dtypes;
    for (auto d : dtypes) c.elem.push_back(static_cast<int64_t>(c10::elementSize(d)));
    c.padded = padded;
    c.position = recorded_issue_count();
    if (c.position < 0) return fail("an FSDP collective outside a recording");
    n_->ranks.back().calls.push_back(std::move(c));
  }
  void unsupported(const std::string& why) override { fail(why); }

 private:
  void fail(const std::string& why) {
    if (n_->conflict.empty()) n_->conflict = why;
  }
  ShardNotes* n_;
  int64_t w_;
};

// Size classes on a storage sized by an N-element parameter's shard at degree w.
enum class SizeClass { kNone, kShard, kPadded };

SizeClass size_class(int64_t bytes, int64_t numel, int64_t w, int64_t* elem) {
  const int64_t s = shard_len(numel, w);
  for (int64_t e : kElem) {
    if (bytes == s * e) return *elem = e, SizeClass::kShard;
    if (bytes == s * w * e) return *elem = e, SizeClass::kPadded;
  }
  return SizeClass::kNone;
}

// Whether every shard-class size at degree w differs from every padded one and from the
// parameter's full and scalar sizes, so that a size on a shard storage tells its class.
bool distinguishable(int64_t numel, int64_t w, std::string* why) {
  const int64_t s = shard_len(numel, w);
  for (int64_t a : kElem)
    for (int64_t b : kElem) {
      const int64_t shard = s * a, padded = s * w * a;
      if (shard == s * w * b || shard == numel * b || shard == b || padded == numel * b || padded == b) {
        *why = "a " + std::to_string(numel) + "-element parameter's shard sizes at degree " + std::to_string(w) +
               " equal other sizes";
        return false;
      }
    }
  return true;
}

int64_t cap_bytes(const JobConfig& cfg) {
  // As the communicator plans its fused buckets (collectives/communicator_lists.cpp).
  return std::max<int64_t>(1, static_cast<int64_t>(cfg.comm.bucket_cap_mb * 1024 * 1024));
}

std::vector<int64_t> call_bytes(const Call& c, int64_t w) {
  std::vector<int64_t> b;
  for (size_t i = 0; i < c.numels.size(); ++i)
    b.push_back(shard_len(c.numels[i], w) * (c.padded ? w : 1) * c.elem[i]);
  return b;
}

std::vector<std::vector<size_t>> call_buckets(const Call& c, int64_t w, bool fused, int64_t cap) {
  if (fused) return plan_buckets(call_bytes(c, w), c.dtypes, cap);
  std::vector<std::vector<size_t>> one_each;  // separate mode: one collective per tensor
  for (size_t i = 0; i < c.numels.size(); ++i) one_each.push_back({i});
  return one_each;
}

// The traces of one rank, in program order: the step's, or a pipeline rank's segments.
template <class Step>
auto rank_traces(Step& step, size_t q) {
  using T = std::conditional_t<std::is_const_v<Step>, const devices::Trace, devices::Trace>;
  std::vector<T*> out;
  if (!step.pipeline) {
    out.push_back(&step.trace);
  } else {
    for (auto& seg : step.pipeline->ranks[q]) out.push_back(&seg.trace);
  }
  return out;
}

}  // namespace

// Where a probe's sizes follow the shard degree, per rank.
struct ShardRewrites {
  struct Use {
    uint32_t trace = 0, event = 0, slot = 0;
    bool write = false, padded = false;
    int64_t numel = 0, elem = 0;
  };
  struct Event {
    uint32_t trace = 0, event = 0;
  };
  struct Collective {
    uint32_t trace = 0, event = 0, call = 0, bucket = 0;
  };
  struct Rank {
    std::vector<int64_t> numels;
    std::vector<Use> uses;
    std::vector<Event> pointwise;  // ops whose bytes and FLOPs follow from their uses
    std::vector<Call> calls;
    std::vector<std::vector<std::vector<size_t>>> buckets;  // per call, at the probe degree
    std::vector<Collective> collectives;
    // The memory walk's input at the probe (devices/trace_memory.h) and the shard-sized
    // entries in it and in the storage table.
    devices::LiveRanges live;
    struct Sized {
      uint32_t index = 0;  // into live.ranges / the storage table
      bool padded = false;
      int64_t numel = 0, elem = 0;
    };
    std::vector<Sized> ranges, storages, resizes;
  };
  int64_t degree = 0;
  bool fused = true;
  int64_t cap = 0;
  std::vector<Rank> ranks;
};

struct ShardPlan {
  ShardNotes notes;
  int64_t degree = 0;
  bool fused = true;
  int64_t cap = 0;
  std::once_flag once;
  ShardRewrites rewrites;
  std::string error;  // why the probe's sizes cannot be followed (then nothing is resized)
};

namespace {

using devices::OpKind;
using devices::TraceEvent;

bool fail(std::string* why, const std::string& text) {
  *why = text;
  return false;
}

// The sizes of one rank that follow the shard degree: shard storages found through the data
// flow from FSDP's seeds, every use on them classified, FSDP's collectives matched to the
// trace's issues.
bool plan_rank(const std::vector<const devices::Trace*>& traces, const std::vector<devices::StorageRecord>& storages,
               const std::vector<devices::StorageResize>& resizes, const ShardNotes::Rank& notes, int64_t w,
               bool fused, int64_t cap, ShardRewrites::Rank* out, std::string* why) {
  out->numels = notes.numels;
  out->calls = notes.calls;
  std::unordered_map<int64_t, int64_t> numel_of = notes.seeds;  // storage id -> parameter numel
  auto cls = [&](const devices::TensorUse& u, int64_t* numel, int64_t* elem) {
    auto it = numel_of.find(u.id);
    if (it == numel_of.end()) return SizeClass::kNone;
    *numel = it->second;
    return size_class(u.bytes, it->second, w, elem);
  };
  std::unordered_set<int64_t> written;  // storages some recorded op writes
  for (const devices::Trace* t : traces)
    for (const TraceEvent& ev : t->events())
      if (ev.type == TraceEvent::Type::kCompute)
        for (const auto& u : ev.op.writes) written.insert(u.id);
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
        for (const auto& u : op.reads) {
          if (propagates && last != 0 && !numel_of.count(u.id) && !written.count(u.id) &&
              size_class(u.bytes, last, w, &e) != SizeClass::kNone) {
            // No recorded op wrote it: its producer was a composite op whose only leaves were
            // bookkeeping (pow's result_type), run just before on the last shard-sized data.
            numel_of.emplace(u.id, last);
            changed = true;
          }
          if (cls(u, &n, &e) == SizeClass::kNone) continue;
          if (numel != 0 && numel != n) return fail(why, op.name + " reads the shards of two parameters");
          numel = n;
        }
        if (propagates && numel != 0)
          for (const auto& u : op.writes) {
            if (size_class(u.bytes, numel, w, &e) == SizeClass::kNone) continue;
            auto [it, added] = numel_of.emplace(u.id, numel);
            if (added) changed = true;
            else if (it->second != numel)
              return fail(why, op.name + " writes a storage of another parameter's shard");
          }
        for (int pass = 0; pass < 2; ++pass)
          for (const auto& u : pass ? op.writes : op.reads)
            if (cls(u, &n, &e) != SizeClass::kNone) last = n;
      }
    }
  }
  // The memory walk's ranges and the storage table: the same classes by storage.
  out->live = devices::live_ranges(traces, storages, resizes);
  auto sized = [&](int64_t id, int64_t bytes, uint32_t index, std::vector<ShardRewrites::Rank::Sized>* to) {
    auto it = numel_of.find(id);
    int64_t e = 0;
    if (it == numel_of.end()) return;
    const SizeClass c = size_class(bytes, it->second, w, &e);
    if (c != SizeClass::kNone) to->push_back({index, c == SizeClass::kPadded, it->second, e});
  };
  for (uint32_t i = 0; i < out->live.ranges.size(); ++i)
    sized(out->live.ranges[i].id, out->live.ranges[i].bytes, i, &out->ranges);
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
    const Call& call = out->calls[c];
    out->buckets.push_back(call_buckets(call, w, fused, cap));
    const std::vector<int64_t> bytes = call_bytes(call, w);
    size_t pos = static_cast<size_t>(call.position);
    for (uint32_t b = 0; b < out->buckets.back().size(); ++b) {
      int64_t sum = 0;
      for (size_t i : out->buckets.back()[b]) sum += bytes[i];
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

bool shard_resizable(const JobConfig& cfg) {
  const ParallelDims d = parallel_dims(cfg, cfg.simulation.num_chips);
  // A fixed global batch makes the number of micro-batches follow the data-parallel degree.
  return d.dp_shard >= 2 && d.cp == 1 && cfg.training.global_batch_size <= 0;
}

JobConfig with_shard_degree(const JobConfig& cfg, int64_t w) {
  const ParallelDims d = parallel_dims(cfg, cfg.simulation.num_chips);
  JobConfig c = cfg;
  auto& p = c.parallelism;
  p.data_parallel_replicate_degree = d.dp_replicate;
  p.data_parallel_shard_degree = w;
  p.tensor_parallel_degree = d.tp;
  p.pipeline_parallel_degree = d.pp;
  p.context_parallel_degree = d.cp;
  c.simulation.num_chips = d.dp_replicate * w * d.tp * d.pp * d.cp;
  return c;
}

ProbeRecording make_probe(RecordedStep step, int64_t degree, ShardNotes notes, const JobConfig& cfg) {
  ProbeRecording out;
  out.step = std::move(step);
  out.degree = degree;
  out.plan = std::make_shared<ShardPlan>();
  out.plan->notes = std::move(notes);
  out.plan->degree = degree;
  out.plan->fused = cfg.comm.collective_mode == CollectiveMode::kFused;
  out.plan->cap = cap_bytes(cfg);
  return out;
}

const ShardNotes& probe_notes(const ProbeRecording& probe) { return probe.plan->notes; }

ProbeRecording record_probe(const JobConfig& cfg, int64_t first_degree) {
  TITAN_CHECK(shard_resizable(cfg), "record_probe: the layout has no dp_shard degree to resize");
  std::vector<int64_t> degrees = {3, 5, 7, 11, 13, 17, 19, 23, 29, 31};
  auto hint = std::find(degrees.begin(), degrees.end(), first_degree);
  if (hint != degrees.end()) std::rotate(degrees.begin(), hint, hint + 1);
  std::string why;
  for (int64_t w : degrees) {
    JobConfig p = with_shard_degree(cfg, w);
    ShardNotes notes;
    ProbeRecording out;
    try {
      NoteTaker taker(&notes, w);
      out.step = record_step(p, /*place=*/false);  // probe chip counts need not place
    } catch (const ProbeRejected& e) {
      why = e.what();
      continue;
    }
    const size_t ranks = out.step.pipeline ? out.step.pipeline->ranks.size() : 1;
    TITAN_CHECK(notes.conflict.empty(), "shard resizing: ", notes.conflict);
    TITAN_CHECK(notes.ranks.size() == ranks, "shard resizing: ", notes.ranks.size(),
                " FSDP plans for ", ranks, " ranks");
    // Every Communicator call, for comparisons with real runs: the probe degree's are no
    // other degree's, and copying them into every resized step costs.
    out.step.calls.clear();
    if (out.step.pipeline)
      for (auto& c : out.step.pipeline->calls) c.clear();
    return make_probe(std::move(out.step), w, std::move(notes), cfg);
  }
  TITAN_FAIL("shard resizing: no probe degree tells every shard size apart (", why, ")");
}

namespace {

using Split =
    std::vector<std::vector<std::vector<std::vector<size_t>>>>;  // per rank, per call: its buckets

}  // namespace

struct ResizedLayout {
  Split split;
  struct Issue {
    uint32_t trace = 0, event = 0, call = 0, bucket = 0;  // a bucket issued anew, where it went
  };
  struct Rank {
    std::vector<std::vector<uint32_t>>
        moved;  // per trace: each probe event's position (empty: the same)
    std::vector<Issue> issued;
  };
  std::vector<Rank> ranks;
};

namespace {

constexpr uint32_t kGone = UINT32_MAX;

// The calls whose buckets split differently at w: in each trace, a call's k buckets were
// issued back to back and waited for back to back (collectives/communicator_lists.cpp,
// sim_backend.cpp), so its first issue becomes the new buckets' issues, its first wait their
// waits, the others go, and work handles are numbered again in issue order, as a recording
// at w numbers them. Compute ops keep their places among the ops (their data flow indices).
// The events are this resize's own copy: they move into the rebuilt traces. *out: where they went.
bool rebucket(const ShardRewrites::Rank& r,
              const std::vector<std::vector<std::vector<size_t>>>& buckets, int64_t w,
              const std::vector<std::vector<TraceEvent>*>& events, ResizedLayout::Rank* out,
              std::string* why) {
  std::map<std::pair<uint32_t, uint32_t>, const ShardRewrites::Collective*> issue_of;
  std::vector<bool> touched(events.size(), false);  // traces holding a call that splits anew
  for (const auto& c : r.collectives) {
    issue_of[{c.trace, c.event}] = &c;
    if (buckets[c.call] != r.buckets[c.call]) touched[c.trace] = true;
  }
  out->moved.assign(events.size(), {});
  out->issued.clear();
  for (uint32_t ti = 0; ti < events.size(); ++ti) {
    if (!touched[ti]) continue;
    std::vector<TraceEvent>& old = *events[ti];
    std::vector<uint32_t>& moved = out->moved[ti];
    moved.assign(old.size(), kGone);
    std::vector<TraceEvent> rebuilt;
    rebuilt.reserve(old.size());
    std::unordered_map<int64_t, std::vector<int64_t>> handles;  // old work -> new works
    int64_t next = 0;
    for (uint32_t ei = 0; ei < old.size(); ++ei) {
      TraceEvent& ev = old[ei];
      const auto here = static_cast<uint32_t>(rebuilt.size());
      if (ev.type == TraceEvent::Type::kCompute) {
        moved[ei] = here;
        rebuilt.push_back(std::move(ev));
        continue;
      }
      if (ev.type == TraceEvent::Type::kWait) {
        auto it = handles.find(ev.work);
        if (it == handles.end()) return fail(why, "a wait on a collective not issued before it");
        for (int64_t h : it->second) {
          TraceEvent wait = ev;
          wait.work = h;
          rebuilt.push_back(std::move(wait));
        }
        continue;
      }
      auto call = issue_of.find({ti, ei});
      std::vector<int64_t>& mine = handles[ev.work];
      if (call == issue_of.end() || buckets[call->second->call] == r.buckets[call->second->call]) {
        moved[ei] = here;
        rebuilt.push_back(std::move(ev));  // sizes already set
        rebuilt.back().work = next;
        mine.push_back(next++);
        continue;
      }
      if (call->second->bucket != 0) continue;  // its buckets are issued with the first
      const Call& c = r.calls[call->second->call];
      const std::vector<int64_t> bytes = call_bytes(c, w);
      const auto& split = buckets[call->second->call];
      for (uint32_t b = 0; b < split.size(); ++b) {
        TraceEvent issue = ev;
        issue.collective.bytes = 0;
        for (size_t i : split[b]) issue.collective.bytes += bytes[i];
        issue.work = next;
        mine.push_back(next++);
        out->issued.push_back({ti, static_cast<uint32_t>(rebuilt.size()), call->second->call, b});
        rebuilt.push_back(std::move(issue));
      }
    }
    // Waits of the later buckets went with the first's; a call's waits come back to back.
    old = std::move(rebuilt);
  }
  return true;
}

}  // namespace

bool resize_for_shard_degree(const ProbeRecording& probe, const JobConfig& cfg, RecordedStep* out,
                             std::string* why, ResizeState* state) {
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
      if (!plan_rank({traces.begin(), traces.end()}, storages, resizes, plan.notes.ranks[q],
                     rw.degree, rw.fused, rw.cap, &rw.ranks[q], &plan.error)) {
        plan.error = "shard resizing cannot follow this step: " + plan.error;
        return;
      }
    }
  });
  if (!plan.error.empty()) return fail(why, plan.error);
  const ShardRewrites& rw = plan.rewrites;
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
    for (const Call& c : rw.ranks[q].calls)
      buckets[q].push_back(call_buckets(c, w, rw.fused, rw.cap));
  // Whether *out holds this probe's events as split at w, with another degree's sizes: every
  // size below is then written as an absolute value, and the two relative ones start from the
  // probe's.
  const bool in_place = state && state->plan == probe.plan && state->layout &&
                        state->layout->split == buckets && !out->pipeline == !probe.step.pipeline &&
                        (!out->pipeline || out->pipeline.use_count() == 1);
  std::shared_ptr<ResizedLayout> layout;
  if (state) {
    layout = in_place ? state->layout : std::make_shared<ResizedLayout>();
    state->plan.reset(), state->layout.reset();  // until this resize is done
    state->last_in_place = in_place;
  }
  if (!in_place && layout) {
    layout->split = buckets;
    layout->ranks.assign(rw.ranks.size(), {});
  }
  ResizedLayout::Rank scratch;  // where rebucket's events went, when no state keeps it

  // Assigned, not constructed: a step resized before (study/recording_cache.cpp reuses them)
  // keeps its buffers, so a resize allocates little. Its pipeline is reused only if nothing
  // else holds it (replays keep the structure they replayed).
  if (in_place) {
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
  auto resized = [&](int64_t numel, bool padded, int64_t elem) {
    return shard_len(numel, w) * (padded ? w : 1) * elem;
  };
  for (size_t q = 0; q < rw.ranks.size(); ++q) {
    const ShardRewrites::Rank& r = rw.ranks[q];
    // Trace offers its events read-only; this copy is ours and only sizes change (the data
    // flow between ops stays), so they are written in place.
    std::vector<std::vector<TraceEvent>*> events;
    for (devices::Trace* t : rank_traces(*out, q))
      events.push_back(const_cast<std::vector<TraceEvent>*>(&t->events()));
    ResizedLayout::Rank& where = layout ? layout->ranks[q] : scratch;
    // A probe event where it is now: rebucket moved the events of the traces it rebuilt.
    auto at = [&](uint32_t ti, uint32_t ei) -> TraceEvent& {
      const bool moved = in_place && ti < where.moved.size() && !where.moved[ti].empty();
      return (*events[ti])[moved ? where.moved[ti][ei] : ei];
    };
    for (const auto& u : r.uses) {
      devices::OpDesc& op = at(u.trace, u.event).op;
      (u.write ? op.writes : op.reads)[u.slot].bytes = resized(u.numel, u.padded, u.elem);
    }
    for (const auto& p : r.pointwise) {
      devices::OpDesc& op = at(p.trace, p.event).op;
      op.bytes_read = op.bytes_written = 0;
      for (const auto& u : op.reads) op.bytes_read += u.bytes;
      for (const auto& u : op.writes) op.bytes_written += u.bytes;
      op.flops = static_cast<double>(op.bytes_written) /
                 static_cast<double>(std::max<int64_t>(1, op.dtype_bytes));
    }
    bool split_changes = false;
    for (const auto& c : r.collectives) {
      if (buckets[q][c.call] != r.buckets[c.call]) {
        split_changes = true;
        continue;
      }
      const std::vector<int64_t> bytes = call_bytes(r.calls[c.call], w);
      int64_t sum = 0;
      for (size_t i : r.buckets[c.call][c.bucket]) sum += bytes[i];
      at(c.trace, c.event).collective.bytes = sum;
    }
    if (split_changes && in_place) {
      for (const auto& n : where.issued) {  // the issues rebucket made, at this degree's sizes
        const std::vector<int64_t> bytes = call_bytes(r.calls[n.call], w);
        int64_t sum = 0;
        for (size_t i : buckets[q][n.call][n.bucket]) sum += bytes[i];
        (*events[n.trace])[n.event].collective.bytes = sum;
      }
    } else if (split_changes && !rebucket(r, buckets[q], w, events, &where, why)) {
      return false;
    }
    // The memory: the probe's ranges at this degree's sizes, walked again; the storage table
    // follows for whoever walks the trace itself.
    devices::LiveRanges live = r.live;
    for (const auto& z : r.ranges) live.ranges[z.index].bytes = resized(z.numel, z.padded, z.elem);
    auto& table = out->pipeline ? out->pipeline->storages[q] : out->trace.storages();
    auto& resizes =
        out->pipeline ? out->pipeline->storage_resizes[q] : out->trace.storage_resizes();
    for (const auto& z : r.storages) table[z.index].bytes = resized(z.numel, z.padded, z.elem);
    for (const auto& z : r.resizes) resizes[z.index].bytes = resized(z.numel, z.padded, z.elem);
    (out->pipeline ? out->pipeline->memory[q] : out->memory) = devices::step_memory(live);
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
