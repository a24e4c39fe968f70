// Recorded steps as bytes (see recording_wire.h): the step itself and the entry points; its
// parts' codecs are recording_wire_trace.cpp, _pipeline.cpp and _shard_notes.cpp.
#include "trainer/simulate/recording_wire.h"

#include <utility>

#include "trainer/simulate/recording_wire_format.h"

namespace titan {

namespace wire {

// As in recording_wire_trace.cpp: a field added to these structs must be carried here too.
static_assert(sizeof(RecordedStep) - sizeof(devices::ChipSpec) - sizeof(devices::Placement) == 384 &&
                  sizeof(ParallelDims) == 48,
              "a recorded step changed: carry the new fields in recording_wire.cpp, then update these sizes");

// Static, not in an unnamed namespace: the entry points below name them wire::put / get, and
// a qualified name does not look into an unnamed namespace when wire declares a put of its own.
static void put(Writer& w, const ParallelDims& d) {
  for (int64_t v : {d.dp_replicate, d.dp_shard, d.cp, d.tp, d.pp, d.world_size}) w.i64(v);
}
static void get(Reader& r, ParallelDims* d) {
  for (int64_t* v : {&d->dp_replicate, &d->dp_shard, &d->cp, &d->tp, &d->pp, &d->world_size})
    *v = r.i64();
}

static void put(Writer& w, const RecordedStep& s) {
  put(w, s.dims);
  put(w, s.trace);
  put(w, s.calls);
  w.i64(static_cast<int64_t>(s.op_counts.size()));
  for (const auto& [name, n] : s.op_counts) w.str(name), w.i64(n);
  w.i64(s.local_params), w.i64(s.param_elem_bytes), w.i64(s.microbatches), w.i64(s.global_batch);
  w.pod(static_cast<bool>(s.pipeline));
  if (s.pipeline) put(w, *s.pipeline);
}
static void get(Reader& r, RecordedStep* s) {
  get(r, &s->dims);
  get(r, &s->trace);
  get(r, &s->calls);
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

}  // namespace wire

std::string encode_step(const RecordedStep& step) {
  wire::Writer w;
  wire::put(w, step);
  return w.take();
}

RecordedStep decode_step(std::string_view bytes) {
  wire::Reader r(bytes);
  RecordedStep s;
  wire::get(r, &s);
  r.done();
  return s;
}

std::string encode_probe(const ProbeRecording& probe) {
  wire::Writer w;
  w.i64(probe.degree);
  wire::put(w, probe.step);
  wire::put(w, probe_notes(probe));
  return w.take();
}

ProbeRecording decode_probe(std::string_view bytes, const JobConfig& cfg) {
  wire::Reader r(bytes);
  const int64_t degree = r.i64();
  RecordedStep step;
  wire::get(r, &step);
  ShardNotes notes;
  wire::get(r, &notes);
  r.done();
  return make_probe(std::move(step), degree, std::move(notes), cfg);
}

}  // namespace titan
