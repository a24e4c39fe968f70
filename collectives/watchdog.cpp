#include "collectives/watchdog.h"

#include <unistd.h>

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

void abort_job(const std::string& message) {
  std::fprintf(stderr, "titan: %s\n", message.c_str());
  std::fflush(stderr);
  // Whatever the hook does, this process is gone a few seconds later: a hook that hangs
  // (a wedged MPI) must not turn a failure into a hang.
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::seconds(5));
    _exit(kCommFailureExitCode);
  }).detach();
  std::function<void(int)> h;
  {
    std::lock_guard<std::mutex> lock(hook_mutex());
    h = hook();
  }
  if (h) h(kCommFailureExitCode);
  _exit(kCommFailureExitCode);
}

Watchdog& Watchdog::instance() {
  static Watchdog dog;
  return dog;
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t Watchdog::start(const OpInfo& info, double timeout_s) {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(timeout_s));
  std::lock_guard<std::mutex> lock(mu_);
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  uint64_t token = next_token_++;
  in_flight_.emplace(token, Entry{info, timeout_s, deadline});
  return token;
}

void Watchdog::finish(uint64_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_.erase(token);
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    // Polling at 100 ms keeps the abort within timeout + a fraction of a second without
    // having to wake the thread on every start/finish.
    cv_.wait_for(lock, std::chrono::milliseconds(100));
    auto now = std::chrono::steady_clock::now();
    for (const auto& [token, e] : in_flight_) {
      if (now < e.deadline) continue;
      std::ostringstream os;
      os << "collective timeout: " << describe(e.info) << " did not complete within "
         << e.timeout_s << " s (a peer died, hangs, or skipped the call); aborting the job";
      std::string msg = os.str();
      lock.unlock();
      abort_job(msg);
    }
  }
}

}  // namespace titan
