// ProgressThread: a FIFO worker that runs one communicator's async ops in issue order
// (fused mode), so the issuing thread keeps computing. Used by Communicator.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace titan {

class ProgressThread {
 public:
  ProgressThread();
  // Runs every task still queued, then joins.
  ~ProgressThread();
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  // Tasks must not throw (Communicator catches and stores errors in the Work).
  void post(std::function<void()> task);

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;  // last member: starts after the state above exists
};

}  // namespace titan
