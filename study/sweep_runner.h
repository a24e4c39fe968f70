// A sweep: every combination of a sweep file evaluated in parallel through one recording
// cache. Used by titan-study and the tests.
#pragma once

#include <vector>

#include "study/evaluate.h"
#include "study/parallel_runner.h"
#include "study/recording_cache.h"
#include "study/sweep_file.h"

namespace titan::study {

struct SweepRun {
  std::vector<Point> points;  // in combination order
  RunStats stats;
};

SweepRun run_sweep(const JobConfig& base, const std::vector<Overrides>& combos, RecordingCache& cache, int threads,
                   const std::string& progress_label);

}  // namespace titan::study
