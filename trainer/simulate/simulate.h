// Simulated training: the trainer's own step (meta-device model with the real dims, the real
// parallel plans over a `sim` World of num_chips ranks) recorded for one representative rank
// and replayed on a device model (devices/step_simulator.h). Used by titan-train when
// [simulation] enable = true, by launch/validation-table, the benchmark and the tests.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collectives/sim_backend.h"
#include "collectives/world.h"
#include "devices/memory_model.h"
#include "devices/step_simulator.h"
#include "devices/trace_memory.h"
#include "parallel/parallel_dims.h"
#include "trainer/config/job_config.h"
#include "trainer/simulate/simulate_pipeline.h"

namespace titan {

// One recorded step of the representative rank.
struct RecordedStep {
  devices::ChipSpec chip;
  devices::Placement placement;
  ParallelDims dims;
  devices::Trace trace;
  std::vector<SimCollectiveEvent> calls;  // every Communicator call (for comparisons)
  std::map<std::string, int64_t> op_counts;
  int64_t local_params = 0;      // parameter elements this rank stores (its shards)
  int64_t param_elem_bytes = 4;  // storage dtype of the parameters (mixed_precision_param)
  int64_t microbatches = 1;
  int64_t global_batch = 0;
  // The step's memory unfused and fused (devices/trace_memory.h), each walked once per
  // recording, when a replay first asks for it: a study replays it many times. Anything that
  // rewrites the trace's sizes gives it new ranges or byte overrides.
  devices::StepMemory memory;
  // Pipeline parallelism: every pipeline rank's step cut at the schedule's actions (the
  // fields above then describe the first pipeline rank).
  std::shared_ptr<RecordedPipeline> pipeline;
};

// The chip a config names; "cpu" reads its constants from the calibration file
// (TITAN_CPU_CALIBRATION, default <source>/outputs/cpu_calibration.toml).
devices::ChipSpec simulated_chip(const JobConfig& cfg);
// A sim World of `chips` ranks in which this process is rank `rank`, with cfg's communication
// options: what a recording's trainer runs over.
std::shared_ptr<World> sim_world(const JobConfig& cfg, int64_t chips, int64_t rank);
// simulation.execution as the device model names it.
devices::ExecutionMode execution_mode(const JobConfig& cfg);
std::string cpu_calibration_path();

// Mesh dims of a layout, outermost first, as devices::place_mesh takes them.
std::vector<devices::MeshDim> mesh_dims(const ParallelDims& dims);

// Validates device, degrees and topology (config errors), then records one training step
// with cfg.comm.collective_mode. Chip count enters only through group sizes.
// place = false: no placement (RecordedStep::placement stays empty) and no topology check,
// for a recording replayed at other chip counts only (trainer/simulate/shard_resize.h).
RecordedStep record_step(const JobConfig& cfg, bool place = true);
// Whether record_step, and record_probe through it, walk each recording's memory
// (RecordedStep::memory, RecordedPipeline::memory); on unless turned off. A process that only
// sends its recordings over the wire (study/recorder_pool.cpp) turns it off: memory is not on
// the wire, and the decode walks it again (recording_wire.h).
void set_recording_walks_memory(bool walk);

struct SimulationResult {
  devices::StepReport report;
  devices::MemoryReport memory;
  ParallelDims dims;
  // Expert parallelism (MoE): ep borrowed from dp_shard x cp, etp 1 or tp; not mesh dims.
  int64_t ep = 1, etp = 1;
  std::string placement;  // Placement::describe()
  int64_t num_chips = 0, global_batch = 0, seq_len = 0, microbatches = 1;
  double flops_per_token = 0;  // TorchTitan's convention, docs/mfu.md
  double tokens_per_s_per_chip = 0, tflops_per_chip = 0, mfu_percent = 0;
  double peak_flops = 0;  // chip's dense bf16 peak (cpu: measured sgemm rate)
  std::string other_mode;  // the other collective mode, re-recorded and replayed
  double other_step_time_s = 0, other_mfu_percent = 0;
  double wall_s = 0;  // this process's time to record and replay (both modes)
  // Layer extrapolation (layer_extrapolation.h): the depths recorded when the figures come
  // from shallow samples (empty: recorded at full depth), else why, when the option was on.
  std::vector<int64_t> extrapolated_from_layers;
  std::string full_depth_reason;
  std::vector<std::string> rejected_samples;  // shallower samples tried first, each with why
  // report.exposed_comm_s split by collective kind (devices/exposed_by_kind.h), largest first.
  std::vector<devices::CostItem> exposed_comm_by_kind;
  // Pipeline parallelism (empty without): schedule, bubble over every pipeline rank, each
  // pipeline rank's busy time and memory (the memory above is the largest).
  std::string pipeline_schedule;
  int64_t pipeline_stages = 0;
  // Per schedule run: micro-batches replayed, and recorded (fewer under micro-batch extrapolation).
  int64_t pipeline_microbatches = 0, pipeline_recorded_microbatches = 0;
  double pipeline_bubble_fraction = 0;
  std::vector<double> pipeline_rank_busy_s;
  std::vector<double> pipeline_rank_memory_gib;
};

// The step's throughput figures, each under one name: titan-train's simulation.json and the
// study's results.csv / results.jsonl (study/results_io.cpp) both write them from this list,
// so the two share one schema for them (simulation_report.cpp).
struct StepFigure {
  const char* name;
  double (*of)(const SimulationResult&);
};
const std::vector<StepFigure>& step_figures();

// What a replay takes from its recording: the device report and the recording's per-rank
// counts. SimulationResult adds what follows from the config (batch, MFU, memory), so that
// layer extrapolation (layer_extrapolation.h) can scale these figures from shallow
// recordings and finish them for the config's depth.
struct ReplayFigures {
  devices::StepReport report;
  ParallelDims dims;
  int64_t local_params = 0, param_elem_bytes = 4, microbatches = 1, global_batch = 0;
  devices::TraceMemory memory;  // the recorded step's own (devices/trace_memory.h)
  // Pipeline parallelism (empty without): per pipeline rank.
  bool pipeline = false;
  std::string pipeline_schedule;
  int64_t pipeline_stages = 0;
  int64_t pipeline_microbatches = 0, pipeline_recorded_microbatches = 0;  // per schedule run
  double bubble_fraction = 0;
  std::vector<devices::CostItem> exposed_by_kind;  // exposed communication by collective kind
  std::vector<double> rank_busy_s;
  std::vector<int64_t> rank_local_params;
  std::vector<devices::TraceMemory> rank_memory;
  std::vector<bool> rank_holds_output;
  // Under PP, what the report was composed from: every segment's cost, the recording's
  // schedule and segments, and the options; layer extrapolation composes the schedule again
  // on extrapolated segment costs (a pipeline's makespan is a maximum over paths, so it is
  // extended per segment rather than as a whole).
  PipelineSegmentCosts segment_costs;
  std::shared_ptr<const RecordedPipeline> pipeline_structure;
  devices::SimulationOptions options;
};

// memo: replays already made, reused where the same trace meets the same chip, options and
// group placements (devices/replay_memo.h; a study keeps one per evaluating thread).
ReplayFigures replay_figures(const JobConfig& cfg, const RecordedStep& rec, const devices::ChipSpec& chip,
                             const devices::Placement& placement, bool keep_events = false,
                             devices::ReplayMemo* memo = nullptr);
// The result for cfg: throughput and MFU from the report, memory from cfg's model and the
// figures' parameter counts, the bubble from the pipeline ranks' busy time.
SimulationResult finish_replay(const JobConfig& cfg, const ReplayFigures& f, const devices::ChipSpec& chip,
                               const devices::Placement& placement);

// Replays a recorded step of cfg on `chip` placed as `placement`: a study reuses one
// recording for every device and chip count whose per-rank step is the same.
// keep_events: report.events holds every timeline task (Chrome traces; not under PP).
SimulationResult replay_step(const JobConfig& cfg, const RecordedStep& rec, const devices::ChipSpec& chip,
                             const devices::Placement& placement, bool keep_events = false,
                             devices::ReplayMemo* memo = nullptr);

// Records and replays the step; with `other_mode`, also under the other collective mode.
// recorded: where to keep cfg's recording (for a trace of it), if wanted.
SimulationResult simulate(const JobConfig& cfg, bool other_mode = true, RecordedStep* recorded = nullptr);

// Reports (simulation_report.cpp).
// "pp 2 x dp_shard 64 x tp 4" (degrees above 1), "single chip" when none.
std::string layout_string(const ParallelDims& d);

std::string format_report(const SimulationResult& r);
std::string to_json(const SimulationResult& r);

// titan-train's entry: simulate, print the report, write <dump_folder>/simulation.json.
void run_simulation(const JobConfig& cfg);

}  // namespace titan
