// What FSDP notes while a shard-resizing probe is recorded (trainer/simulate/shard_resize.h):
// its plans' parameter sizes, the storages sized by a parameter's shard and its list
// collectives. Shared by shard_plan.cpp, which follows them through the trace, and
// recording_wire_shard_notes.cpp, which carries them from a recorder process
// (study/recorder_pool.h).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "devices/collective_cost.h"

namespace titan {

// One list collective FSDP issued.
struct ShardCall {
  devices::CollectiveKind kind = devices::CollectiveKind::kAllGather;
  std::string group;  // as the trace names it (placement_group)
  std::vector<int64_t> numels, elem;
  std::vector<at::ScalarType> dtypes;
  bool padded = true;
  int64_t position = 0;  // collectives the rank had issued before it: its own come next
};

// What FSDP noted during one recording, per FSDP plan (one per pipeline rank, in order).
struct ShardNotes {
  struct Rank {
    int64_t degree = 0;
    std::vector<int64_t> numels;
    std::unordered_map<int64_t, int64_t> seeds;  // storage id (TensorUse::id) -> parameter numel
    std::vector<ShardCall> calls;
  };
  std::vector<Rank> ranks;
  std::string conflict;  // a note that does not fit (then nothing is resized)
};

}  // namespace titan
