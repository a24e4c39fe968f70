// Pipeline-parallel simulation: one representative rank per pipeline rank (pp coordinate,
// every other coordinate 0; ranks whose stages record alike share one recording,
// pipeline_rank_reuse.h) records the trainer's own step on the meta device, its trace cut
// at every schedule action; each action is costed on the device model, and the actions of
// all pipeline ranks are replayed together in the schedule's order with send / recv costs
// over the placed topology (devices/pipeline_replay.h). Bubbles, stage imbalance and transfer
// costs thus come out of the replay. Used by trainer/simulate/simulate.cpp and its tests.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "collectives/sim_backend.h"
#include "devices/pipeline_replay.h"
#include "devices/trace_memory.h"
#include "devices/placement.h"
#include "devices/step_simulator.h"
#include "parallel/pipeline_schedule.h"
#include "trainer/config/job_config.h"
#include "trainer/simulate/microbatch_extrapolation.h"

namespace titan {

// A piece of one rank's recorded step: one schedule action of one schedule run (a local
// batch), or the code around the schedule (batch, gradient reduction, optimizer).
struct PipelineSegment {
  bool is_action = false;
  PipeAction action;
  int run = 0;  // which schedule run of the step (gradient accumulation)
  devices::Trace trace;
  int64_t p2p_bytes = 0;  // sends / receives: the message size
};

// One step of a pipeline rank's replayed program: which recorded segment runs, as which
// action of which schedule run.
struct ReplayedSegment {
  size_t segment = 0;  // index into RecordedPipeline::ranks[rank]
  PipeAction action;   // the segment's own unless it stands in for another micro-batch
  int run = 0;
  bool operator==(const ReplayedSegment& o) const { return segment == o.segment && action == o.action && run == o.run; }
};

struct RecordedPipeline {
  PipeSchedule schedule;                              // the step's schedule, every micro-batch
  int64_t runs = 1;                                   // schedule runs per step
  // Micro-batches per schedule run that were recorded: schedule.num_microbatches, or fewer
  // under micro-batch extrapolation (record_pipeline).
  int recorded_microbatches = 1;
  std::vector<std::vector<PipelineSegment>> ranks;    // per pipeline rank, as recorded, program order
  // Per pipeline rank, the program replayed over `schedule`: the recorded segments in order,
  // or, extrapolated, every action of `schedule` on the recorded segment of its kind.
  std::vector<std::vector<ReplayedSegment>> program;
  std::vector<std::vector<SimCollectiveEvent>> calls;  // per pipeline rank: every call
  std::vector<int64_t> local_params;                  // per pipeline rank: elements stored
  // Per pipeline rank: its step's memory (devices/trace_memory.h) and what the walk takes
  // besides the segments, to walk them again after a resize.
  std::vector<devices::StepMemory> memory;
  std::vector<std::vector<devices::StorageRecord>> storages;
  std::vector<std::vector<devices::StorageResize>> storage_resizes;
  std::vector<bool> holds_output;                     // per pipeline rank: the last stage
  // Pipeline rank reuse (pipeline_rank_reuse.h): per rank, the rank whose recorded segments it
  // was built from (-1: recorded itself) and, per segment of its own, the one it copies there.
  // Costing takes those segments' costs instead of simulating the copies again. Whatever
  // changes a rank's segments after recording must set its entry to -1.
  std::vector<int> copied_from;
  std::vector<std::vector<size_t>> copied_segment;
  int64_t param_elem_bytes = 4;
};

struct RecordOptions;  // trace_recorder.h

// Records every pipeline rank's step (sim World of `chips` ranks; simulate_pipeline.cpp).
// recording: what the recorder keeps as one kernel, after the chip (record_options).
// With simulation.microbatch_extrapolation, a named schedule is recorded with fewer
// micro-batches and replayed over the full one (microbatch_extrapolation.h).
// With simulation.pipeline_rank_reuse, a rank whose key (pipeline_rank_reuse.h) an earlier
// rank had is built from that rank's segments instead of recorded.
// walk_memory = false: the recorded ranks' memory (RecordedPipeline::memory) is left unwalked,
// for a recording sent over the wire, whose decode walks it (set_recording_walks_memory).
RecordedPipeline record_pipeline(const JobConfig& cfg, int64_t chips, const RecordOptions& recording,
                                 bool walk_memory = true);

// A rank's recorded segments indexed: each action by (schedule run, op, stage, micro-batch),
// the plain segments (batch, gradient reduction, optimizer) before each action, and those
// after the last.
struct SegmentIndex {
  std::map<std::tuple<int, int, int, int>, size_t> action_at;
  std::vector<std::vector<size_t>> plain_before;  // per segment (empty for a plain one)
  std::vector<size_t> plain_after;
};
SegmentIndex index_segments(const std::vector<PipelineSegment>& segs);

// Pipeline rank q's memory, walked over its segments in program order.
devices::StepMemory rank_memory(const RecordedPipeline& p, size_t q);

struct PipelineReplayReport {
  devices::StepReport report;           // step time = the replay's makespan; per-chip figures
                                        // are the first pipeline rank's, its waits as bubble
  std::vector<double> rank_busy_s;      // per pipeline rank: time in its own segments
  double bubble_fraction = 0;           // over every pipeline rank (devices/pipeline_replay.h)
  // The first pipeline rank's exposed communication by collective kind (devices/exposed_by_kind.h),
  // blocking sends included in separate mode.
  std::vector<devices::CostItem> exposed_by_kind;
  // When each step of each pipeline rank's program ran (RecordedPipeline::program): traces.
  std::vector<std::vector<devices::PipeTiming>> timing;
};

// The replay (simulate_pipeline_replay.cpp). Every segment costed on its own (the
// schedule's composition left to compose_pipeline_step): what layer extrapolation scales from shallow recordings.
struct PipelineSegmentCosts {
  std::vector<std::vector<double>> duration_s;  // per pipeline rank, per recorded segment (a receive: 0)
  std::vector<devices::StepReport> rank0;       // the first pipeline rank's non-p2p segments
  std::vector<std::vector<devices::CostItem>> rank0_exposed;  // theirs by collective kind
  std::vector<char> rank0_latency_bound;        // per segment of the first rank: a latency-bound send
};
PipelineSegmentCosts cost_pipeline_segments(const RecordedPipeline& rec, const devices::Placement& placement,
                                            const devices::ChipSpec& chip, const devices::SimulationOptions& options);
// The schedule replayed on those costs (its makespan, bubble, and the first rank's report).
PipelineReplayReport compose_pipeline_step(const RecordedPipeline& rec, const PipelineSegmentCosts& costs,
                                           const devices::SimulationOptions& options);

// fused collective mode: sends and receives asynchronous on the pp stream; separate:
// blocking, each with the separate-mode launch cost. compose(cost(...)).
PipelineReplayReport replay_pipeline_step(const RecordedPipeline& rec, const devices::Placement& placement,
                                          const devices::ChipSpec& chip, const devices::SimulationOptions& options);

}  // namespace titan
