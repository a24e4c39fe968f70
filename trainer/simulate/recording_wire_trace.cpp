// Traces and Communicator calls as bytes (see recording_wire_format.h).
#include "trainer/simulate/recording_wire_format.h"

namespace titan::wire {

// A field added to one of these structs must be carried here too (or the recorder processes
// would drop it silently): each size is checked, so that such a change stops the build here.
// Not carried: Trace::content_id and ops_id, names that hold within one process only
// (make_probe names a probe decoded here), and OpDesc::resized, which only shard resizing
// sets (a recording is sent before any resize).
static_assert(
    sizeof(devices::OpDesc) == 224 && sizeof(devices::CollectiveDesc) == 32 &&
        sizeof(devices::TraceEvent) == 272 && sizeof(devices::Trace) == 200,
    "devices::Trace changed: carry the new fields in recording_wire_trace.cpp, then update these sizes");
static_assert(sizeof(SimCollectiveEvent) == 136,
              "SimCollectiveEvent changed: carry the new fields in recording_wire_trace.cpp, then update its size");

namespace {

void put_uses(Writer& w, const std::vector<devices::TensorUse>& uses) {
  w.list(uses, [&](const devices::TensorUse& u) { w.i64(u.id), w.i64(u.bytes); });
}
std::vector<devices::TensorUse> get_uses(Reader& r) {
  return r.list<devices::TensorUse>(
      [&](devices::TensorUse& u) { u.id = r.i64(), u.bytes = r.i64(); });
}

// Which of an op's shapes differ from their defaults and travel: most ops are neither a matmul
// nor attention, and their default shapes were 90 of an op's some 150 fixed bytes.
enum ShapeFlags : uint8_t { kHasMatmul = 1, kHasGroups = 2, kHasAttention = 4 };

bool is_default(const devices::MatmulShape& s) {
  const devices::MatmulShape d;
  return s.batch == d.batch && s.m == d.m && s.n == d.n && s.k == d.k;
}
bool is_default(const devices::AttentionShape& a) {
  const devices::AttentionShape d;
  return a.batch == d.batch && a.heads == d.heads && a.kv_heads == d.kv_heads && a.q_len == d.q_len &&
         a.kv_len == d.kv_len && a.head_dim == d.head_dim && a.causal == d.causal && a.backward == d.backward;
}

void put_op(Writer& w, const devices::OpDesc& op) {
  w.name(op.name);
  w.pod(op.kind);
  w.pod(op.flops);
  w.i64(op.bytes_read), w.i64(op.bytes_written);
  const uint8_t shapes = (is_default(op.mm) ? 0 : kHasMatmul) | (op.groups.empty() ? 0 : kHasGroups) |
                         (is_default(op.attn) ? 0 : kHasAttention);
  w.pod(shapes);
  if (shapes & kHasMatmul) w.pod(op.mm);
  if (shapes & kHasGroups) w.list(op.groups, [&](const devices::MatmulShape& s) { w.pod(s); });
  if (shapes & kHasAttention) {
    const devices::AttentionShape& a = op.attn;  // field by field: no padding bytes on the wire
    for (int64_t v : {a.batch, a.heads, a.kv_heads, a.q_len, a.kv_len, a.head_dim}) w.i64(v);
    w.pod(a.causal), w.pod(a.backward);
  }
  w.i64(op.dtype_bytes);
  w.pod(op.outside_blocks);
  put_uses(w, op.reads);
  put_uses(w, op.writes);
}
devices::OpDesc get_op(Reader& r) {
  devices::OpDesc op;
  op.name = r.name();
  op.kind = r.pod<devices::OpKind>();
  op.flops = r.pod<double>();
  op.bytes_read = r.i64(), op.bytes_written = r.i64();
  const auto shapes = r.pod<uint8_t>();
  TITAN_CHECK(shapes < 8, "recording message: op shapes flags ", static_cast<int>(shapes), " unknown");
  if (shapes & kHasMatmul) op.mm = r.pod<devices::MatmulShape>();
  if (shapes & kHasGroups)
    op.groups = r.list<devices::MatmulShape>([&](devices::MatmulShape& s) { s = r.pod<devices::MatmulShape>(); });
  if (shapes & kHasAttention) {
    devices::AttentionShape& a = op.attn;
    for (int64_t* v : {&a.batch, &a.heads, &a.kv_heads, &a.q_len, &a.kv_len, &a.head_dim})
      *v = r.i64();
    a.causal = r.pod<bool>(), a.backward = r.pod<bool>();
  }
  op.dtype_bytes = r.i64();
  op.outside_blocks = r.pod<bool>();
  op.reads = get_uses(r);
  op.writes = get_uses(r);
  return op;
}

// Ops, issues and waits in order; the data flow and the handles are Trace's to derive.
}  // namespace

void put(Writer& w, const devices::Trace& t) {
  using Type = devices::TraceEvent::Type;
  w.list(t.events(), [&](const devices::TraceEvent& ev) {
    w.pod(ev.type);
    if (ev.type == Type::kCompute) return put_op(w, ev.op);
    w.i64(ev.work);
    if (ev.type == Type::kWait) return;
    w.pod(ev.collective.kind);
    w.name(ev.collective.group);
    w.i64(ev.collective.bytes);
    w.name(ev.collective.stream);
  });
  put(w, t.storages());
  put(w, t.storage_resizes());
}
void get(Reader& r, devices::Trace* t) {
  using Type = devices::TraceEvent::Type;
  *t = devices::Trace();
  // Room for every event at once: growing by doubling moved each event (then 400 bytes) about twice
  // and faulted in pages for twice the room. An event takes at least its type and eight bytes
  // (a work handle, or its op's name length), so a damaged count cannot reserve more than the
  // message could hold.
  const size_t n = r.count(sizeof(Type) + sizeof(int64_t));
  t->reserve(n);
  for (size_t i = 0; i < n; ++i) {
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
    c.group = r.name();
    c.bytes = r.i64();
    c.stream = r.name();
    const int64_t issued = t->issue(c);
    TITAN_CHECK(issued == work, "recording message: event ", i, " was work ", work,
                " but rebuilds as ", issued);
  }
  get(r, &t->storages());
  get(r, &t->storage_resizes());
}

void put(Writer& w, const std::vector<devices::StorageRecord>& table) {
  w.list(table, [&](const devices::StorageRecord& s) { w.i64(s.bytes), w.pod(s.outlives_step); });
}
void get(Reader& r, std::vector<devices::StorageRecord>* table) {
  *table = r.list<devices::StorageRecord>([&](devices::StorageRecord& s) {
    s.bytes = r.i64();
    s.outlives_step = r.pod<bool>();
  });
}

void put(Writer& w, const std::vector<devices::StorageResize>& resizes) {
  w.list(resizes, [&](const devices::StorageResize& s) { w.i64(s.at_op), w.i64(s.id), w.i64(s.bytes); });
}
void get(Reader& r, std::vector<devices::StorageResize>* resizes) {
  *resizes = r.list<devices::StorageResize>(
      [&](devices::StorageResize& s) { s.at_op = r.i64(), s.id = r.i64(), s.bytes = r.i64(); });
}

void put(Writer& w, const std::vector<SimCollectiveEvent>& calls) {
  w.list(calls, [&](const SimCollectiveEvent& e) {
    w.pod(e.type);
    w.str(e.op), w.str(e.group);
    w.i64(e.group_size), w.i64(e.bytes);
    w.str(e.stream);
    w.pod(e.async);
    w.i64(e.id);
  });
}
void get(Reader& r, std::vector<SimCollectiveEvent>* calls) {
  *calls = r.list<SimCollectiveEvent>([&](SimCollectiveEvent& e) {
    e.type = r.pod<SimCollectiveEvent::Type>();
    e.op = r.str(), e.group = r.str();
    e.group_size = r.i64(), e.bytes = r.i64();
    e.stream = r.str();
    e.async = r.pod<bool>();
    e.id = r.i64();
  });
}

}  // namespace titan::wire

