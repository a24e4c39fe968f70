// Bytes of tensor memory the CPU allocator hands out on this thread (and on the collective
// progress threads working for it, which run under its debug info), and their peak: what a
// step really holds in tensors (the figure the simulator's memory walk predicts), without
// the process's code, libraries and allocator slack that the resident set adds. Listens
// through c10's memory reporting (the profiler's hook), so it cannot run while the profiler
// records memory; allocations made inside OpenMP worker threads are not seen.
#pragma once

#include <cstdint>
#include <memory>

namespace titan {

class TensorMemoryTracker {
 public:
  TensorMemoryTracker();
  ~TensorMemoryTracker();
  TensorMemoryTracker(const TensorMemoryTracker&) = delete;
  TensorMemoryTracker& operator=(const TensorMemoryTracker&) = delete;

  // Since the tracker started: allocated minus freed (tensors that existed before and are
  // freed meanwhile count negative), and the most that was.
  int64_t current() const;
  int64_t peak() const;
  void reset_peak();  // the peak starts again from current()

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  std::unique_ptr<struct TrackerGuard> guard_;
};

}  // namespace titan
