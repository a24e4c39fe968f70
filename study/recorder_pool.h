// Where a study's recordings are made. Recording drives process-wide state (libtorch's global
// RecordFunction callbacks, the sim World, the FSDP observer), so one process records one step
// at a time; to record on every core, titan-study forks recorder processes when it starts,
// before any thread exists (a fork after libgomp or libtorch started their pools is unsafe),
// and each records what it is sent: the config as TOML, the step back as bytes
// (trainer/simulate/recording_wire.h). A process with threads already running gets no
// recorder processes and records in-process. Used by study/recording_cache.cpp and
// study/study_cli.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "study/recording_store.h"
#include "trainer/config/job_config.h"
#include "trainer/simulate/shard_resize.h"
#include "trainer/simulate/simulate.h"

namespace titan::study {

class Recorder {
 public:
  virtual ~Recorder() = default;
  // record_step(cfg) and record_probe(cfg, first_degree), with their errors. Not thread safe:
  // one caller at a time (the cache gives each recorder a thread of its own).
  virtual RecordedStep record(const JobConfig& cfg) = 0;
  virtual ProbeRecording probe(const JobConfig& cfg, int64_t first_degree) = 0;
  // A recorder process's CPU time since it started (0 in this process, whose own CPU time
  // counts it).
  virtual double cpu_seconds() const { return 0; }
};

// Records in this process. The first step a process records differs from every later one (by
// up to 2% of the step time: libtorch's first-use work lands in the trace), so the first call
// records its config once more and drops that recording.
std::unique_ptr<Recorder> in_process_recorder();

// n recorder processes; none when n <= 0 or this process already runs more than one thread.
// A recorder whose process died reports it as a titan::Error on the call that saw it. With a
// store, each recorder reads what it is asked for from it when it can and saves what its
// process recorded there (study/recording_store.h); a process no request reaches records
// nothing.
std::vector<std::unique_ptr<Recorder>> start_recorder_processes(int n,
                                                                std::shared_ptr<RecordingStore> store = nullptr);

}  // namespace titan::study
