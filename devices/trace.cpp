// Trace (see trace.h): recording a step's events and linking their data flow.
#include "devices/trace.h"

#include <algorithm>
#include <atomic>
#include <unordered_map>

#include "common/error.h"

namespace titan::devices {

uint64_t Trace::new_content_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

const InternedName& default_comm_stream() {
  static const InternedName comm("comm");
  return comm;
}

// Links the op into the step's data flow: who wrote what it reads, and (on the writer) that
// it was read. A view aliases its input's storage: it neither produces nor consumes data.
// The event is made in place: a TraceEvent is a few hundred bytes, moved once less per op.
void Trace::compute(OpDesc&& op) {
  content_id_ = ops_id_ = 0;
  TraceEvent& e = events_.emplace_back();
  op_event_.push_back(events_.size() - 1);
  e.type = TraceEvent::Type::kCompute;
  e.op = std::move(op);
  OpDesc& d = e.op;
  d.index = static_cast<int64_t>(op_event_.size()) - 1;
  for (TensorUse& u : d.reads) u.flow = -1;
  for (TensorUse& u : d.writes) u.flow = -1;
  if (d.kind != OpKind::kView) {
    for (TensorUse& u : d.reads) {
      const Writer* writer = u.id == 0 ? nullptr : writer_of(u.id);
      if (!writer) continue;
      u.flow = writer->op;
      events_[op_event_[static_cast<size_t>(writer->op)]].op.writes[writer->slot].flow = d.index;
    }
    for (size_t w = 0; w < d.writes.size(); ++w)
      if (d.writes[w].id != 0) set_writer(d.writes[w].id, Writer{d.index, w});
  }
}

int64_t Trace::issue(const CollectiveDesc& c) {
  content_id_ = ops_id_ = 0;
  TraceEvent e;
  e.type = TraceEvent::Type::kIssue;
  e.collective = c;
  const int64_t work = next_work_++;
  e.work = work;
  events_.push_back(std::move(e));
  return work;
}

void Trace::wait(int64_t work) {
  TITAN_CHECK(work >= 0 && work < next_work_, "wait on unknown work ", work);
  content_id_ = ops_id_ = 0;
  TraceEvent e;
  e.type = TraceEvent::Type::kWait;
  e.work = work;
  events_.push_back(std::move(e));
}

std::vector<TraceEvent> Trace::take_events() {
  content_id_ = ops_id_ = 0;
  std::vector<TraceEvent> out = std::move(events_);
  events_.clear();
  op_event_.clear();
  writer_.clear();
  next_work_ = 0;
  return out;
}

// The data flow of one tensor depends only on the ops that read or write it, in op order: so
// relinking the named tensors alone, in one pass over the ops as compute() made it, gives what
// recording the whole trace again with the writes in place would (without copying a single op).
void Trace::add_writes(std::vector<std::pair<int64_t, TensorUse>> writes) {
  std::stable_sort(writes.begin(), writes.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  if (writes.empty()) return;
  content_id_ = ops_id_ = 0;
  // Checked before any is added, so that a bad index leaves the trace as it was.
  const int64_t lo = writes.front().first, hi = writes.back().first;
  TITAN_CHECK(lo >= 0 && static_cast<size_t>(hi) < op_event_.size(), "a write added to op ", lo < 0 ? lo : hi, " of ",
              op_event_.size());
  std::unordered_map<int64_t, Writer> relinked;  // the named tensors, each's writer so far
  for (const auto& [op, use] : writes) {
    OpDesc& d = events_[op_event_[static_cast<size_t>(op)]].op;
    d.writes.push_back(use);
    d.writes.back().flow = -1;
    if (d.kind != OpKind::kView && use.id != 0) relinked.emplace(use.id, Writer{});
  }
  if (relinked.empty()) return;
  for (size_t event : op_event_) {
    OpDesc& d = events_[event].op;
    if (d.kind == OpKind::kView) continue;
    for (TensorUse& u : d.reads) {
      auto it = relinked.find(u.id);
      if (it == relinked.end()) continue;
      u.flow = it->second.op;
      if (it->second.op >= 0)
        events_[op_event_[static_cast<size_t>(it->second.op)]].op.writes[it->second.slot].flow = d.index;
    }
    for (size_t w = 0; w < d.writes.size(); ++w) {
      auto it = relinked.find(d.writes[w].id);
      if (it == relinked.end()) continue;
      d.writes[w].flow = -1;
      it->second = Writer{d.index, w};
    }
  }
  for (const auto& [id, w] : relinked)
    if (w.op >= 0) set_writer(id, w);
}

}  // namespace titan::devices
