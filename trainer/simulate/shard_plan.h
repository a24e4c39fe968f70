// Where a shard-resizing probe's sizes follow the dp_shard degree (shard_resize.h): the shard
// storages found through the trace's data flow from what FSDP noted, every use on them with its
// size class, the element-wise ops whose figures follow, FSDP's collectives matched to the
// trace's issues, and the memory walk's shard-sized entries. Worked out once per probe, by
// the first resize; shared by shard_probe.cpp, shard_rebucket.cpp and shard_resize.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "devices/trace_memory.h"
#include "trainer/simulate/shard_notes.h"
#include "trainer/simulate/shard_resize.h"

namespace titan {

// Where a probe's sizes follow the shard degree, per rank.
struct ShardRewrites {
  struct Use {
    uint32_t trace = 0, event = 0, slot = 0;
    bool write = false, padded = false;
    int64_t numel = 0, elem = 0;
  };
  struct Event {
    uint32_t trace = 0, event = 0;
  };
  struct Collective {
    uint32_t trace = 0, event = 0, call = 0, bucket = 0;
  };
  struct Rank {
    std::vector<int64_t> numels;
    std::vector<Use> uses;
    std::vector<Event> pointwise;  // ops whose bytes and FLOPs follow from their uses
    std::vector<ShardCall> calls;
    std::vector<std::vector<std::vector<size_t>>> buckets;  // per call, at the probe degree
    std::vector<Collective> collectives;
    // The memory walk's input at the probe (devices/trace_memory.h), shared by every step
    // resized from it, and the shard-sized entries in it (by increasing index) and in the
    // storage table.
    std::shared_ptr<const devices::LiveRanges> live;
    struct Sized {
      uint32_t index = 0;  // into live->ranges / the storage table
      bool padded = false;
      int64_t numel = 0, elem = 0;
    };
    std::vector<Sized> ranges, storages, resizes;
  };
  int64_t degree = 0;
  bool fused = true;
  int64_t cap = 0;
  std::vector<Rank> ranks;
};

struct ShardPlan {
  ShardNotes notes;
  int64_t degree = 0;
  bool fused = true;
  int64_t cap = 0;
  std::once_flag once;
  ShardRewrites rewrites;
  std::string error;  // why the probe's sizes cannot be followed (then nothing is resized)
};

// The probe's rewrites, worked out by the first call (on that thread, once); nullptr, with
// why, when its sizes cannot be followed.
const ShardRewrites* shard_rewrites(const ProbeRecording& probe, std::string* why);

// The traces of one rank, in program order: the step's, or a pipeline rank's segments.
template <class Step>
auto rank_traces(Step& step, size_t q) {
  using T = std::conditional_t<std::is_const_v<Step>, const devices::Trace, devices::Trace>;
  std::vector<T*> out;
  if (!step.pipeline) {
    out.push_back(&step.trace);
  } else {
    for (auto& seg : step.pipeline->ranks[q]) out.push_back(&seg.trace);
  }
  return out;
}

// Sets *why and returns false: a resize's way to refuse.
inline bool fail(std::string* why, const std::string& text) {
  *why = text;
  return false;
}

}  // namespace titan
