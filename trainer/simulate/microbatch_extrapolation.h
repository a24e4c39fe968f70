// Micro-batch extrapolation beside layer extrapolation (layer_extrapolation.h): a named
// pipeline schedule is recorded with the fewest micro-batches (at least 3: a first, a middle
// and a last) whose schedule passes every pipeline rank through the same memory states as the
// full one, so that the memory walk is the full step's; each action of the full schedule then
// replays the recorded segment of the same op and stage for the same micro-batch (the first
// ones), the last for the last, and the last middle one for every other: a micro-batch's
// traces differ only in whether it is first (gradients created, not accumulated) or last.
// Recording is linear in micro-batches, replay is cheap. Used by record_pipeline
// (simulate_pipeline.h) under simulation.microbatch_extrapolation.
#pragma once

#include <vector>

#include "parallel/pipeline_schedule.h"
#include "trainer/config/job_config.h"

namespace titan {

struct RecordedPipeline;  // simulate_pipeline.h
struct ReplayedSegment;

// The micro-batch count record_pipeline records for `full` (its own count when none fewer
// holds as many in flight, or the schedule cannot be rebuilt by name).
int recorded_microbatch_count(const PipeSchedule& full);

// cfg with the full schedule's m micro-batches scaled to k, the schedule runs per step kept.
JobConfig with_microbatches(const JobConfig& cfg, int m, int k);

// The recorded segment each action of `full` replays: per pipeline rank of `rec` (recorded
// with `recorded` micro-batches per run), the recorded actions by (op, stage, micro-batch)
// within a run, and the plain segments before each.
std::vector<std::vector<ReplayedSegment>> extrapolated_program(const RecordedPipeline& rec, const PipeSchedule& full,
                                                                int recorded);

}  // namespace titan
