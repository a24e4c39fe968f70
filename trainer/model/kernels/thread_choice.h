// Per call site and shape, whether a piece of intra-op work (a GEMM, a fused kernel) runs on
// all of the intra-op threads or on one, chosen by timing both. Why: whether a second thread
// pays depends on the shape and on the machine. A GEMM of 1024 x 128 x 128 takes ~0.2 ms on
// one core; split over two threads, OpenBLAS and the OpenMP pool spend about as much in
// hand-offs and waits, and when the other core is busy with another process the waits grow
// to milliseconds (a 2-thread debug-model step ran 3-6x slower than a 1-thread one on a
// loaded 2-core host). Large GEMMs do scale. The shapes of a training step repeat every step,
// so each (site, shape) is timed a few times each way early on and then keeps the faster.
// The trials of a shape fall within a second or so (the layers share it), so a burst of
// other load then can put a large GEMM on one thread for good; so the kept variant stays
// timed, and the other one is tried again after 16 calls, then 32, 64, ... (backing off while
// the choice holds): if that one call beats the kept variant's best since the last retry,
// it takes over and the back-off starts again. A retry of the one-thread variant while all
// threads are kept waits until a kept call has taken longer than one thread's best: before
// that it cannot win (one thread's best is a floor that load only raises), and at a large
// GEMM on 2 threads each such retry costs about one more call (the 0.6B-shaped slice's
// shapes are all due in the same few steps: 16 calls after the decision, then 32 more).
// Retries of all threads stay on the back-off: their trials' best is what a load burst
// spoils. The retries cost a few calls early on and almost nothing later.
//
// Results do not depend on the choice. The fused kernels routed here compute each output
// element on one thread in a fixed order, so for them a choice changes speed only. OpenBLAS's
// GEMMs need not: on a Zen 4 host (0.3.21 runs its Haswell kernels there) float GEMMs of
// 128 x 128 x 256 and larger gave other bits on 2 threads than on 1 (1, 3 and 4 agreed at
// 512^3: the 2-thread split moves which rows the kernel's edge code computes), while on the
// hosts of earlier sessions a test comparing the choice on and off found the same bits. So a
// GEMM site checks before its first timed call (linear_kernel.cpp's check_mm_bits, through
// pin_unless_same_bits): the same product on random operands of the same shapes and layout,
// on one thread and on all; if the two differ the (site, shape) stays on all threads for good,
// the bits of a run with the choice off. A pthreads OpenBLAS ignores the one-thread setting
// (both variants then run alike).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

