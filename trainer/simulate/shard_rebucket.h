// A resized step's layout and the rebuilding of its issues and waits (shard_resize.h): when a
// call's buckets split differently at the target degree, its issues and waits in the trace are
// rebuilt for the new buckets, and the layout records where the probe's events went so that a
// later resize into the same step, at a degree of the same split, rewrites sizes in place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/simulate/shard_plan.h"

namespace titan {

using Split =
    std::vector<std::vector<std::vector<std::vector<size_t>>>>;  // per rank, per call: its buckets

struct ResizedLayout {
  Split split;
  struct Issue {
    uint32_t trace = 0, event = 0, call = 0, bucket = 0;  // a bucket issued anew, where it went
  };
  struct Rank {
    std::vector<std::vector<uint32_t>>
        moved;  // per trace: each probe event's position (empty: the same)
    std::vector<Issue> issued;
  };
  std::vector<Rank> ranks;
};

// The calls whose buckets split differently at w: in each trace, a call's k buckets were
// issued back to back and waited for back to back (collectives/communicator_lists.cpp,
// sim_backend.cpp), so its first issue becomes the new buckets' issues, its first wait their
// waits, the others go, and work handles are numbered again in issue order, as a recording
// at w numbers them. Compute ops keep their places among the ops (their data flow indices).
// The events are this resize's own copy: they move into the rebuilt traces. *out: where they went.
bool rebucket(const ShardRewrites::Rank& r, const std::vector<std::vector<std::vector<size_t>>>& buckets, int64_t w,
              const std::vector<std::vector<devices::TraceEvent>*>& events, ResizedLayout::Rank* out,
              std::string* why);

}  // namespace titan
