#include "trainer/components/tensor_memory.h"

#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <atomic>

namespace titan {

// Atomic: a communicator's progress thread runs its ops under the issuer's debug info
// (collectives/communicator.cpp), so frees of reduced buffers arrive from that thread.
struct TensorMemoryTracker::Impl : c10::MemoryReportingInfoBase {
  std::atomic<int64_t> current{0}, peak{0};
  void reportMemoryUsage(void*, int64_t alloc_size, int64_t, int64_t, c10::Device device) override {
    if (!device.is_cpu()) return;
    const int64_t now = current.fetch_add(alloc_size) + alloc_size;  // negative for a free
    int64_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
  }
  bool memoryProfilingEnabled() const override { return true; }
};

struct TrackerGuard {
  explicit TrackerGuard(std::shared_ptr<c10::DebugInfoBase> info)
      : guard(c10::DebugInfoKind::PROFILER_STATE, std::move(info)) {}
  c10::DebugInfoGuard guard;
};

TensorMemoryTracker::TensorMemoryTracker()
    : impl_(std::make_shared<Impl>()), guard_(std::make_unique<TrackerGuard>(impl_)) {}
TensorMemoryTracker::~TensorMemoryTracker() = default;

int64_t TensorMemoryTracker::current() const { return impl_->current; }
int64_t TensorMemoryTracker::peak() const { return impl_->peak; }
void TensorMemoryTracker::reset_peak() { impl_->peak = impl_->current.load(); }

}  // namespace titan
