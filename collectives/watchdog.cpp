#include "collectives/watchdog.h"

#include "collectives/abort_cleanup.h"
#include "collectives/job_abort.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace titan {

namespace {
std::mutex& hook_mutex() {
  static std::mutex mu;
  return mu;
}
std::function<void(int)>& hook() {
  static std::function<void(int)> h;
  return h;
}
}  // namespace

std::string describe(const OpInfo& info) {
  std::ostringstream os;
  os << info.op;
  if (info.bytes > 0) os << " (" << info.bytes << " bytes)";
  os << " on group '" << info.group << "' (rank " << info.group_rank << " of "
     << info.group_size << ", global rank " << info.global_rank << ")";
  return os.str();
}

void set_job_abort_hook(std::function<void(int)> h) {
  std::lock_guard<std::mutex> lock(hook_mutex());
  hook() = std::move(h);
}

void abort_job(const std::string& message) { abort_job_with_status(message, kCommFailureExitCode); }

void abort_job_with_status(const std::string& message, int exit_code) {
  std::fprintf(stderr, "titan: %s\n", message.c_str());
  end_job(exit_code);
}

void end_job(int exit_code) {
  std::fflush(stderr);
  std::fflush(stdout);
  // Whatever the hook does, this process is gone a few seconds later: a hook that hangs
  // (a wedged MPI) must not turn a failure into a hang.
  std::thread([exit_code] {
    std::this_thread::sleep_for(std::chrono::seconds(5));
    _exit(exit_code);
  }).detach();
  std::function<void(int)> h;
  {
    std::lock_guard<std::mutex> lock(hook_mutex());
    h = hook();
  }
  // Every rank that fails removes them: the first one to go may be any rank, and the
  // others may be killed by the launcher before they get here.
  remove_abort_dirs();
  if (h) h(exit_code);
  _exit(exit_code);
}

Watchdog& Watchdog::instance() {
  // Never destroyed: a communicator held by a static object may be destroyed after any
  // static watchdog would be, and its slot unregisters then. The thread ends with the
  // process.
  static Watchdog* dog = new Watchdog;
  return *dog;
}

void Watchdog::add(WatchSlot* slot) {
  std::lock_guard<std::mutex> lock(mu_);
  slots_.push_back(slot);
}

void Watchdog::remove(WatchSlot* slot) {
  std::lock_guard<std::mutex> lock(mu_);
  slots_.erase(std::remove(slots_.begin(), slots_.end(), slot), slots_.end());
}

void Watchdog::start_thread() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // Polling at 100 ms keeps the abort within timeout + a fraction of a second without
    // having to wake the thread on every op.
    cv_.wait_for(lock, std::chrono::milliseconds(100));
    const int64_t now = now_ns();
    for (WatchSlot* slot : slots_) {
      std::string msg;
      if (!slot->claim_expired(now, &msg)) continue;
      lock.unlock();
      abort_job(msg);
    }
  }
}

WatchSlot::WatchSlot(OpInfo who, double timeout_s) : who_(std::move(who)), timeout_s_(timeout_s) {
  Watchdog::instance().add(this);
}

WatchSlot::~WatchSlot() { Watchdog::instance().remove(this); }

void WatchSlot::begin(const char* op, int64_t bytes) {
  if (!thread_started_) {
    Watchdog::instance().start_thread();
    thread_started_ = true;
  }
  op_.store(op, std::memory_order_relaxed);
  bytes_.store(bytes, std::memory_order_relaxed);
  const int64_t timeout_ns = static_cast<int64_t>(timeout_s_ * 1e9);
  // Release: the watchdog that acquires this deadline sees this op's name and bytes.
  deadline_ns_.store(Watchdog::now_ns() + timeout_ns, std::memory_order_release);
}

bool WatchSlot::claim_expired(int64_t now_ns, std::string* message) {
  int64_t deadline = deadline_ns_.load(std::memory_order_relaxed);
  if (deadline <= 0 || now_ns < deadline) return false;
  // The op may end right now; whoever of end() and this swaps the deadline first wins.
  if (!deadline_ns_.compare_exchange_strong(deadline, kReporting, std::memory_order_acquire))
    return false;
  OpInfo info = who_;
  info.op = op_.load(std::memory_order_relaxed);
  info.bytes = bytes_.load(std::memory_order_relaxed);
  std::ostringstream os;
  os << "collective timeout: " << describe(info) << " did not complete within " << timeout_s_
     << " s (a peer died, hangs, or skipped the call); aborting the job";
  *message = os.str();
  return true;
}

void WatchSlot::wait_for_abort() {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace titan
