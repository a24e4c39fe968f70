// Shard resizing: one recording serves every dp_shard degree of a layout. Between two degrees
// W of the same per-rank batch, tensor, pipeline and replicate degrees, the recorded step
// differs only in FSDP's shard-sized tensors (ceil(N / W) elements of an N-element
// parameter: shards, their gradients, optimizer state and temporaries; W times that for the
// padded full buffers), in the bytes of FSDP's collectives over them, and in the parameters
// stored; group sizes come from the placement at replay. A study records a layout once at a
// probe degree W0 chosen so that every shard size can be told from every other size in the
// step (no W0 divides a parameter, shards above scalar sizes), with FSDP noting its
// shard-sized tensors and collectives (parallel/fsdp_observer.h); the sizes of the tensors
// computed from them follow through the trace's data flow. resize_for_shard_degree() then
// rewrites those sizes, the collectives' bucket bytes (re-planned as the communicator plans
// them; a different bucket split refuses), the parameters stored and the global batch for any
// W >= 2. Anything it cannot account for exactly (an unclassified size on a shard storage, a
// matmul over a shard, a bucket plan that changes) makes it refuse, and the caller records the
// degree itself. tests/study checks resized recordings against fresh ones. Used by
// study/recording_cache.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/config/job_config.h"
#include "trainer/simulate/simulate.h"

namespace titan {

struct ShardPlan;  // what FSDP noted, and where the sizes to rewrite are (shard_plan.h)

// A recording made at a probe degree, with what resizing needs. Where its sizes are is worked
// out by the first resize (on that thread, once), so the recorder thread only records.
struct ProbeRecording {
  RecordedStep step;
  int64_t degree = 0;  // W0, the probe's dp_shard degree
  std::shared_ptr<ShardPlan> plan;
};

// Whether cfg's recording can come from a probe: dp_shard >= 2, no context parallelism.
bool shard_resizable(const JobConfig& cfg);

// cfg at dp_shard degree w (num_chips follows; every other degree as resolved for cfg).
JobConfig with_shard_degree(const JobConfig& cfg, int64_t w);

// Records cfg's layout at a probe degree: the first small odd prime (first_degree first, if
// it is one) at which every shard size is distinguishable; a degree that is not is refused
// when FSDP's plan is built, before the step is recorded. Config errors propagate; throws
// titan::Error when no probe degree works.
ProbeRecording record_probe(const JobConfig& cfg, int64_t first_degree = 3);

// cfg's step recorded at its own dp_shard degree with FSDP's notes, as a probe holds them, but
// without a probe degree's checks (shard sizes told apart, every FSDP plan over the probe
// degree): not for resizing. For tests of what else is made from a probe's notes (replica
// derivation) on layouts no probe degree records, such as expert parallelism (the one probe
// degree ep can divide is ep itself, and the router's experts x dim weight is a multiple of it).
ProbeRecording record_noted(const JobConfig& cfg);

// A probe from its parts: the step recorded at `degree` (calls cleared) and what FSDP noted
// meanwhile; cfg gives the collective mode and bucket cap. record_probe's result, and a probe
// carried from a recorder process (trainer/simulate/recording_wire.h).
struct ShardNotes;  // shard_notes.h
ProbeRecording make_probe(RecordedStep step, int64_t degree, ShardNotes notes, const JobConfig& cfg);
const ShardNotes& probe_notes(const ProbeRecording& probe);

// What a resized step holds: which probe it came from, at which bucket split, and where the
// probe's events went (a call whose buckets split anew has its issues and waits rebuilt).
// Resizing that probe into it again for a degree of the same split then rewrites only the
// sizes that follow the degree, in place, instead of copying the whole step.
struct ResizedLayout;  // shard_rebucket.h
struct ResizeState {
  std::shared_ptr<const ShardPlan> plan;  // the probe's (held: its address is never another's)
  std::shared_ptr<ResizedLayout> layout;
  bool last_in_place = false;  // the last resize into it rewrote sizes only (no copy)
};

// The probe's recording rewritten for cfg's dp_shard degree (cfg: the target config, for the
// collective bucket cap and mode). false, with why, when it cannot be done exactly. The
// result has no Communicator calls (RecordedStep::calls) and the probe's placement.
// state (optional): what *out held before, updated to what it holds after.
bool resize_for_shard_degree(const ProbeRecording& probe, const JobConfig& cfg, RecordedStep* out, std::string* why,
                             ResizeState* state = nullptr);

}  // namespace titan
