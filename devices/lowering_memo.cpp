// Remembered lowerings (see lowering_memo.h).
#include "devices/lowering_memo.h"

namespace titan::devices {

namespace {

// Whether the kernel lowered from ops[begin, end) read an op marked resized: one of its own,
// or the matmul whose epilogue a chain may fold into.
bool reads_resized(const std::vector<const OpDesc*>& ops, size_t begin, size_t end) {
  for (size_t x = begin > 0 ? begin - 1 : 0; x < end; ++x)
    if (ops[x]->resized) return true;
  return false;
}

}  // namespace

void LoweringMemo::lower(const ComputeModel& model, uint64_t ops_id, const std::vector<const OpDesc*>& ops,
                         std::vector<Kernel>* out) {
  // A named trace numbers its ops one after the other, so a run of them is its first op and
  // its length; anything else is lowered as it is.
  const bool named = ops_id != 0 && !ops.empty() && ops.front()->index >= 0 &&
                     ops.back()->index == ops.front()->index + static_cast<int64_t>(ops.size()) - 1;
  if (!named) {
    model.lower(ops, out);
    return;
  }
  if (ops_id != last_id_ || !last_) {
    if (kernels_ >= capacity_) traces_.clear(), kernels_ = 0;
    last_ = &traces_[ops_id];
    last_id_ = ops_id;
  }
  PerTrace& t = *last_;
  // A replay runs a trace from its first op, so the first run seen starts the trace.
  if (t.base < 0) t.base = ops.front()->index;
  if (ops.front()->index < t.base) {
    model.lower(ops, out);
    return;
  }
  const auto first = static_cast<size_t>(ops.front()->index - t.base);
  if (first >= t.first.size()) t.first.resize(first + 1, -1);
  for (int32_t r = t.first[first]; r >= 0; r = t.runs[static_cast<size_t>(r)].next) {
    const Run& run = t.runs[static_cast<size_t>(r)];
    if (run.count != ops.size()) continue;
    ++hits;
    *out = run.kernels;
    for (const Marked& m : run.marked) {
      if (m.traffic.chain) model.recost_chain(ops, m.begin, m.end, m.traffic, &(*out)[m.kernel]);
      else model.lower_at(ops, m.begin, &(*out)[m.kernel]);
    }
    return;
  }
  ++misses;
  out->clear();
  out->reserve(ops.size());
  Run run;
  run.count = ops.size();
  thread_local ChainTraffic traffic;
  for (size_t i = 0; i < ops.size();) {
    const size_t next = model.lower_at(ops, i, &out->emplace_back(), &traffic);
    if (reads_resized(ops, i, next))
      run.marked.push_back({static_cast<uint32_t>(out->size() - 1), static_cast<uint32_t>(i),
                            static_cast<uint32_t>(next), traffic});
    i = next;
  }
  run.kernels = *out;
  run.next = t.first[first];
  kernels_ += run.kernels.size();
  t.first[first] = static_cast<int32_t>(t.runs.size());
  t.runs.push_back(std::move(run));
}

}  // namespace titan::devices
