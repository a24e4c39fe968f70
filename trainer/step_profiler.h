// StepProfiler: Chrome trace-event JSON (Perfetto, chrome://tracing) of real training steps,
// driven by TorchTitan's [profiling] keys (enable_profiling, save_traces_folder,
// profile_freq). Every aten op, autograd node, user scope and collective of a profiled step
// is an event on the thread that ran it; each rank writes its own file and rank 0 merges them
// into one trace with a process per rank. Used by train().
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "trainer/config/job_config.h"

namespace titan {

class Communicator;

class StepProfiler {
 public:
  // world: every rank's communicator (barriers align the ranks' clocks and order the merge).
  StepProfiler(const JobConfig& cfg, Communicator* world);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Whether the step numbered `step` (1-based, as logged) is traced: every profile_freq-th.
  bool traces(int64_t step) const;
  // Around one train_step(); every rank calls both for every step (the profiled ones run
  // barriers). after_step returns the merged trace's path on rank 0 of a profiled step, else "".
  void before_step(int64_t step);
  std::string after_step(int64_t step);

 private:
  struct State;
  const ProfilingSection options_;
  const std::string folder_;
  Communicator* world_;
  std::unique_ptr<State> state_;
};

}  // namespace titan
