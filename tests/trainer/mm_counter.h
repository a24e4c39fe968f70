// Counts the aten::mm calls on this thread while alive (a block's linear products, fused or
// composite): what activation-checkpointing tests compare to tell what a recompute reran.
// libtorch runs on one thread meanwhile: with more (a Trainer earlier in the process sets
// them), the fused kernels run some products on pool threads, which this count would miss.
#pragma once

#include <ATen/Parallel.h>
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
  MmCounter() : threads(at::get_num_threads()) {
    if (threads != 1) at::set_num_threads(1);
    count() = 0;
    handle = at::addThreadLocalCallback(at::RecordFunctionCallback(
        [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
          if (std::string(fn.name()) == "aten::mm") ++count();
          return nullptr;
        }));
  }
  ~MmCounter() {
    at::removeCallback(handle);
    if (threads != 1) at::set_num_threads(threads);
  }
  MmCounter(const MmCounter&) = delete;
  MmCounter& operator=(const MmCounter&) = delete;
  int threads;
  at::CallbackHandle handle;
};

}  // namespace titan
