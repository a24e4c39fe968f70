// Runs n independent jobs on a pool of threads with a progress line on stderr (done/total,
// rate, time left); results land by index, so the output order never depends on timing.
// Used by the sweep and the layout search.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace titan::study {

struct RunStats {
  int64_t jobs = 0;
  int threads = 0;
  double wall_s = 0;
  double cpu_s = 0;  // this process's CPU time over the run, all its threads (not recorder processes)
  double rate() const { return wall_s > 0 ? static_cast<double>(jobs) / wall_s : 0; }
};

// Wall and CPU time (this process, every thread) since it was made: run_parallel's, and a
// caller's whose run includes work before the jobs (a best-layout table's prefetching).
class RunTimer {
 public:
  RunTimer();
  double wall_s() const;
  double cpu_s() const;

 private:
  double wall0_, cpu0_;
};

// threads <= 0: every core (std::thread::hardware_concurrency). progress_label empty: quiet.
// chunk: jobs are handed out that many consecutive ones at a time, which one thread runs in
// order (jobs that reuse what the previous one left, such as one layout's points at every
// chip count and their resized recordings, then find it on their own thread).
RunStats run_parallel(int64_t n, const std::function<void(int64_t)>& job, int threads,
                      const std::string& progress_label, int64_t chunk = 1);

}  // namespace titan::study
