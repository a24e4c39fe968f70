// Replica derivation (see replica_derivation.h).
#include "trainer/simulate/replica_derivation.h"

#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "trainer/simulate/shard_notes.h"
#include "trainer/simulate/shard_plan.h"
#include "trainer/step/trainer.h"

namespace titan {
namespace {

const char* const kReplicaGroup = "dp_replicate";

// t without its collectives on the replica group, rebuilt through the Trace API (handles
// numbered as a recording without them numbers them; the data flow derived again).
devices::Trace without_replica_collectives(const devices::Trace& t) {
  devices::Trace out;
  std::map<int64_t, int64_t> work;  // a kept issue's handle -> its handle in out
  for (const devices::TraceEvent& e : t.events()) {
    if (e.type == devices::TraceEvent::Type::kCompute) {
      out.compute(e.op);
    } else if (e.type == devices::TraceEvent::Type::kIssue) {
      if (e.collective.group != kReplicaGroup) work[e.work] = out.issue(e.collective);
    } else if (auto it = work.find(e.work); it != work.end()) {
      out.wait(it->second);
    }
  }
  out.storages() = t.storages();
  out.storage_resizes() = t.storage_resizes();
  return out;
}

// FSDP's notes without its calls on the replica group; each other call's position (the
// issues before it on its rank) less the replica issues among them.
ShardNotes without_replica_calls(const ShardNotes& notes, const RecordedStep& replicated) {
  ShardNotes out = notes;
  for (size_t q = 0; q < out.ranks.size(); ++q) {
    std::vector<int64_t> replica_before = {0};  // replica issues among the first n issues
    for (const devices::Trace* t : rank_traces(replicated, q))
      for (const devices::TraceEvent& e : t->events())
        if (e.type == devices::TraceEvent::Type::kIssue)
          replica_before.push_back(replica_before.back() + (e.collective.group == kReplicaGroup ? 1 : 0));
    std::vector<ShardCall> kept;
    for (ShardCall& c : out.ranks[q].calls) {
      if (c.group == kReplicaGroup) continue;
      TITAN_CHECK(c.position >= 0 && static_cast<size_t>(c.position) < replica_before.size(),
                  "replica derivation: an FSDP call after the last issue");
      c.position -= replica_before[static_cast<size_t>(c.position)];
      kept.push_back(std::move(c));
    }
    out.ranks[q].calls = std::move(kept);
  }
  return out;
}

}  // namespace

bool replica_derivable(const JobConfig& cfg) {
  const ParallelDims d = parallel_dims(cfg, cfg.simulation.num_chips);
  return cfg.comm.collective_mode == CollectiveMode::kSeparate && d.dp_replicate == 1 && shard_resizable(cfg);
}

JobConfig with_two_replicas(const JobConfig& cfg) {
  const ParallelDims d = parallel_dims(cfg, cfg.simulation.num_chips);
  JobConfig c = cfg;
  auto& p = c.parallelism;
  p.data_parallel_replicate_degree = 2;
  p.data_parallel_shard_degree = d.dp_shard;
  p.tensor_parallel_degree = d.tp;
  p.pipeline_parallel_degree = d.pp;
  p.context_parallel_degree = d.cp;
  c.simulation.num_chips = 2 * d.dp_shard * d.tp * d.pp * d.cp;
  return c;
}

ProbeRecording probe_without_replicas(const ProbeRecording& replicated, const JobConfig& cfg) {
  const RecordedStep& r = replicated.step;
  TITAN_CHECK(r.dims.dp_replicate == 2, "replica derivation: the step is at dp_replicate ", r.dims.dp_replicate);
  RecordedStep s;
  s.chip = r.chip;
  s.placement = r.placement;
  s.dims = r.dims;
  s.dims.dp_replicate = 1;
  s.dims.world_size = r.dims.world_size / 2;
  s.op_counts = r.op_counts;  // the same ops
  s.local_params = r.local_params;
  s.param_elem_bytes = r.param_elem_bytes;
  s.microbatches = r.microbatches;
  TITAN_CHECK(r.global_batch % 2 == 0, "replica derivation: odd global batch ", r.global_batch);
  s.global_batch = r.global_batch / 2;  // dp_replicate x dp_shard x rows (x schedule runs)
  // Communicator calls: a probe's are cleared (shard_resize.h), so there are none to carry.
  TITAN_CHECK(r.calls.empty(), "replica derivation: a step with Communicator calls");
  if (!r.pipeline) {
    s.trace = without_replica_collectives(r.trace);
    s.memory = devices::trace_memory(s.trace);
  } else {
    auto p = std::make_shared<RecordedPipeline>(*r.pipeline);
    for (size_t q = 0; q < p->ranks.size(); ++q) {
      TITAN_CHECK(p->calls[q].empty(), "replica derivation: a pipeline rank with Communicator calls");
      for (PipelineSegment& seg : p->ranks[q]) seg.trace = without_replica_collectives(seg.trace);
      p->memory[q] = rank_memory(*p, q);
    }
    s.pipeline = std::move(p);
  }
  return make_probe(std::move(s), replicated.degree, without_replica_calls(probe_notes(replicated), r), cfg);
}

}  // namespace titan
