// Exposed communication by kind (see exposed_comm.h).
#include "trainer/simulate/exposed_comm.h"

#include <algorithm>

#include "devices/exposed_by_kind.h"

namespace titan {

std::vector<devices::CostItem> exposed_by_kind(const devices::StepReport& r) {
  devices::ExposedByKind x;
  for (const auto& e : r.events) x.add(e.kind, e.category, e.start_s, e.end_s);
  return x.result();
}

void add_by_kind(std::vector<devices::CostItem>& sum, const std::vector<devices::CostItem>& add) {
  for (const auto& a : add) {
    auto it = std::find_if(sum.begin(), sum.end(), [&](const auto& s) { return s.category == a.category; });
    if (it == sum.end()) sum.push_back(a);
    else it->seconds += a.seconds;
  }
}

}  // namespace titan