namespace titan {

constexpr int kThreadChoiceTrials = 3;
constexpr int64_t kThreadChoiceFirstRetry = 16;

struct ThreadChoiceState {
  double best[2] = {1e300, 1e300};  // fastest time seen with one thread [0] and with all [1]
  int trials[2] = {0, 0};
  int seen = 0;
  int decided = -1;  // -1: still timing; else the variant kept
  int64_t retry_interval = kThreadChoiceFirstRetry;
  int64_t until_retry = kThreadChoiceFirstRetry;  // calls of the kept variant before a retry
  double kept_best = 1e300;  // the kept variant's fastest time since the decision or last retry
  bool retry_may_win = true;  // false while all threads are kept and beat one thread's best
  bool bits_checked = false;
  bool pinned = false;  // all threads for good: one thread gave other bits (pin_unless_same_bits)
};

// This thread's state for (site, a, b, c); site is a string literal (compared by address).
ThreadChoiceState& thread_choice_state(const char* site, int64_t a, int64_t b, int64_t c);
// omp_set_num_threads for the calling thread, which is what at::parallel_for and OpenBLAS read.
void set_intra_op_threads(int n);
// False turns the timing off: work always runs on all threads (tests use it to compare;
// TITAN_THREAD_CHOICE=0 in the environment starts with it off, for A/B benchmarks).
void set_thread_choice_enabled(bool on);
bool thread_choice_enabled();
// TITAN_THREAD_CHOICE=periodic: every retry on the back-off, also those that cannot win (the
// rule before 2026-12-01's fifth session), for A/B benchmarks.
bool thread_choice_periodic_retries();
// With TITAN_THREAD_CHOICE_LOG=1 in the environment, each decision goes to stderr (site, the
// three shape numbers, the best times of both variants, the one kept): to check on a quiet
// host whether a site the timing put on one thread should have had all of them.
void log_thread_choice(const char* site, int64_t a, int64_t b, int64_t c, const ThreadChoiceState& s);
// Tests: 0 or 1 runs every unpinned site on that variant (one thread / all), untimed; -1 times.
void set_thread_choice_forced(int variant);
int thread_choice_forced();

// The state of (site, a, b, c) if its bit check is still due (marking it done), else null:
// none is due with one intra-op thread, inside a parallel region or with the choice off.
ThreadChoiceState* thread_bits_check_due(const char* site, int64_t a, int64_t b, int64_t c);
// Runs probe() on one thread and on all; pins s to all threads if the results differ bit for bit.
void pin_unless_same_bits(ThreadChoiceState& s, const std::function<at::Tensor()>& probe);

// Runs f() on one thread or on all of them, as chosen for (site, a, b, c).
template <typename F>
void with_chosen_threads(const char* site, int64_t a, int64_t b, int64_t c, F&& f) {
  const int full = at::get_num_threads();
  if (full <= 1 || at::in_parallel_region() || !thread_choice_enabled()) {
    f();
    return;
  }
  ThreadChoiceState& s = thread_choice_state(site, a, b, c);
  if (s.pinned) {
    f();
    return;
  }
  const int forced = thread_choice_forced();
  // The first call of a shape warms caches and the allocator: run it, time nothing.
  const bool timing = forced < 0 && (s.decided >= 0 || s.seen++ > 0);
  const bool retry = timing && s.decided >= 0 && --s.until_retry < 0 && (s.retry_may_win || thread_choice_periodic_retries());
  const int variant = forced >= 0 ? forced
                      : s.decided >= 0 ? (retry ? 1 - s.decided : s.decided)
                                       : (s.trials[0] <= s.trials[1] ? 0 : 1);
  struct Restore {
    int n;
    bool on;
    ~Restore() {
      if (on) set_intra_op_threads(n);
    }
  } restore{full, variant == 0};
  if (variant == 0) set_intra_op_threads(1);
  const auto t0 = std::chrono::steady_clock::now();
  f();
  if (!timing) return;
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (t < s.best[variant]) s.best[variant] = t;
  if (s.decided >= 0) {
    if (!retry) {
      if (t < s.kept_best) s.kept_best = t;
      s.retry_may_win = s.decided == 0 || t > s.best[0];
      return;
    }
    const bool switched = t < s.kept_best;
    if (switched) s.decided = variant;
    s.retry_interval = switched ? kThreadChoiceFirstRetry : 2 * s.retry_interval;
    s.until_retry = s.retry_interval;
    s.kept_best = 1e300;
    if (switched) log_thread_choice(site, a, b, c, s);
    return;
  }
  if (++s.trials[variant] >= kThreadChoiceTrials && s.trials[1 - variant] >= kThreadChoiceTrials) {
    s.decided = s.best[0] < s.best[1] ? 0 : 1;
    s.retry_may_win = s.decided == 0;
    log_thread_choice(site, a, b, c, s);
  }
}

// at::parallel_for(begin, end, grain, f) on the thread count chosen for (site, end - begin, a).
template <typename F>
void chosen_parallel_for(const char* site, int64_t a, int64_t begin, int64_t end, int64_t grain, const F& f) {
  with_chosen_threads(site, end - begin, a, grain, [&] { at::parallel_for(begin, end, grain, f); });
}

}  // namespace titan
