// The `sim` backend: a World of N simulated ranks in which this process plays one
// representative rank; its communicators move no data (meta tensors welcome) and report each
// collective (issue, per flat buffer) and each wait to a listener. Used by the trainer's
// simulator (trainer/simulate/simulate.cpp, trainer/simulate/trace_recorder.cpp) and by tests.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace titan {

// One event the sim communicators report, in program order on the issuing thread.
struct SimCollectiveEvent {
  enum class Type { kIssue, kWait, kCall };
  Type type = Type::kIssue;
  // kIssue: one flat collective as the backend hook receives it (one bucket in fused mode).
  // kCall: one Communicator call as a real backend's observer sees it (op, group, total bytes
  // of every bucket); issued before its kIssue events. For comparing with real runs.
  std::string op;      // "all_gather", "reduce_scatter", "all_reduce", "broadcast", ...
  std::string group;   // communicator name ("fsdp", "dp_replicate", "tp", "world", ...)
  int64_t group_size = 1;
  // kIssue: nccl-tests convention (devices/collective_cost.h): all_gather output bytes,
  // reduce_scatter input bytes, all_reduce/broadcast buffer bytes, all_to_all bytes sent.
  int64_t bytes = 0;
  std::string stream;  // kIssue: the stream it runs on (the communicator's progress thread)
  bool async = true;   // kIssue: fused mode (overlappable) vs separate (blocking) issue
  int64_t id = -1;     // kIssue: a job-unique id; kWait: the id waited on
};

using SimListener = std::function<void(const SimCollectiveEvent&)>;

// The listener every sim communicator reports to (empty: events are dropped). Set it before
// the step and clear it after; not thread safe against concurrent collectives by design (the
// simulated step issues from one thread).
void set_sim_listener(SimListener listener);

// A copy between device and host memory the trainer makes outside any communicator (activation
// offload, parallel/activation_checkpoint.h), reported to the listener as a kIssue of op
// "host_copy" on group and stream "d2h" or "h2d". Returns its id, -1 (and reports nothing)
// with no listener set; sim_report_wait reports a wait on it (none for -1).
int64_t sim_report_host_copy(bool to_host, int64_t bytes);
void sim_report_wait(int64_t id);

// World size and the rank this process represents for the next `sim` World (the backend
// factory reads it; CommOptions has no field for it). Defaults: size 1, rank 0.
void set_sim_world(int64_t size, int64_t rank = 0);

}  // namespace titan
