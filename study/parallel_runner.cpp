// Thread pool with progress (see parallel_runner.h).
#include "study/parallel_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <mutex>
#include <thread>

#include <sys/resource.h>
#include <unistd.h>
#include <vector>

namespace titan::study {
namespace {

double now_wall_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double process_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return s(u.ru_utime) + s(u.ru_stime);
}

}  // namespace

RunTimer::RunTimer() : wall0_(now_wall_s()), cpu0_(process_cpu_s()) {}
double RunTimer::wall_s() const { return now_wall_s() - wall0_; }
double RunTimer::cpu_s() const { return process_cpu_s() - cpu0_; }

RunStats run_parallel(int64_t n, const std::function<void(int64_t)>& job, int threads,
                      const std::string& label, int64_t chunk) {
  chunk = std::max<int64_t>(1, chunk);
  RunStats st;
  st.jobs = n;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  st.threads = threads = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(1, n)));
  const RunTimer timer;
  std::atomic<int64_t> next{0}, done{0};
  std::exception_ptr failure;
  std::mutex mu;
  double last_print = 0;  // timer.wall_s() then
  const bool tty = isatty(2) != 0;
  const double every = tty ? 0.25 : 5.0;
  auto print = [&](bool final) {
    const double el = timer.wall_s();
    const int64_t d = done.load();
    const double rate = el > 0 ? static_cast<double>(d) / el : 0;
    const double left = rate > 0 ? static_cast<double>(n - d) / rate : 0;
    // A terminal gets one line rewritten in place; a log gets a line every few seconds.
    std::fprintf(stderr, "%s%s: %lld/%lld done, %.1f/s, %.1f s left%s", tty ? "\r" : "", label.c_str(),
                 static_cast<long long>(d), static_cast<long long>(n), rate, left, tty && !final ? "   " : "\n");
    std::fflush(stderr);
  };
  auto worker = [&] {
    for (int64_t i = 0, end = 0;; ++i) {
      if (i == end) {
        i = next.fetch_add(chunk);
        if (i >= n) break;
        end = std::min(n, i + chunk);
      }
      try {
        job(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failure) failure = std::current_exception();
        next = n;  // stop handing out work
        end = i + 1;
      }
      ++done;
      if (label.empty()) continue;
      std::lock_guard<std::mutex> lock(mu);
      const double now = timer.wall_s();
      if (now - last_print > every) {
        last_print = now;
        print(false);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  st.wall_s = timer.wall_s();
  st.cpu_s = timer.cpu_s();
  if (!label.empty()) print(true);
  if (failure) std::rethrow_exception(failure);
  return st;
}

}  // namespace titan::study
