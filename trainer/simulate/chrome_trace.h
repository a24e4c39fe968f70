// Chrome trace-event JSON (chrome://tracing, Perfetto) of a simulated step: one track per
// stream of the representative rank's timeline (host dispatch, compute, and one per
// collective kind and group), events named by cost category. Used by titan-train
// ([profiling] enable_profiling with [simulation] enable) and titan-study --trace.
#pragma once

#include <string>

#include "devices/step_simulator.h"
#include "trainer/config/job_config.h"

namespace titan {

// report.events must be filled (SimulationOptions::keep_events). Times in microseconds.
std::string chrome_trace_json(const devices::StepReport& report, const std::string& title);

// Writes the JSON to `path` (creating its folder); returns the path.
std::string write_chrome_trace(const std::string& path, const devices::StepReport& report, const std::string& title);

// <job.dump_folder>/<profiling.save_traces_folder>: where traces go, real
// (trainer/step_profiler.h) or simulated.
std::string traces_folder(const JobConfig& cfg);

}  // namespace titan
