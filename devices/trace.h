// Trace: one representative rank's step as the recorder saw it (compute ops with their data
// flow, collectives issued and waited on, the storages they touch). Recorded by
// trainer/simulate/trace_recorder.h, replayed by devices/step_simulator.h, walked for memory by
// devices/trace_memory.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/id_map.h"
#include "devices/collective_cost.h"
#include "devices/compute_cost.h"

namespace titan::devices {

// The stream a collective goes on unless it names one ("comm"), interned once.
const InternedName& default_comm_stream();

struct CollectiveDesc {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  InternedName group;         // mesh dim or flattened group name (Placement::group)
  int64_t bytes = 0;          // nccl-tests convention, see collective_cost.h
  InternedName stream = default_comm_stream();  // communication stream it was issued on
};

// A storage the recorded ops touch (TensorUse::id), for the memory walk (devices/trace_memory.h).
struct StorageRecord {
  int64_t bytes = 0;           // its size when the recorder first saw it
  bool outlives_step = false;  // still referenced when the step ended: state, not a temporary
};
// A storage a parallel plan resized outside any op (FSDP frees a gathered buffer after its
// block ran and refills it before the next gather), before compute op number at_op.
struct StorageResize {
  int64_t at_op = 0;
  int64_t id = 0;
  int64_t bytes = 0;
};

struct TraceEvent {
  enum class Type { kCompute, kIssue, kWait };
  Type type = Type::kCompute;
  OpDesc op;                // kCompute
  CollectiveDesc collective;  // kIssue
  int64_t work = -1;        // kIssue: the handle it returns; kWait: the handle waited on
};

// One representative rank's step in program order. The recorder calls compute() per aten op,
// issue() when the sim backend receives a collective (returns its Work id) and wait() when
// that Work is waited on (a blocking collective is issue + wait).
class Trace {
 public:
  void compute(OpDesc&& op);
  void compute(const OpDesc& op) { compute(OpDesc(op)); }
  int64_t issue(const CollectiveDesc& c);
  void wait(int64_t work);
  int64_t blocking(const CollectiveDesc& c) {
    int64_t w = issue(c);
    wait(w);
    return w;
  }
  // Room for `events` events before the next reallocation (a TraceEvent is a few hundred bytes).
  void reserve(size_t events) { events_.reserve(events), op_event_.reserve(events); }
  const std::vector<TraceEvent>& events() const { return events_; }
  // Hands the events over, so that whoever cuts them up (a pipeline rank's segments) moves
  // each op rather than copying it; the trace keeps its storages and resizes and is left as
  // if no event had been recorded.
  std::vector<TraceEvent> take_events();
  size_t size() const { return events_.size(); }
  size_t compute_ops() const { return op_event_.size(); }

  // Storages by id (index id - 1; ids are 1, 2, ... in the order the recorder saw them).
  std::vector<StorageRecord>& storages() { return storages_; }
  const std::vector<StorageRecord>& storages() const { return storages_; }
  std::vector<StorageResize>& storage_resizes() { return resizes_; }
  const std::vector<StorageResize>& storage_resizes() const { return resizes_; }

  // Writes learnt of after their ops were recorded, (compute op number, tensor it also wrote):
  // each is appended to its op's writes (in op order, then in the order given) and the data
  // flow of the tensors they name is linked again, as compute() would have linked it had the
  // writes been there from the start (the data flow of every other tensor is unchanged).
  void add_writes(std::vector<std::pair<int64_t, TensorUse>> writes);

  // Who owns a trace whose events are final may name them (devices/replay_memo.h: a replay
  // of the same events is then looked up instead of made again); 0: unnamed. Copies keep
  // the name. Every change through this class drops it; whoever changes the events otherwise
  // (shard resizing writes sizes in place) must drop it too.
  uint64_t content_id() const { return content_id_; }
  void set_content_id(uint64_t id) { content_id_ = id; }
  // A name no trace of this process had before.
  static uint64_t new_content_id();
  // Names the trace's compute ops: traces with the same ops_id hold the same ops at the same op
  // indices, apart from the sizes of those marked OpDesc::resized, and the same ops marked. A
  // probe names its traces' ops as it names their events. Shard resizing marks the ops whose
  // sizes it rewrites, the same ones at every degree, and renames the trace's ops
  // (mark_ops_resized) where it drops content_id. Every change through this class drops the
  // name; 0: unnamed. A replay reuses the kernels it lowered for a run of named ops
  // (devices/lowering_memo.h).
  uint64_t ops_id() const { return ops_id_; }
  void set_ops_id(uint64_t id) { ops_id_ = id; }
  // The name every resize of a probe's trace gives its ops (content ids never reach the bit).
  void mark_ops_resized() {
    if (ops_id_ != 0) ops_id_ |= uint64_t{1} << 63;
  }

 private:
  struct Writer {
    int64_t op = -1;  // index of the op that last wrote the tensor
    size_t slot = 0;  // which of its writes
  };
  std::vector<TraceEvent> events_;
  std::vector<size_t> op_event_;  // event position of each compute op
  IdMap<Writer> writer_;  // the last writer of each tensor, by storage id
  const Writer* writer_of(int64_t id) const { return writer_.find(id); }
  void set_writer(int64_t id, Writer w) { writer_.set(id, w); }
  int64_t next_work_ = 0;
  std::vector<StorageRecord> storages_;
  std::vector<StorageResize> resizes_;
  uint64_t content_id_ = 0, ops_id_ = 0;
};

}  // namespace titan::devices
