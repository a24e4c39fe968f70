// Counts the aten::mm calls on this thread while alive (a block's linear products, fused or
// composite): what activation-checkpointing tests compare to tell what a recompute reran.
#pragma once

#include <ATen/record_function.h>

#include <cstdint>
#include <memory>
#include <string>

namespace titan {

struct MmCounter {
  static int64_t& count() {
    thread_local int64_t n = 0;
    return n;
  }
  MmCounter() {
    count() = 0;
    handle = at::addThreadLocalCallback(at::RecordFunctionCallback(
        [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
          if (std::string(fn.name()) == "aten::mm") ++count();
          return nullptr;
        }));
  }
  ~MmCounter() { at::removeCallback(handle); }
  MmCounter(const MmCounter&) = delete;
  MmCounter& operator=(const MmCounter&) = delete;
  at::CallbackHandle handle;
};

}  // namespace titan
