// FSDP's collectives re-planned (see shard_buckets.h).
#include "trainer/simulate/shard_buckets.h"

#include <algorithm>

#include "collectives/fusion.h"
#include "trainer/simulate/shard_sizes.h"

namespace titan {

int64_t cap_bytes(const JobConfig& cfg) {
  // As the communicator plans its fused buckets (collectives/communicator_lists.cpp).
  return std::max<int64_t>(1, static_cast<int64_t>(cfg.comm.bucket_cap_mb * 1024 * 1024));
}

std::vector<int64_t> call_bytes(const ShardCall& c, int64_t w) {
  std::vector<int64_t> b;
  for (size_t i = 0; i < c.numels.size(); ++i) b.push_back(shard_bytes(c.numels[i], c.padded, c.elem[i], w));
  return b;
}

std::vector<std::vector<size_t>> call_buckets(const ShardCall& c, int64_t w, bool fused, int64_t cap) {
  if (fused) return plan_buckets(call_bytes(c, w), c.dtypes, cap);
  std::vector<std::vector<size_t>> one_each;  // separate mode: one collective per tensor
  for (size_t i = 0; i < c.numels.size(); ++i) one_each.push_back({i});
  return one_each;
}

}  // namespace titan
