#include "trainer/components/tensor_memory.h"

#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <algorithm>

namespace titan {

struct TensorMemoryTracker::Impl : c10::MemoryReportingInfoBase {
  int64_t current = 0, peak = 0;
  void reportMemoryUsage(void*, int64_t alloc_size, int64_t, int64_t, c10::Device device) override {
    if (!device.is_cpu()) return;
    current += alloc_size;  // negative for a free
    peak = std::max(peak, current);
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
void TensorMemoryTracker::reset_peak() { impl_->peak = impl_->current; }

}  // namespace titan
