// Exposed communication by kind (see exposed_comm.h).
#include "trainer/simulate/exposed_comm.h"

#include <algorithm>

namespace titan {

void add_by_kind(std::vector<devices::CostItem>& sum, const std::vector<devices::CostItem>& add) {
  for (const auto& a : add) {
    auto it = std::find_if(sum.begin(), sum.end(), [&](const auto& s) { return s.category == a.category; });
    if (it == sum.end()) sum.push_back(a);
    else it->seconds += a.seconds;
  }
}

}  // namespace titan
