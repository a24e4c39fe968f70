// Watchdog: one process-wide thread that aborts the job when a collective runs past its
// timeout, and abort_job(), the one way the collective layer ends a job on a comm failure.
// Used by Communicator (every op is watched) and the backends (init, transport errors).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

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

class Watchdog {
 public:
  static Watchdog& instance();
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Watches one op until finish(token). timeout_s > 0.
  uint64_t start(const OpInfo& info, double timeout_s);
  void finish(uint64_t token);

 private:
  Watchdog() = default;
  void loop();

  struct Entry {
    OpInfo info;
    double timeout_s;
    std::chrono::steady_clock::time_point deadline;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Entry> in_flight_;
  uint64_t next_token_ = 1;
  bool stop_ = false;
  std::thread thread_;  // started on the first start(), joined by the destructor
};

// RAII: watches the enclosing scope's op.
class WatchScope {
 public:
  WatchScope(const OpInfo& info, double timeout_s)
      : token_(Watchdog::instance().start(info, timeout_s)) {}
  ~WatchScope() { Watchdog::instance().finish(token_); }
  WatchScope(const WatchScope&) = delete;
  WatchScope& operator=(const WatchScope&) = delete;

 private:
  uint64_t token_;
};

}  // namespace titan
