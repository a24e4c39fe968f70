// FSDP's list collectives re-planned at another dp_shard degree: their tensors' bytes and the
// buckets the communicator fuses them into, as it plans them (collectives/communicator_lists.cpp).
// Shard resizing (shard_resize.h) matches a probe's buckets to its trace and rewrites them.
#pragma once

#include <cstdint>
#include <vector>

#include "trainer/config/job_config.h"
#include "trainer/simulate/shard_notes.h"

namespace titan {

// The communicator's bucket cap for cfg, in bytes.
int64_t cap_bytes(const JobConfig& cfg);

// Each tensor's bytes in call c at degree w.
std::vector<int64_t> call_bytes(const ShardCall& c, int64_t w);

// Call c's buckets at degree w: tensor indices per collective issued (fused: planned under
// cap; separate: one per tensor).
std::vector<std::vector<size_t>> call_buckets(const ShardCall& c, int64_t w, bool fused, int64_t cap);

// The bytes of one bucket of tensors whose sizes are `bytes`.
inline int64_t bucket_bytes(const std::vector<int64_t>& bytes, const std::vector<size_t>& bucket) {
  int64_t sum = 0;
  for (size_t i : bucket) sum += bytes[i];
  return sum;
}

}  // namespace titan
