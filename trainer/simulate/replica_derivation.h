// Replica derivation: a layout's step at dp_replicate 1 from its step at dp_replicate 2. At one
// dp_shard degree the two record the same compute ops (names, sizes, tensors, data flow: FSDP's
// gradient shards are what the replica all-reduce reads, and a group of one issues nothing);
// the replicated step adds the all-reduces on the dp_replicate group. Under separate
// collectives each is issued and waited where it is called, and removing it is all. Under fused
// collectives HSDP starts a unit's all-reduce as the next unit's reduce-scatter is issued
// (Fsdp::wire, FsdpUnit::start_replicate_reduce): it waits the unit's reduce-scatter there and
// releases its inputs (a second time: FSDP noted them done just before), then issues the
// all-reduce, which complete_reduce waits at the end of backward. At dp_replicate 1 that
// reduce-scatter wait and release happen in complete_reduce instead, so they move to where the
// all-reduce was waited (the wait events in its place, the releases to its compute op, in the
// order of the waits). Work handles and FSDP's noted call positions are renumbered. The result
// is the step recorded at dp_replicate 1 event by event, storage resizes and memory included,
// with and without pipeline and tensor parallelism (tests/study/replica_derivation_test.cpp).
// A step whose events do not have that shape is refused (titan::Error), and the study records
// the probe instead. A study records the dp_replicate 2 probe once and derives the
// dp_replicate 1 probe from it (study/recording_cache.cpp).
#pragma once

#include <cstdint>

#include "trainer/config/job_config.h"
#include "trainer/simulate/shard_resize.h"

namespace titan {

// Whether cfg's probe can be derived from its dp_replicate 2 layout's: dp_replicate 1, dp_shard
// resizable (shard_resize.h); either collective mode.
bool replica_derivable(const JobConfig& cfg);
// cfg with dp_replicate 2 (num_chips doubled, every other degree as resolved for cfg).
JobConfig with_two_replicas(const JobConfig& cfg);

// The probe of cfg (dp_replicate 1) from `replicated`, its dp_replicate 2 layout's probe at
// the same dp_shard degree. Throws titan::Error when the two cannot be the same step (a replica
// issue FSDP did not note, an all-reduce waited other than once per issue, a moved all-reduce
// without its reduce-scatter wait before it or its inputs' second release, other resizes where
// the releases would go).
ProbeRecording probe_without_replicas(const ProbeRecording& replicated, const JobConfig& cfg);

}  // namespace titan
