// Late writes added to a recorded trace (see late_writes.h).
#include "trainer/simulate/late_writes.h"

#include <algorithm>

namespace titan {

devices::Trace with_late_writes(devices::Trace&& trace, LateWrites writes) {
  std::stable_sort(writes.begin(), writes.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  devices::Trace t;
  size_t k = 0;
  int64_t at = 0;
  for (const devices::TraceEvent& e : trace.events()) {
    if (e.type == devices::TraceEvent::Type::kIssue) {
      t.issue(e.collective);
    } else if (e.type == devices::TraceEvent::Type::kWait) {
      t.wait(e.work);
    } else {
      devices::OpDesc op = e.op;
      for (; k < writes.size() && writes[k].first == at; ++k) op.writes.push_back(writes[k].second);
      t.compute(op);
      ++at;
    }
  }
  t.storage_resizes() = std::move(trace.storage_resizes());
  return t;
}

}  // namespace titan
