// Replica derivation: a layout's step at dp_replicate 1 from its step at dp_replicate 2, under
// separate collectives. At one dp_shard degree the two record the same compute ops (names,
// sizes, tensors, data flow: FSDP's gradient shards are what the replica all-reduce reads,
// and a group of one issues nothing); the replicated step adds only the all-reduces on the
// dp_replicate group, each issued and waited where it is called. Removing them, and renumbering
// the work handles and FSDP's noted call positions, gives the step recorded at dp_replicate 1
// event by event (tests/study/replica_derivation_test.cpp). Under fused collectives HSDP waits
// for reduce-scatters earlier (the replica all-reduce starts as the next block's reduce-scatter
// is issued), so waits move and the steps are not derived. A study records the dp_replicate 2
// probe once and derives the dp_replicate 1 probe from it (study/recording_cache.cpp).
#pragma once

#include <cstdint>

#include "trainer/config/job_config.h"
#include "trainer/simulate/shard_resize.h"

namespace titan {

// Whether cfg's probe can be derived from its dp_replicate 2 layout's: separate collectives,
// dp_replicate 1, dp_shard resizable (shard_resize.h).
bool replica_derivable(const JobConfig& cfg);
// cfg with dp_replicate 2 (num_chips doubled, every other degree as resolved for cfg).
JobConfig with_two_replicas(const JobConfig& cfg);

// The probe of cfg (dp_replicate 1) from `replicated`, its dp_replicate 2 layout's probe at
// the same dp_shard degree. Throws titan::Error when the two cannot be the same step
// (a compute op on the way, FSDP calls on the replica group that are not in the trace).
ProbeRecording probe_without_replicas(const ProbeRecording& replicated, const JobConfig& cfg);

}  // namespace titan
