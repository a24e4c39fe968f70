// Recorded steps as bytes (see recording_wire.h).
#include "trainer/simulate/recording_wire.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/error.h"
#include "trainer/simulate/shard_notes.h"

namespace titan {

// A field added to one of these structs must be carried here too (or the recorder processes
// would drop it silently): each size is checked, so that such a change stops the build here.
static_assert(
    sizeof(devices::OpDesc) == 264 && sizeof(devices::CollectiveDesc) == 80 &&
        sizeof(devices::TraceEvent) == 360 && sizeof(devices::Trace) == 160,
    "devices::Trace changed: carry the new fields in recording_wire.cpp, then update these sizes");
static_assert(sizeof(RecordedStep) - sizeof(devices::ChipSpec) - sizeof(devices::Placement) ==
                      504 &&
                  sizeof(RecordedPipeline) == 296 && sizeof(PipelineSegment) == 192 &&
                  sizeof(PipeSchedule) == 96 && sizeof(SimCollectiveEvent) == 136 &&
                  sizeof(ParallelDims) == 48,
              "a recorded step's parts changed: carry the new fields in recording_wire.cpp, then "
              "update these sizes");
static_assert(sizeof(ShardCall) == 128 && sizeof(ShardNotes::Rank) == 112 &&
                  sizeof(ShardNotes) == 56,
              "FSDP's shard notes changed: carry the new fields in recording_wire.cpp, then update "
              "these sizes");

namespace {

class Writer {
 public:
  template <class T>
  void pod(T v) {
    static_assert(std::is_trivially_copyable_v<T> &&
                      (std::is_floating_point_v<T> || std::has_unique_object_representations_v<T>),
                  "a struct with padding would put indeterminate bytes on the wire");
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  void i64(int64_t v) { pod(v); }
  void str(const std::string& s) {
    i64(static_cast<int64_t>(s.size()));
    out_.append(s);
  }
  template <class T, class F>
  void list(const std::vector<T>& v, F each) {
    i64(static_cast<int64_t>(v.size()));
    for (const T& x : v) each(x);
  }
  void i64s(const std::vector<int64_t>& v) {
    list(v, [&](int64_t x) { i64(x); });
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <class T>
  T pod() {
    static_assert(std::is_trivially_copyable_v<T>);
    TITAN_CHECK(pos_ + sizeof(T) <= in_.size(), "recording message: truncated at byte ", pos_,
                " of ", in_.size());
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  int64_t i64() { return pod<int64_t>(); }
  size_t count() {
    const int64_t n = i64();
    TITAN_CHECK(n >= 0 && static_cast<size_t>(n) <= in_.size() - pos_,
                "recording message: a count of ", n, " at byte ", pos_, " exceeds the message");
    return static_cast<size_t>(n);
  }
  std::string str() {
    const size_t n = count();
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  template <class T, class F>
  std::vector<T> list(F each) {
    std::vector<T> v(count());
    for (T& x : v) each(x);
    return v;
  }
  std::vector<int64_t> i64s() {
    return list<int64_t>([&](int64_t& x) { x = i64(); });
  }
  void done() const {
    TITAN_CHECK(pos_ == in_.size(), "recording message: ", in_.size() - pos_, " bytes left over");
  }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

void put(Writer& w, const ParallelDims& d) {
  for (int64_t v : {d.dp_replicate, d.dp_shard, d.cp, d.tp, d.pp, d.world_size}) w.i64(v);
}
void get(Reader& r, ParallelDims* d) {
  for (int64_t* v : {&d->dp_replicate, &d->dp_shard, &d->cp, &d->tp, &d->pp, &d->world_size})
    *v = r.i64();
}

void put_uses(Writer& w, const std::vector<devices::TensorUse>& uses) {
  w.list(uses, [&](const devices::TensorUse& u) { w.i64(u.id), w.i64(u.bytes); });
}
std::vector<devices::TensorUse> get_uses(Reader& r) {
  return r.list<devices::TensorUse>(
      [&](devices::TensorUse& u) { u.id = r.i64(), u.bytes = r.i64(); });
}

void put_op(Writer& w, const devices::OpDesc& op) {
  w.str(op.name);
  w.pod(op.kind);
  w.pod(op.flops);
  w.i64(op.bytes_read), w.i64(op.bytes_written);
  w.pod(op.mm);
  const devices::AttentionShape& a = op.attn;  // field by field: no padding bytes on the wire
  for (int64_t v : {a.batch, a.heads, a.kv_heads, a.q_len, a.kv_len, a.head_dim}) w.i64(v);
  w.pod(a.causal), w.pod(a.backward);
  w.i64(op.dtype_bytes);
  put_uses(w, op.reads);
  put_uses(w, op.writes);
}
devices::OpDesc get_op(Reader& r) {
  devices::OpDesc op;
  op.name = r.str();
  op.kind = r.pod<devices::OpKind>();
  op.flops = r.pod<double>();
  op.bytes_read = r.i64(), op.bytes_written = r.i64();
  op.mm = r.pod<devices::MatmulShape>();
  devices::AttentionShape& a = op.attn;
  for (int64_t* v : {&a.batch, &a.heads, &a.kv_heads, &a.q_len, &a.kv_len, &a.head_dim})
    *v = r.i64();
  a.causal = r.pod<bool>(), a.backward = r.pod<bool>();
  op.dtype_bytes = r.i64();
  op.reads = get_uses(r);
  op.writes = get_uses(r);
  return op;
}

// Ops, issues and waits in order; the data flow and the handles are Trace's to derive.
void put(Writer& w, const devices::Trace& t) {
  using Type = devices::TraceEvent::Type;
  w.list(t.events(), [&](const devices::TraceEvent& ev) {
    w.pod(ev.type);
    if (ev.type == Type::kCompute) return put_op(w, ev.op);
    w.i64(ev.work);
    if (ev.type == Type::kWait) return;
    w.pod(ev.collective.kind);
    w.str(ev.collective.group);
    w.i64(ev.collective.bytes);
    w.str(ev.collective.stream);
  });
  w.list(t.storages(),
         [&](const devices::StorageRecord& s) { w.i64(s.bytes), w.pod(s.outlives_step); });
  w.list(t.storage_resizes(),
         [&](const devices::StorageResize& s) { w.i64(s.at_op), w.i64(s.id), w.i64(s.bytes); });
}
void get(Reader& r, devices::Trace* t) {
  using Type = devices::TraceEvent::Type;
  *t = devices::Trace();
  for (size_t i = 0, n = r.count(); i < n; ++i) {
    const auto type = r.pod<Type>();
    if (type == Type::kCompute) {
      t->compute(get_op(r));
      continue;
    }
    TITAN_CHECK(type == Type::kIssue || type == Type::kWait, "recording message: event ", i,
                " has no known type");
    const int64_t work = r.i64();
    if (type == Type::kWait) {
      t->wait(work);
      continue;
    }
    devices::CollectiveDesc c;
    c.kind = r.pod<devices::CollectiveKind>();
    c.group = r.str();
    c.bytes = r.i64();
    c.stream = r.str();
    const int64_t issued = t->issue(c);
    TITAN_CHECK(issued == work, "recording message: event ", i, " was work ", work,
                " but rebuilds as ", issued);
  }
  t->storages() = r.list<devices::StorageRecord>([&](devices::StorageRecord& s) {
    s.bytes = r.i64();
    s.outlives_step = r.pod<bool>();
  });
  t->storage_resizes() = r.list<devices::StorageResize>(
      [&](devices::StorageResize& s) { s.at_op = r.i64(), s.id = r.i64(), s.bytes = r.i64(); });
}

void put_calls(Writer& w, const std::vector<SimCollectiveEvent>& calls) {
  w.list(calls, [&](const SimCollectiveEvent& e) {
    w.pod(e.type);
    w.str(e.op), w.str(e.group);
    w.i64(e.group_size), w.i64(e.bytes);
    w.str(e.stream);
    w.pod(e.async);
    w.i64(e.id);
  });
}
std::vector<SimCollectiveEvent> get_calls(Reader& r) {
  return r.list<SimCollectiveEvent>([&](SimCollectiveEvent& e) {
    e.type = r.pod<SimCollectiveEvent::Type>();
    e.op = r.str(), e.group = r.str();
    e.group_size = r.i64(), e.bytes = r.i64();
    e.stream = r.str();
    e.async = r.pod<bool>();
    e.id = r.i64();
  });
}

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
  w.list(p.calls, [&](const std::vector<SimCollectiveEvent>& c) { put_calls(w, c); });
  w.i64s(p.local_params);
  // Each rank's storage table and resizes; its memory is walked again on arrival.
  w.list(p.storages, [&](const std::vector<devices::StorageRecord>& t) {
    w.list(t, [&](const devices::StorageRecord& s) { w.i64(s.bytes), w.pod(s.outlives_step); });
  });
  w.list(p.storage_resizes, [&](const std::vector<devices::StorageResize>& t) {
    w.list(t,
           [&](const devices::StorageResize& s) { w.i64(s.at_op), w.i64(s.id), w.i64(s.bytes); });
  });
  w.list(p.holds_output, [&](bool b) { w.pod(b); });
  w.i64(p.param_elem_bytes);
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
  p->calls = r.list<std::vector<SimCollectiveEvent>>(
      [&](std::vector<SimCollectiveEvent>& c) { c = get_calls(r); });
  p->local_params = r.i64s();
  p->storages =
      r.list<std::vector<devices::StorageRecord>>([&](std::vector<devices::StorageRecord>& t) {
        t = r.list<devices::StorageRecord>(
            [&](devices::StorageRecord& s) { s.bytes = r.i64(), s.outlives_step = r.pod<bool>(); });
      });
  p->storage_resizes =
      r.list<std::vector<devices::StorageResize>>([&](std::vector<devices::StorageResize>& t) {
        t = r.list<devices::StorageResize>([&](devices::StorageResize& s) {
          s.at_op = r.i64(), s.id = r.i64(), s.bytes = r.i64();
        });
      });
  TITAN_CHECK(p->storages.size() == p->ranks.size() && p->storage_resizes.size() == p->ranks.size(),
              "recording message: storage tables for ", p->storages.size(), " of ", p->ranks.size(),
              " pipeline ranks");
  p->memory.resize(p->ranks.size());
  for (size_t q = 0; q < p->ranks.size(); ++q) p->memory[q] = rank_memory(*p, q);
  const std::vector<char> holds = r.list<char>([&](char& b) { b = r.pod<bool>(); });
  p->holds_output.assign(holds.begin(), holds.end());
  p->param_elem_bytes = r.i64();
}

void put(Writer& w, const RecordedStep& s) {
  put(w, s.dims);
  put(w, s.trace);
  put_calls(w, s.calls);
  w.i64(static_cast<int64_t>(s.op_counts.size()));
  for (const auto& [name, n] : s.op_counts) w.str(name), w.i64(n);
  w.i64(s.local_params), w.i64(s.param_elem_bytes), w.i64(s.microbatches), w.i64(s.global_batch);
  w.pod(static_cast<bool>(s.pipeline));
  if (s.pipeline) put(w, *s.pipeline);
}
void get(Reader& r, RecordedStep* s) {
  get(r, &s->dims);
  get(r, &s->trace);
  s->calls = get_calls(r);
  for (size_t i = 0, n = r.count(); i < n; ++i) {
    std::string name = r.str();
    s->op_counts[std::move(name)] = r.i64();
  }
  s->local_params = r.i64(), s->param_elem_bytes = r.i64(), s->microbatches = r.i64(),
  s->global_batch = r.i64();
  if (r.pod<bool>()) {
    s->pipeline = std::make_shared<RecordedPipeline>();
    get(r, s->pipeline.get());
  } else {
    s->memory = devices::trace_memory(s->trace);  // walked as record_step walks it
  }
}

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

}  // namespace

std::string encode_step(const RecordedStep& step) {
  Writer w;
  put(w, step);
  return w.take();
}

RecordedStep decode_step(std::string_view bytes) {
  Reader r(bytes);
  RecordedStep s;
  get(r, &s);
  r.done();
  return s;
}

std::string encode_probe(const ProbeRecording& probe) {
  Writer w;
  w.i64(probe.degree);
  put(w, probe.step);
  put(w, probe_notes(probe));
  return w.take();
}

ProbeRecording decode_probe(std::string_view bytes, const JobConfig& cfg) {
  Reader r(bytes);
  const int64_t degree = r.i64();
  RecordedStep step;
  get(r, &step);
  ShardNotes notes;
  get(r, &notes);
  r.done();
  return make_probe(std::move(step), degree, std::move(notes), cfg);
}

}  // namespace titan
