#include "collectives/fusion.h"

#include <algorithm>

namespace titan {

std::vector<std::vector<size_t>> plan_buckets(const std::vector<int64_t>& bytes,
                                              const std::vector<at::ScalarType>& dtypes,
                                              int64_t cap_bytes) {
  std::vector<at::ScalarType> order;
  for (auto d : dtypes)
    if (std::find(order.begin(), order.end(), d) == order.end()) order.push_back(d);
  std::vector<std::vector<size_t>> buckets;
  for (auto d : order) {
    std::vector<size_t> open;
    int64_t open_bytes = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
      if (dtypes[i] != d) continue;
      if (!open.empty() && open_bytes + bytes[i] > cap_bytes) {
        buckets.push_back(std::move(open));
        open.clear();
        open_bytes = 0;
      }
      open.push_back(i);
      open_bytes += bytes[i];
    }
    if (!open.empty()) buckets.push_back(std::move(open));
  }
  return buckets;
}

}  // namespace titan
