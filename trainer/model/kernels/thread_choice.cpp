#include "trainer/model/kernels/thread_choice.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>

#include <ATen/Functions.h>
#include <omp.h>

namespace titan {
namespace {

struct Key {
  const char* site;
  int64_t a, b, c;
  bool operator==(const Key& o) const { return site == o.site && a == o.a && b == o.b && c == o.c; }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = std::hash<const void*>()(k.site);
    for (int64_t v : {k.a, k.b, k.c}) h = h * 1000003u ^ std::hash<int64_t>()(v);
    return h;
  }
};

// TITAN_THREAD_CHOICE=0 starts with the choice off (every site on all threads): for A/B runs.
bool enabled_from_env() {
  const char* v = std::getenv("TITAN_THREAD_CHOICE");
  return !(v && std::string(v) == "0");
}

std::atomic<bool> g_enabled{enabled_from_env()};
std::atomic<int> g_forced{-1};

bool periodic_from_env() {
  const char* v = std::getenv("TITAN_THREAD_CHOICE");
  return v && std::string(v) == "periodic";
}

bool log_from_env() {
  const char* v = std::getenv("TITAN_THREAD_CHOICE_LOG");
  return v && std::string(v) == "1";
}

}  // namespace

ThreadChoiceState& thread_choice_state(const char* site, int64_t a, int64_t b, int64_t c) {
  // Per thread: no lock on the hot path; the autograd engine and the caller each learn their own.
  thread_local std::unordered_map<Key, ThreadChoiceState, KeyHash> states;
  return states[Key{site, a, b, c}];
}

void log_thread_choice(const char* site, int64_t a, int64_t b, int64_t c, const ThreadChoiceState& s) {
  static const bool on = log_from_env();
  if (!on) return;
  std::fprintf(stderr, "titan: thread choice %s (%lld, %lld, %lld): 1 thread %.3f ms, all %.3f ms -> %s\n", site,
               static_cast<long long>(a), static_cast<long long>(b), static_cast<long long>(c), s.best[0] * 1e3,
               s.best[1] * 1e3, s.decided == 0 ? "1 thread" : "all");
}

void set_intra_op_threads(int n) { omp_set_num_threads(n); }

void set_thread_choice_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }
bool thread_choice_enabled() { return g_enabled.load(std::memory_order_relaxed); }

void set_thread_choice_forced(int variant) { g_forced.store(variant, std::memory_order_relaxed); }
int thread_choice_forced() { return g_forced.load(std::memory_order_relaxed); }

ThreadChoiceState* thread_bits_check_due(const char* site, int64_t a, int64_t b, int64_t c) {
  if (at::get_num_threads() <= 1 || at::in_parallel_region() || !thread_choice_enabled()) return nullptr;
  ThreadChoiceState& s = thread_choice_state(site, a, b, c);
  if (s.bits_checked) return nullptr;
  s.bits_checked = true;
  return &s;
}

void pin_unless_same_bits(ThreadChoiceState& s, const std::function<at::Tensor()>& probe) {
  const int full = at::get_num_threads();
  at::Tensor one;
  {
    struct Restore {
      int n;
      ~Restore() { set_intra_op_threads(n); }
    } restore{full};
    set_intra_op_threads(1);
    one = probe();
  }
  s.pinned = !at::equal(one, probe());
}

bool thread_choice_periodic_retries() {
  static const bool on = periodic_from_env();
  return on;
}

}  // namespace titan
