// plan_buckets(): how the fused collective mode groups a list of tensors into flat
// buffers. Used by Communicator's list ops (and by the simulator, to see the same buckets).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <vector>

namespace titan {

// Indices of the tensors in each bucket. Every bucket holds one dtype; dtypes keep the
// order of their first appearance and tensors keep their order within a dtype. A bucket is
// closed when the next tensor would take it past cap_bytes; a tensor larger than the cap
// gets a bucket of its own. Same input on every rank -> same buckets on every rank.
std::vector<std::vector<size_t>> plan_buckets(const std::vector<int64_t>& bytes,
                                              const std::vector<at::ScalarType>& dtypes,
                                              int64_t cap_bytes);

}  // namespace titan
