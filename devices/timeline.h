// Timeline: a discrete-event simulator of in-order device streams (one compute stream, any
// number of communication streams) with cross-stream dependencies; used by step_simulator.h.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace titan::devices {

struct TimelineTask {
  int stream = 0;
  double duration_s = 0;
  double ready_s = 0;            // cannot start before (e.g. when the host dispatched it)
  std::vector<int64_t> deps;     // ids of earlier tasks that must finish first
  std::string category;          // for the cost breakdown ("matmul", "all_gather dp_shard")
  double overhead_s = 0;         // part of duration_s counted as overhead_category
  std::string overhead_category = "launch overhead";
};

struct TaskTiming {
  double start_s = 0;
  double end_s = 0;
};

struct StreamBusy {
  std::string name;
  bool communication = false;
  double busy_s = 0;
};

struct TimelineSummary {
  double makespan_s = 0;
  double compute_busy_s = 0;         // union of compute-stream busy time
  double comm_busy_s = 0;            // union of communication-stream busy time
  double exposed_comm_s = 0;         // communication while no compute runs
  double exposed_comm_fraction = 0;  // exposed_comm_s / makespan_s
  double idle_s = 0;                 // neither computing nor communicating (host bound)
  std::vector<StreamBusy> streams;
  // Busy seconds per category (launch overhead split out), largest first.
  std::vector<std::pair<std::string, double>> categories;
};

// Streams execute their tasks in the order added (CUDA-stream / TPU-queue semantics). A task
// starts at max(its stream is free, every dependency has ended, ready_s). Because tasks are
// added in program order and depend only on earlier tasks, every event time is final when
// the task is added: the event loop collapses to one pass, O(1) per task.
class Timeline {
 public:
  int add_stream(const std::string& name, bool communication);
  int64_t add(const TimelineTask& task);
  const TaskTiming& timing(int64_t id) const { return timings_[static_cast<size_t>(id)]; }
  double stream_free_s(int stream) const { return streams_[static_cast<size_t>(stream)].free_s; }
  int64_t last_task(int stream) const { return streams_[static_cast<size_t>(stream)].last; }
  int64_t size() const { return static_cast<int64_t>(tasks_.size()); }
  TimelineSummary summarize() const;  // O(n log n) in the number of tasks

 private:
  struct Stream {
    std::string name;
    bool communication = false;
    double free_s = 0;
    int64_t last = -1;
  };
  std::vector<Stream> streams_;
  std::vector<TimelineTask> tasks_;
  std::vector<TaskTiming> timings_;
};

}  // namespace titan::devices
