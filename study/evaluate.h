// One study point: a config (base + overrides) replayed on the simulator through the
// recording cache, with its verdict (ok, does not fit, config error) and the step-time
// breakdown the plots stack. Used by the sweep runner, the layout search and the tests.
#pragma once

#include <string>
#include <vector>

#include "study/recording_cache.h"
#include "study/sweep_file.h"
#include "trainer/simulate/simulate.h"

namespace titan::study {

enum class Verdict { kOk, kDoesNotFit, kInvalid };
const char* verdict_name(Verdict v);  // "ok" | "oom" | "invalid"

// The step split into parts that add up to the step time (seconds, the first pipeline
// rank's view under PP): compute-stream busy, communication while compute waits (by
// collective kind and group where the timeline attributes it), the pipeline bubble
// (waiting for other stages) and the rest of the idle time (host dispatch bound).
struct Breakdown {
  double compute_s = 0, exposed_comm_s = 0, bubble_s = 0, idle_s = 0;
  // exposed_comm_s by collective kind (devices/exposed_by_kind.h), largest first.
  std::vector<devices::CostItem> exposed_by_kind;
};
Breakdown breakdown_of(const SimulationResult& r);

struct Point {
  Overrides overrides;      // what this point changed on the base config
  JobConfig cfg;            // the resulting config
  Verdict verdict = Verdict::kInvalid;
  std::string reason;       // why it is not ok (the simulator's message)
  SimulationResult result;  // filled when ok, and for kDoesNotFit (memory)
  bool extrapolated = false;  // figures from shallow recordings (layer_extrapolation.h)
  std::string full_depth_reason;  // why not, when layer extrapolation was on
  Breakdown breakdown;
};

// What prefetch() queued for a point: its config and the recordings it asked for, which
// evaluate() takes instead of applying the overrides and asking the cache again.
struct Prefetched {
  bool ok = false;  // the overrides applied and the config validated
  JobConfig cfg;
  bool sampled = false;  // recs: its layer samples (layer_samples(cfg)), else cfg itself
  std::vector<int64_t> layers;  // the depths of what it asks for first (unsampled: cfg's own, resolved)
  std::vector<std::shared_future<std::shared_ptr<const RecordedStep>>> recs;
};

// base + overrides (apply_override, then validate) replayed through the cache. Never throws
// for a bad combination: config errors become kInvalid with the message. pre: what
// prefetch(base, overrides, cache) returned, if kept (its recordings are taken from it).
Point evaluate(const JobConfig& base, const Overrides& overrides, RecordingCache& cache, Prefetched* pre = nullptr);
Point evaluate_config(const JobConfig& cfg, RecordingCache& cache, Prefetched* pre = nullptr);
// Queues the recordings evaluate(base, overrides) will ask for first (its layer samples, or
// the config itself), so that the recorder thread works ahead; bad combinations are skipped.
Prefetched prefetch(const JobConfig& base, const Overrides& overrides, RecordingCache& cache);
// prefetch() in two steps, for a caller that orders the points by what they will record
// before it queues anything: the config and its first recordings' depths, then the queueing.
Prefetched plan_prefetch(const JobConfig& base, const Overrides& overrides, const RecordingCache& cache);
void queue_prefetch(Prefetched& pre, RecordingCache& cache);

// The value of a config key in this point as text ("simulation.num_chips" -> "8192"); the
// registry's own spelling, so every key a sweep can set can be read back.
std::string key_value(const JobConfig& cfg, const std::string& key);

// The activation checkpointing choice a layout search names (SearchSpace): "none",
// "selective" (every Nth block), "full", or "op" (selective with the op-level policy).
std::string ac_choice(const JobConfig& cfg);

}  // namespace titan::study
