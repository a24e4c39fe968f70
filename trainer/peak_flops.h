// The peak FLOP/s per rank that the training log's MFU divides by, and where it came from.
// Used by the train loop (trainer/train.cpp) and its tests.
#pragma once

#include <string>

#include "trainer/config/job_config.h"

namespace titan {

struct PeakFlops {
  double flops = 0;    // FLOP/s per rank
  std::string source;  // printed in the log: which figure this is
  bool probed = false; // measured by this host's sgemm probe (may read low under load)
};

// The first of: metrics.peak_flops; the cpu calibration file's sgemm_flops (written by
// launch/calibrate-cpu, TITAN_CPU_CALIBRATION) when measured with `threads` intra-op threads;
// a probe figure cached on disk for this CPU model and thread count (TITAN_PEAK_CACHE, default
// $XDG_CACHE_HOME/titan/peak_flops.toml or ~/.cache/titan/...); else a probe run now (the best
// of several short sgemm runs, the least disturbed by other load) and cached there. A
// stable figure: the same host and threads give the same peak from run to run.
PeakFlops resolve_peak_flops(const JobConfig& cfg, int threads);

// The cache file resolve_peak_flops reads and writes.
std::string peak_cache_path();

// MFU in percent, at most 100. A figure above 100 means the peak is too low (a probe under
// load): the first time, `warn` is set to a line saying so.
double capped_mfu_percent(double achieved_flops, const PeakFlops& peak, std::string* warn);

}  // namespace titan
