// Chrome trace-event JSON (chrome://tracing, Perfetto) of a simulated step: one track per
// stream of the representative rank's timeline (host dispatch, compute, and one per
// collective kind and group), events named by cost category. Used by titan-train
// ([profiling] enable_profiling with [simulation] enable) and titan-study --trace.
#pragma once

#include <string>

#include "devices/step_simulator.h"
#include "trainer/config/job_config.h"
#include "trainer/simulate/simulate.h"
#include "trainer/simulate/simulate_pipeline.h"

namespace titan {

// report.events must be filled (SimulationOptions::keep_events). Times in microseconds.
std::string chrome_trace_json(const devices::StepReport& report, const std::string& title);

// Under pipeline parallelism: one process per pipeline rank, with a compute track (each
// schedule action, e.g. "1F3" = stage 1 forward of micro-batch 3, and the code outside the
// schedule), a send/recv track and a bubble track (the rank waiting for other stages), from
// the replay's timing (compose_pipeline_step).
std::string pipeline_chrome_trace_json(const RecordedPipeline& rec, const PipelineReplayReport& replay,
                                       const std::string& title);

// The trace of cfg's recorded step replayed on `chip` as `placement`: chrome_trace_json, or
// pipeline_chrome_trace_json under PP. Used by titan-train and titan-study --trace.
std::string step_trace_json(const JobConfig& cfg, const RecordedStep& rec, const devices::ChipSpec& chip,
                            const devices::Placement& placement, const std::string& title);

// Writes the JSON text to `path` (creating its folder); returns the path.
std::string write_trace_file(const std::string& path, const std::string& json);
// write_trace_file(path, chrome_trace_json(report, title)).
std::string write_chrome_trace(const std::string& path, const devices::StepReport& report, const std::string& title);

// <job.dump_folder>/<profiling.save_traces_folder>: where traces go, real
// (trainer/step_profiler.h) or simulated.
std::string traces_folder(const JobConfig& cfg);

}  // namespace titan
