// Pipeline ranks that record the same step (simulation.pipeline_rank_reuse). A deep pipeline's
// middle ranks each hold stages with the same layer count and the same neighbours, so their
// recorded segments (one per schedule action) are the same; only the order the schedule runs
// them in differs (1F1B's warm-up is ranks - 1 - r forwards). record_pipeline records one rank
// per key below and builds the others from its segments in their own schedule's order, with
// the storage resizes moved along, so that each rank's memory walk follows its own order.
// Used by trainer/simulate/simulate_pipeline.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/pipeline_schedule.h"
#include "parallel/pipeline_stages.h"
#include "trainer/config/job_config.h"

namespace titan {

struct RecordedPipeline;

// Where one storage resize of a recorded rank was made: the segment it fell in and how many
// of that segment's compute ops came before it (StorageResize::at_op counts the whole step's).
struct ResizePlace {
  size_t segment = 0;
  int64_t op = 0;
};

// What decides a pipeline rank's recorded segments, besides the order: per stage it holds,
// its transformer layers, whether it is the first or the last stage (embedding, output, a tied
// embedding's all-reduce), whether a neighbouring stage is on the same rank (a hand-off
// instead of a send and a receive), and under layer-level selective AC which of its layers
// are recomputed. Ranks with equal keys record equal segments.
std::vector<int64_t> pipeline_rank_key(const PipeSchedule& s, const std::vector<StageLayers>& stages,
                                       const JobConfig& cfg, int rank);

// Fills pipeline rank q of `rec` (segments, storages, resizes, memory, calls, parameters) from
// recorded rank p's segments, each action relabelled as q's own and placed where q's schedule
// (rec.schedule, the recorded one) runs it. p_resizes: ResizePlace of each of p's storage
// resizes. Returns false and leaves q empty when p's actions do not map one to one onto q's.
bool copy_pipeline_rank(RecordedPipeline& rec, const std::vector<ResizePlace>& p_resizes, int p, int q);

}  // namespace titan
