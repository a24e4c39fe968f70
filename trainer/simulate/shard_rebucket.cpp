// Rebuilding a resized step's issues and waits (see shard_rebucket.h).
#include "trainer/simulate/shard_rebucket.h"

#include <map>
#include <unordered_map>
#include <utility>

#include "trainer/simulate/shard_buckets.h"

namespace titan {

namespace {

using devices::TraceEvent;

constexpr uint32_t kGone = UINT32_MAX;

}  // namespace

bool rebucket(const ShardRewrites::Rank& r, const std::vector<std::vector<std::vector<size_t>>>& buckets, int64_t w,
              const std::vector<std::vector<TraceEvent>*>& events, ResizedLayout::Rank* out,
              std::string* why) {
  std::map<std::pair<uint32_t, uint32_t>, const ShardRewrites::Collective*> issue_of;
  std::vector<bool> touched(events.size(), false);  // traces holding a call that splits anew
  for (const auto& c : r.collectives) {
    issue_of[{c.trace, c.event}] = &c;
    if (buckets[c.call] != r.buckets[c.call]) touched[c.trace] = true;
  }
  out->moved.assign(events.size(), {});
  out->issued.clear();
  for (uint32_t ti = 0; ti < events.size(); ++ti) {
    if (!touched[ti]) continue;
    std::vector<TraceEvent>& old = *events[ti];
    std::vector<uint32_t>& moved = out->moved[ti];
    moved.assign(old.size(), kGone);
    std::vector<TraceEvent> rebuilt;
    rebuilt.reserve(old.size());
    std::unordered_map<int64_t, std::vector<int64_t>> handles;  // old work -> new works
    int64_t next = 0;
    for (uint32_t ei = 0; ei < old.size(); ++ei) {
      TraceEvent& ev = old[ei];
      const auto here = static_cast<uint32_t>(rebuilt.size());
      if (ev.type == TraceEvent::Type::kCompute) {
        moved[ei] = here;
        rebuilt.push_back(std::move(ev));
        continue;
      }
      if (ev.type == TraceEvent::Type::kWait) {
        auto it = handles.find(ev.work);
        if (it == handles.end()) return fail(why, "a wait on a collective not issued before it");
        for (int64_t h : it->second) {
          TraceEvent wait = ev;
          wait.work = h;
          rebuilt.push_back(std::move(wait));
        }
        continue;
      }
      auto call = issue_of.find({ti, ei});
      std::vector<int64_t>& mine = handles[ev.work];
      if (call == issue_of.end() || buckets[call->second->call] == r.buckets[call->second->call]) {
        moved[ei] = here;
        rebuilt.push_back(std::move(ev));  // sizes already set
        rebuilt.back().work = next;
        mine.push_back(next++);
        continue;
      }
      if (call->second->bucket != 0) continue;  // its buckets are issued with the first
      const ShardCall& c = r.calls[call->second->call];
      const std::vector<int64_t> bytes = call_bytes(c, w);
      const auto& split = buckets[call->second->call];
      for (uint32_t b = 0; b < split.size(); ++b) {
        TraceEvent issue = ev;
        issue.collective.bytes = bucket_bytes(bytes, split[b]);
        issue.work = next;
        mine.push_back(next++);
        out->issued.push_back({ti, static_cast<uint32_t>(rebuilt.size()), call->second->call, b});
        rebuilt.push_back(std::move(issue));
      }
    }
    // Waits of the later buckets went with the first's; a call's waits come back to back.
    old = std::move(rebuilt);
  }
  return true;
}

}  // namespace titan
