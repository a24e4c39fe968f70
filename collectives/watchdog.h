// Watchdog: one process-wide thread that aborts the job when a collective runs past its
// timeout, and abort_job(), the one way the collective layer ends a job on a comm failure.
// Used by Communicator (every op is watched) and the backends (init, transport errors).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace titan {

// What an op is, for the message a timeout prints.
struct OpInfo {
  std::string op;     // "all_reduce", "all_gather", "new_group", ...
  std::string group;  // communicator name, e.g. "dp_shard"
  int group_rank = 0;
  int group_size = 1;
  int global_rank = 0;
  int64_t bytes = 0;
};

// "all_reduce (4096 bytes) on group 'tp' (rank 1 of 2, global rank 3)".
std::string describe(const OpInfo& info);

// Exit code of a job ended by the collective layer (timeout, dead peer, transport error).
constexpr int kCommFailureExitCode = 3;

// Prints "titan: <message>" on stderr and ends this process and, through the backend's
// hook (MPI_Abort), the whole job. Never returns; never hangs (falls back to _exit).
[[noreturn]] void abort_job(const std::string& message);

// The backend that owns the job sets how to take every rank down (MPI: MPI_Abort).
void set_job_abort_hook(std::function<void(int exit_code)> hook);

// One watched op at a time, e.g. the ops of one communicator (they run one after another).
// begin() and end() are three atomic stores and one exchange, without lock or allocation,
// so that watching costs nothing next to a microsecond-scale op; the watchdog thread polls
// the slots. A slot is registered with the watchdog for its whole life.
class WatchSlot {
 public:
  // who: group and ranks of the ops (op and bytes come with each begin()); timeout_s > 0.
  WatchSlot(OpInfo who, double timeout_s);
  ~WatchSlot();
  WatchSlot(const WatchSlot&) = delete;
  WatchSlot& operator=(const WatchSlot&) = delete;

  // op must stay valid until end() returns (a literal, or a string owned by the op).
  void begin(const char* op, int64_t bytes);
  void end() {
    if (deadline_ns_.exchange(0, std::memory_order_acq_rel) == kReporting) wait_for_abort();
  }
  const OpInfo& who() const { return who_; }

 private:
  friend class Watchdog;
  // Marks an op the watchdog is reporting: its op string must stay alive, so end() waits
  // (for the abort, which follows).
  static constexpr int64_t kReporting = -1;
  // If the op in flight is past its deadline at now_ns: claims it and returns the message.
  bool claim_expired(int64_t now_ns, std::string* message);
  [[noreturn]] static void wait_for_abort();

  const OpInfo who_;
  const double timeout_s_;
  std::atomic<const char*> op_{""};
  std::atomic<int64_t> bytes_{0};
  std::atomic<int64_t> deadline_ns_{0};  // steady clock; 0: no op in flight, or kReporting
  bool thread_started_ = false;          // touched by the op's thread only
};

class Watchdog {
 public:
  static Watchdog& instance();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

 private:
  friend class WatchSlot;
  Watchdog() = default;
  void add(WatchSlot* slot);
  void remove(WatchSlot* slot);
  void start_thread();  // on the first op: a process that never communicates has no thread
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<WatchSlot*> slots_;
  std::thread thread_;
};

// RAII: watches the enclosing scope's op (group creation, rendezvous).
class WatchScope {
 public:
  WatchScope(const OpInfo& info, double timeout_s) : slot_(info, timeout_s) {
    slot_.begin(slot_.who().op.c_str(), info.bytes);
  }
  ~WatchScope() { slot_.end(); }
  WatchScope(const WatchScope&) = delete;
  WatchScope& operator=(const WatchScope&) = delete;

 private:
  WatchSlot slot_;
};

}  // namespace titan
